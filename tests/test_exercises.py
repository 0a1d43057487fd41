"""Every exercise proved, as rustlings proves its own and beyond: each route stop has one; each skeleton cell in the
notebooks is blank, has the reference's signature and checks as "not attempted" with the committed text; each
reference passes and is what `solution()` shows; each known mistake gets its own message; odd answers get a failing
report, never a crash; two runs give the same report and leave the random generators as they were."""
import inspect
import json
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from looplab.callback import Callback, CancelFitException
from looplab.practice import Exercise, exercise, exercises, is_blank, wrong_shape

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from sizes import route  # noqa: E402

MARK = re.compile(r"^#\|\s*exercise\s+(\w+)\s*$", re.M)
ROUTE = [name for name, first in route() if first is not None]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def text_of(cell: dict) -> str:
    "The committed text a code cell shows (its display or printed output)."
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")) or "".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts).rstrip("\n")


def skeleton_cells() -> dict[str, tuple[str, dict, dict]]:
    "For each `#| exercise NAME` cell in nbs/: (notebook, the skeleton cell, the check cell after it)."
    found = {}
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(cells):
            match = MARK.search(source(cell)) if cell["cell_type"] == "code" else None
            if match:
                assert match.group(1) not in found, f"two skeleton cells for {match.group(1)}"
                checks = [c for c in cells[i + 1:] if c["cell_type"] == "code" and ".check(" in source(c)]
                assert checks, f"{path.name}: the skeleton of {match.group(1)} has no check cell after it"
                found[match.group(1)] = (path.stem, cell, checks[0])
    return found


SKELETONS = skeleton_cells()
NAMES = exercises()


@pytest.fixture(autouse=True)
def no_progress_file(monkeypatch):
    monkeypatch.setenv("LOOPLAB_PROGRESS", "off")


def skeleton(name: str):
    "The skeleton as the notebook hands it out: its cell run on its own (skeleton cells import what they use)."
    namespace: dict = {}
    exec(compile(source(SKELETONS[name][1]), f"<skeleton {name}>", "exec"), namespace)
    return namespace[name]


def test_every_route_stop_has_an_exercise_and_every_exercise_a_skeleton_in_its_notebook():
    stops = {notebook for notebook, _, _ in SKELETONS.values()}
    assert [stop for stop in ROUTE if stop not in stops] == []
    assert sorted(SKELETONS) == sorted(NAMES)
    assert all(SKELETONS[name][0] == exercise(name).notebook for name in NAMES)


def test_the_six_exercises_the_route_promises():
    promised = {"train_one_epoch": "01_bare_loop", "CountSteps": "02_callbacks", "smooth": "05b_loss_plot",
                "warmup_cos": "06_schedules", "AdamW": "07_optimizers", "shard": "14_distributed"}
    assert {name: exercise(name).notebook for name in promised if name in NAMES} == promised


def test_exercises_come_in_route_order():
    notebooks = [exercise(name).notebook for name in NAMES]
    assert notebooks == sorted(notebooks) and set(notebooks) <= set(ROUTE)


@pytest.mark.parametrize("name", NAMES)
def test_the_skeleton_is_blank_has_the_signature_and_checks_as_not_attempted_with_the_committed_text(name):
    ex, blank = exercise(name), skeleton(name)
    assert is_blank(blank)
    assert wrong_shape(name, ex.reference, blank) == ""
    report = ex.check(blank)
    assert report.passed is None and str(report).startswith(f"{name}: not attempted.")
    assert text_of(SKELETONS[name][2]) == str(report)


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_passes_every_check_and_is_what_the_solution_shows(name):
    ex = exercise(name)
    report = ex.check(ex.reference)
    assert report.passed is True, str(report)
    assert str(report).count("✓") == len(ex.checks)
    assert inspect.getsource(ex.reference) in ex.solution()


