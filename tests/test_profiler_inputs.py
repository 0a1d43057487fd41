"""Bad inputs to the profiler (looplab.profiler) and to its trace (looplab.torch_trace): each gets a clear error
naming the problem and the fix, before the fit starts where it can be known then, or the right result. The
torch.profiler sessions run in a new process, so that a crash (two sessions at once used to end the process with
SIGSEGV) fails a test instead of ending pytest."""
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from looplab.checks import FakeClock
from looplab.callback import Callback, CallbackError
from looplab.profiler import PHASES, Profiler, ProfilePlot
from looplab.torch_trace import TorchTrace

from helpers import make_dls, make_learner
from test_profiler import sleeping_learner, stamped

TESTS = Path(__file__).parent


def run_python(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    "Run `code` in a new Python process (tests/ on its path); a crash there shows as a negative return code here."
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=TESTS, capture_output=True, text=True,
                          timeout=timeout)


TRACE_REFUSALS = """
    import tempfile
    import torch
    from looplab.callback import Callback
    from looplab.torch_trace import TorchTrace
    from helpers import make_learner
    folder = tempfile.mkdtemp()

    def refused(fn):
        "The refusal's message; a crash ends the process before it."
        try:
            fn()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return "no refusal"

    learn = make_learner()
    print("two:", refused(lambda: learn.fit(1, cbs=[TorchTrace(folder + "/a"), TorchTrace(folder + "/b")])))
    print("two, batches trained:", learn.n_iter)

    class FitInside(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 0:
                print("inside:", refused(lambda: make_learner().fit(1, cbs=TorchTrace(folder + "/inner"))))
    outer = TorchTrace(folder + "/outer", skip=1, batches=1)
    make_learner().fit(1, cbs=[outer, FitInside()])
    print("inside, outer traces:", len(outer.traces))

    learn = make_learner()
    with torch.profiler.profile():
        print("running:", refused(lambda: learn.fit(1, cbs=TorchTrace(folder))))
    print("running, batches trained:", learn.n_iter)
"""


@pytest.fixture(scope="module")
def trace_refusals() -> str:
    "What TRACE_REFUSALS printed, in a process of its own; a crash (-11 is SIGSEGV) fails every test that reads it."
    run = run_python(TRACE_REFUSALS)
    assert run.returncode == 0, f"the process ended with {run.returncode} (-11 is SIGSEGV): {run.stderr[-2000:]}"
    return run.stdout


def test_two_torch_traces_in_one_fit_are_refused_before_anything_starts(trace_refusals):
    assert "two: ValueError: TorchTrace is already attached and only one makes sense" in trace_refusals
    assert "two, batches trained: 0" in trace_refusals


def test_a_torch_trace_inside_a_fit_that_traces_already_is_refused(trace_refusals):
    "A fit inside a fit (another Learner), each with its TorchTrace: the inner one is refused, the outer one traces."
    assert "inside: CallbackError: callback TorchTrace failed in on_train_begin: ValueError: another TorchTrace is " \
           "tracing a fit in this process" in trace_refusals and "keep one TorchTrace" in trace_refusals
    assert "inside, outer traces: 1" in trace_refusals


def test_a_torch_trace_inside_a_running_torch_profiler_is_refused(trace_refusals):
    assert "running: CallbackError" in trace_refusals and "a torch.profiler session is already recording" \
        in trace_refusals and "end it before fit" in trace_refusals
    assert "running, batches trained: 0" in trace_refusals


