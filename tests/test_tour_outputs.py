"""The committed outputs of the tour (tools/notebook_outputs.py): what is scrubbed, how a cell's outputs are compared
with a fresh run's, and that the committed notebooks are in the form `./tools/tour.sh --headless --save` writes.

That the committed outputs are current is checked by executing every notebook (`tools/run_tour.py --check`, step 3
of tools/test.sh)."""
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from notebook_outputs import (REFRESH, WIDGET, bare_figures, compare, normalise,  # noqa: E402
                              normalise_outputs, output_kinds, scrub)

PNG = "iVBORw0KGgo="  # the first bytes of a PNG, base64: the content does not matter here


def stream(text, name="stdout"):
    return new_output("stream", name=name, text=text)


def picture(text="<Figure size 640x480 with 1 Axes>"):
    return new_output("display_data", data={"image/png": PNG, "text/plain": text})


def bare(text="<Figure size 960x256 with 3 Axes>"):
    return new_output("execute_result", data={"text/plain": text}, execution_count=3)


@pytest.mark.parametrize("text, expected", [
    ("<__main__.Histogram at 0x7fb5dd18af90>", "<__main__.Histogram at 0x…>"),
    ("    1/3      2.0989     1.8039     0.6741     0.01s", "    1/3      2.0989     1.8039     0.6741     …s"),
    ("skip 500,000,000: item 254,342,417 after 0.16 ms", "skip 500,000,000: item 254,342,417 after … ms"),
    ("seeding torch: +1.5 µs per item (+3% on an item that costs 50 µs)",
     "seeding torch: +… µs per item (+…% on an item that costs … µs)"),
    ("{'epoch': 2, 'time': 0.01622332099987034}", "{'epoch': 2, 'time': …}"),
    ("{'created': '2026-11-24T09:29:14+00:00', 'sha256': '16e08ea22a5be4e3104775bd8ae1358260831fd03fe2b2d8138945a68542a1ad'}",
     "{'created': '…', 'sha256': '…'}"),
    ("accuracy 0.953 after 3 epochs, 69 steps", "accuracy 0.953 after 3 epochs, 69 steps"),  # no unit: kept
    ("lr=4.75e+00, 2 seconds", "lr=4.75e+00, 2 seconds"),
])
def test_scrub_hides_what_changes_between_runs(text, expected):
    assert scrub(text) == expected
    assert scrub(expected) == expected  # scrubbing twice changes nothing: a refresh does not churn


def test_scrub_hides_temporary_and_checkout_paths():
    tmp = tempfile.gettempdir()
    assert scrub(f"saving to '{tmp}/looplab-checkpoints-5fmiim87/good.pt'") == "saving to '/tmp/looplab-checkpoints-…/good.pt'"
    assert scrub(f"{tmp}/tmpab12cd34/x.ckpt") == "/tmp/tmp…/x.ckpt"
    assert scrub(f"{ROOT}/looplab/learner.py:165: RuntimeWarning: nan", root=ROOT) == \
        "looplab/learner.py:165: RuntimeWarning: nan"


def test_normalise_drops_live_widgets_and_merges_streams():
    widget = new_output("display_data", data={WIDGET: {"model_id": "ab12"}, "text/plain": "HBox(children=...)"})
    outputs = [widget, stream("epoch 1 0.01s\n"), stream("epoch 2 0.02s\n"), picture(), bare()]
    kept = normalise_outputs(outputs)
    assert [o["output_type"] for o in kept] == ["stream", "display_data", "execute_result"]
    assert kept[0]["text"] == "epoch 1 …s\nepoch 2 …s\n"
    assert kept[2]["execution_count"] is None
    assert normalise_outputs(kept) == kept


def test_output_kinds_and_bare_figures():
    outputs = [stream("a\n"), stream("b\n"), picture(), stream("warn\n", "stderr"), bare()]
    assert output_kinds(outputs) == ["text", "picture", "stderr", "text"]
    assert bare_figures(outputs) == ["<Figure size 960x256 with 3 Axes>"]
    assert bare_figures([picture()]) == []  # the text beside a picture is fine
    assert bare_figures([bare("<ShownFigure size 10x10 with 0 Axes>")]) == ["<ShownFigure size 10x10 with 0 Axes>"]
    assert bare_figures([bare("'<Figure size' is what matplotlib prints")]) == []


def notebook(*cells):
    return new_notebook(cells=[new_code_cell(source, outputs=list(outputs)) for source, outputs in cells])


def test_compare_names_the_cell_and_the_command():
    committed = notebook(("compare_runs(runs)", [picture()]), ("print(1)", [stream("1\n")]))
    assert compare("07.ipynb", committed, notebook(("compare_runs(runs)", [picture()]), ("print(1)", [stream("2\n")]))) == []
    problems = compare("07.ipynb", committed, notebook(("compare_runs(runs)", [bare()]), ("print(1)", [])))
    assert len(problems) == 3
    assert "code cell 1 ('compare_runs(runs)')" in problems[0] and "instead of a picture" in problems[0]
    assert "committed outputs ['picture'], a fresh run gives ['text']" in problems[1]
    assert "committed outputs ['text'], a fresh run gives none" in problems[2]
    edited = notebook(("compare_runs(runs, log=True)", [picture()]), ("print(1)", [stream("1\n")]))
    assert "code cells differ" in compare("07.ipynb", committed, edited)[0]
    assert REFRESH == "./tools/tour.sh --headless --save"


TOUR = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith(("_", ".")))


@pytest.mark.parametrize("path", TOUR, ids=[p.stem for p in TOUR])
def test_committed_notebooks_are_in_the_saved_form(path):
    "Every committed notebook was written by the refresh: executed, normalised, no bare figure text."
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"{path.name} carries no outputs: run {REFRESH}"
    for number, cell in enumerate(code, start=1):
        assert not bare_figures(cell.outputs), f"{path.name}, code cell {number}: a bare figure text"
        assert not [o for o in cell.outputs if o["output_type"] == "error"], f"{path.name}, code cell {number}: an error"
        assert normalise_outputs(cell.outputs, ROOT) == cell.outputs, \
            f"{path.name}, code cell {number}: outputs not normalised (timings, addresses or paths): run {REFRESH}"
    before = nbformat.writes(nb)
    assert nbformat.writes(normalise(nb, ROOT)) == before


def test_the_pictures_are_small():
    """Each picture stays under 256 KB (a dpi or figure size set too high breaks this first), and the whole of nbs/
    stays a few MB: 51 notebooks (the index among them) with about 100 pictures, 8 MB at most (11d's folds, which
    reopen without a kernel, carry each epoch's picture)."""
    for path in TOUR:
        for number, cell in enumerate(nbformat.read(path, as_version=4).cells):
            for out in cell.get("outputs", []):
                png = out.get("data", {}).get("image/png", "")
                assert len(png) < 256 * 2**10, \
                    f"{path.name}, cell {number}: a picture of {len(png) / 2**10:.0f} KB: lower its dpi or figure size"
    size = sum(p.stat().st_size for p in TOUR)
    assert size < 8 * 2**20, f"nbs/ is {size / 2**20:.1f} MB: lower the dpi of the largest pictures"