@pytest.mark.parametrize("name", NAMES)
def test_every_known_mistake_fails_with_its_own_message(name):
    ex = exercise(name)
    assert ex.mistakes, f"{name} has no known mistake"
    messages = [m.message for m in ex.mistakes]
    assert len(set(messages)) == len(messages)
    for mistake in ex.mistakes:
        report = ex.check(mistake.answer)
        assert report.passed is False, f"{name}: the mistake {mistake.answer.__name__} passed"
        assert f"A known mistake: {mistake.message}" in str(report), str(report)


def odd_answers(ex: Exercise) -> dict:
    "Answers a student may hand in by accident: nothing, the wrong type, code that raises, code that gives NaN."
    def raises(*args, **kwargs):
        raise RuntimeError("a student's bug")

    def gives_nan(*args, **kwargs):
        return float("nan")

    answers = {"None": None, "a string": "train", "a number": 42, "Ellipsis in a list": [...]}
    reference = ex.reference
    if isinstance(reference, type):
        methods = {k: raises for k, v in vars(reference).items() if callable(v) and not k.startswith("__")}
        answers["every method raises"] = type(ex.name, (reference.__mro__[1],), methods)
        answers["the base class alone"] = type(ex.name, (reference.__mro__[1],), {"n": 0})
        if issubclass(reference, Callback):
            def cancel_the_fit(self):
                raise CancelFitException
            answers["a callback that cancels the fit"] = type(ex.name, (reference.__mro__[1],),
                                                               {"on_train_begin": cancel_the_fit, "n": 0})
    else:
        params = list(inspect.signature(reference).parameters)
        for label, body in (("raises", raises), ("gives NaN", gives_nan)):
            f = eval(f"lambda {', '.join(params)}: body({', '.join(params)})", {"body": body})
            answers[label] = f
    return answers


@pytest.mark.parametrize("name", NAMES)
def test_odd_answers_get_a_failing_report_never_a_crash(name):
    ex = exercise(name)
    for label, answer in odd_answers(ex).items():
        report = ex.check(answer)
        assert report.passed is False, f"{name}, {label}: {report}"
        assert str(report).startswith(f"{name}: not yet."), f"{name}, {label}: {report}"
        assert "Traceback" not in str(report)


@pytest.mark.parametrize("name", NAMES)
def test_two_runs_give_the_same_report_and_leave_the_generators_and_threads_as_they_were(name):
    ex = exercise(name)
    wrong = ex.mistakes[0].answer
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    threads = torch.get_num_threads()
    first, second = str(ex.check(wrong)), str(ex.check(wrong))
    assert first == second and torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert (np.random.get_state()[1] == states[2]).all()


@pytest.mark.parametrize("name", NAMES)
def test_the_hint_ladder_climbs_to_the_solution(name):
    ex = exercise(name)
    ex.n_hints_shown = 0
    shown = [ex.hint() for _ in range(len(ex.hints) + 1)]
    assert len(ex.hints) >= 2
    assert [h.split(": ", 1)[1] for h in shown] == [*ex.hints, ex.hints[-1]]
    assert "ex.solution()" in shown[-1]
    ex.n_hints_shown = 0


def test_a_progress_file_marks_tried_then_done(tmp_path, monkeypatch):
    from looplab.practice import progress
    monkeypatch.setenv("LOOPLAB_PROGRESS", str(tmp_path / "p.json"))
    ex = exercise(NAMES[0])
    ex.check(ex.mistakes[0].answer)
    assert json.loads((tmp_path / "p.json").read_text()) == {NAMES[0]: "tried"}
    ex.check(ex.reference)
    ex.check(ex.mistakes[0].answer)
    assert json.loads((tmp_path / "p.json").read_text()) == {NAMES[0]: "done"}
    table = str(progress())
    assert f"{ex.notebook}" in table and f"{NAMES[0]}: done" in table
    assert len(table.splitlines()) == 1 + len({exercise(n).notebook for n in NAMES})


def test_the_package_face_serves_no_answer():
    "`from looplab import NAME` gives the kit's names, never an answer key's: a reference is one step away, not zero."
    import looplab
    for name in NAMES:
        ex = exercise(name)
        served = getattr(looplab, ex.reference.__name__, None)
        assert served is not ex.reference, f"looplab.{ex.reference.__name__} is {name}'s reference"