def test_a_torch_trace_removed_mid_fit_ends_its_session(tmp_path):
    "Removed during the fit, it is closed: its session ends, and the next TorchTrace may start one."
    trace = TorchTrace(tmp_path / "a", skip=1, batches=2)

    class Remove(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 5 and trace in self.learn.cbs:
                self.learn.remove_cbs(trace)
    learn = make_learner()
    learn.fit(1, cbs=[trace, Remove()])
    assert TorchTrace._running is None and len(trace.traces) == 1
    again = TorchTrace(tmp_path / "b", skip=1, batches=1)
    learn.fit(1, cbs=again)
    assert len(again.traces) == 1


def test_a_folder_it_cannot_write_is_refused_before_the_first_batch(tmp_path):
    "A path under a regular file: no user (root included) can make that folder."
    a_file = tmp_path / "notes.txt"
    a_file.write_text("a file, not a folder")
    learn = make_learner()
    with pytest.raises(CallbackError, match=r"TorchTrace cannot write its trace into .*notes.txt/runs.*pass a folder"):
        learn.fit(1, cbs=TorchTrace(a_file / "runs"))
    assert learn.n_iter == 0
    with pytest.raises(CallbackError, match="cannot write its trace"):
        learn.fit(1, cbs=TorchTrace(a_file))  # the file itself, as the folder


def test_skip_past_a_known_end_is_refused_before_the_first_batch(tmp_path):
    learn = make_learner()  # 16 training batches an epoch
    with pytest.raises(CallbackError, match=r"TorchTrace\(skip=40\) would skip every batch of this fit "
                                            r"\(32 training batches\).*pass skip=29, or fit longer"):
        learn.fit(2, cbs=TorchTrace(tmp_path, skip=40))
    assert learn.n_iter == 0 and not list(tmp_path.glob("*.json"))


class NoLength:
    "Batches without a length: a loader whose end the fit learns only by reaching it."
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


def test_skip_past_an_unknown_end_is_said_at_the_end_of_the_fit(tmp_path):
    from looplab.data import DataLoaders
    learn = make_learner(dls=DataLoaders(NoLength(make_dls().train), None))
    trace = TorchTrace(tmp_path, skip=20)
    with pytest.warns(UserWarning, match=r"TorchTrace wrote no trace: the fit ran 16 training batches, and skip=20 "
                                         r"skipped the first 16; pass skip=13 or less, or fit longer"):
        learn.fit(1, cbs=trace)
    assert trace.traces == []


def test_a_trace_cut_short_by_the_end_of_the_fit_is_said(tmp_path):
    trace = TorchTrace(tmp_path, skip=14, batches=5)
    with pytest.warns(UserWarning, match=r"traced 2 of the 5 batches asked: the fit ran 16 training batches, "
                                         r"and skip=14 skipped the first 14; pass skip=11 or less"):
        make_learner().fit(1, cbs=trace)
    assert len(trace.traces) == 1


def test_a_torch_trace_attached_mid_fit_says_it_traced_nothing(tmp_path):
    trace = TorchTrace(tmp_path)

    class Attach(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 3:
                self.learn.add_cbs(trace)
    learn = make_learner()
    with pytest.warns(UserWarning, match="TorchTrace was attached during the fit and traced nothing: attach it before"):
        learn.fit(1, cbs=Attach())
    assert trace.traces == []


@pytest.mark.parametrize("make, error, fragments", [
    (lambda: TorchTrace(42), TypeError, ["folder must be a path", "42", "int"]),
    (lambda: TorchTrace(None), TypeError, ["folder must be a path", "None"]),
    (lambda: TorchTrace("runs", skip=0), ValueError, ["skip must be an int >= 1", "0"]),
    (lambda: TorchTrace("runs", skip=1.5), TypeError, ["skip must be an int", "1.5"]),
    (lambda: TorchTrace("runs", batches=-1), ValueError, ["batches must be an int >= 1", "-1"]),
    (lambda: Profiler(clock=0.5), TypeError, ["clock must be a function", "0.5"]),
    (lambda: Profiler(cuda_events="yes"), TypeError, ["cuda_events must be None", "'yes'"]),
    (lambda: ProfilePlot(columns=0), ValueError, ["columns must be an int >= 1", "0"]),
    (lambda: ProfilePlot(columns=2.5), TypeError, ["columns must be an int", "2.5"]),
    (lambda: ProfilePlot(clock="perf_counter"), TypeError, ["clock must be a function"]),
    (lambda: ProfilePlot(every_ms=0), ValueError, ["every_ms must be a number > 0"]),
    (lambda: ProfilePlot(max_overhead=2), ValueError, ["max_overhead must be a number in (0, 1]"]),
    (lambda: ProfilePlot(mode="live"), ValueError, ["mode must be one of"]),
], ids=lambda v: "" if not isinstance(v, list) else v[0])
def test_bad_arguments_are_refused_by_name(make, error, fragments):
    with pytest.raises(error) as caught:
        make()
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)


def test_a_fit_of_no_batch_says_so_and_how_to_get_one(capsys):
    prof = Profiler()
    make_learner().fit(0, cbs=prof)
    with pytest.raises(ValueError, match=r"last fit trained no batch \(fit\(0\).*fit at least one batch"):
        prof.table()
    with pytest.raises(ValueError, match="no training batch to report: train with learn.fit"):
        Profiler().shares()
    plot = ProfilePlot(mode="text")
    make_learner().fit(0, cbs=plot)
    assert "ProfilePlot: no training batch (the fit ended before its first one)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="nothing to plot yet"):
        plot.plot()


def test_two_profilers_are_refused_before_the_first_batch():
    learn = make_learner()
    with pytest.raises(ValueError, match="Profiler is already attached and only one makes sense"):
        learn.fit(1, cbs=[Profiler(), Profiler()])
    with pytest.raises(CallbackError, match="Profiler and ProfilePlot are both attached.*keep one"):
        learn.fit(1, cbs=[Profiler(), ProfilePlot(mode="text")])
    assert learn.n_iter == 0 and not stamped(learn)


def test_a_fit_inside_the_fit_a_profiler_times_is_refused_and_both_learners_are_left_plain():
    prof = Profiler()
    inner = make_learner()

    class FitInside(Callback):
        def on_train_begin(self):
            inner.fit(1, cbs=prof)
    outer = make_learner()
    with pytest.raises(CallbackError, match="this Profiler is timing a fit already.*needs a Profiler of its own"):
        outer.fit(1, cbs=[prof, FitInside()])
    assert not stamped(outer) and not stamped(inner)


def test_a_profiler_attached_mid_fit_times_the_batches_after_its_first_call():
    clock = FakeClock()
    prof = Profiler(clock=clock)

    class Attach(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 3:
                self.learn.add_cbs(prof)
    learn = sleeping_learner(forward=0.001, data=0.002, n=12, sleep=clock.sleep)
    learn.fit(1, cbs=Attach())
    assert prof.n_batches == 12 - 5  # its first call, at the 5th batch's end, stamps the rest
    assert np.allclose(prof.times["data"], 0.002) and np.allclose(prof.times["forward"], 0.001)
    assert not stamped(learn)


def test_a_profiler_removed_mid_fit_keeps_what_it_timed_and_leaves_no_stamp():
    prof = Profiler()

    class Remove(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 3 and prof in self.learn.cbs:
                self.learn.remove_cbs(prof)
    learn = make_learner()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: it left, and its profile is whole
        learn.fit(1, cbs=[prof, Remove()])
    assert prof.n_batches == 3 and len(learn.recorder.losses) == 16 and not stamped(learn)


def test_lbfgs_evaluations_are_charged_to_their_phases_not_to_the_loop():
    "LBFGS(max_iter=5) evaluates each batch several times inside its step: loss and backward there, the rest the step's."
    clock = FakeClock()
    forwards = []

    def sleep(seconds):
        if seconds == 0.003:
            forwards.append(seconds)
        clock.sleep(seconds)
    lbfgs = lambda params, lr: torch.optim.LBFGS(params, lr=lr, max_iter=5)
    learn = sleeping_learner(forward=0.003, loss=0.002, n=8, sleep=sleep, opt_func=lbfgs)
    prof = Profiler(clock=clock)
    learn.fit(1, cbs=prof)
    evaluations = len(forwards)
    assert prof.n_batches == 8 and evaluations > 2 * 8
    assert np.allclose(prof.times["loop"], 0.0) and np.allclose(prof.times["forward"], 0.003)
    assert sum(prof.times["loss"]) == pytest.approx(0.002 * evaluations)
    assert sum(prof.times["step"]) == pytest.approx(0.003 * (evaluations - 8))


def test_lbfgs_on_the_real_clock_leaves_the_loop_a_sliver():
    learn = make_learner(opt_func=lambda params, lr: torch.optim.LBFGS(params, lr=lr, max_iter=5))
    prof = Profiler()
    learn.fit(1, cbs=prof)
    shares = prof.shares()
    assert max(shares, key=shares.get) != "loop" and shares["loop"] < 0.5, shares  # it was about 0.7
    assert set(shares) == set(PHASES)
