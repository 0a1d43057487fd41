"""Stop is a normal way to end a fit: an interrupt (Ctrl-C, JupyterLab's Stop) ends `fit` between two batches with
one line that says where, and the learner stays consistent — it can fit again, or be checkpointed and resumed bit for
bit. In a process, in a script (exit status of SIGINT, the loop of fits stopped) and in a Jupyter kernel."""
import os
import queue
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import make_learner
from looplab.callback import Callback
from looplab.checkpoint import learner_state, load_learner_state, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-output" / "stop"  # what the student sees, for whoever reads the run
sys.path.insert(0, str(ROOT / "tools"))
from kernel import fresh_kernel  # noqa: E402


class Press(Callback):
    "Sends this process SIGINT `times` times at the start of training batch `n_iter` (counted from 1): Stop, pressed."
    def __init__(self, n_iter, times=1):
        self.n_iter = n_iter
        self.times = times

    def on_batch_begin(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            for _ in range(self.times):
                os.kill(os.getpid(), signal.SIGINT)


class Raise(Callback):
    "Raises KeyboardInterrupt in `event` of training batch `n_iter`: an interrupt that lands inside the batch."
    def __init__(self, n_iter, event="on_step_begin"):
        self.n_iter = n_iter
        setattr(self, event, self.maybe_raise)

    def maybe_raise(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            raise KeyboardInterrupt


class Ends(Callback):
    "Counts the fits it saw begin and end."
    def __init__(self):
        self.begun = 0
        self.ended = 0

    def on_train_begin(self):
        self.begun += 1

    def on_train_end(self):
        self.ended += 1


@pytest.fixture(autouse=True)
def python_handler():
    "The tests in this process need Python's own SIGINT handler (the one a script and a kernel cell run under)."
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT has a handler other than Python's default here")
    yield
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "fit left its SIGINT handler installed"


def stopped(learn, n_epochs, cb) -> str:
    "Fit with `cb`; return the KeyboardInterrupt's message (failing if fit did not raise one)."
    with pytest.raises(KeyboardInterrupt) as info:
        learn.fit(n_epochs, cbs=cb)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained traceback of the loop
    return str(info.value)


def weights(learn) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learn.model.parameters()]


def test_stop_ends_the_fit_after_the_batch_and_resumes_bit_for_bit(tmp_path):
    n = len(make_learner().dls.train)  # 16 batches an epoch
    reference = make_learner()
    reference.fit(3)

    ends = Ends()
    learn = make_learner(cbs=[ends])
    line = stopped(learn, 3, Press(n + 5))  # pressed at the start of the 5th batch of epoch 2
    assert line == (f"fit stopped by KeyboardInterrupt at epoch 2/3, after batch 5/{n}; the learner is consistent: "
                    "fit again or checkpoint it")
    assert learn.stopped == line and "\n" not in line
    assert (ends.begun, ends.ended) == (1, 1)  # on_train_end ran
    assert learn.position == (1, 5) and learn.n_iter == n + 5  # the batch it was in ended; no other began
    assert len(learn.recorder.losses) == n + 5
    assert learn.model.training and all(p.grad is None or p.grad.abs().sum() == 0 for p in learn.model.parameters())

    save_checkpoint(learn, tmp_path / "stopped.pt")  # exact: it resumes as the run that was never stopped
    state = learner_state(learn)
    resumed = make_learner(cbs=[Ends()])
    load_learner_state(resumed, state)
    resumed.fit(3)
    assert all(torch.equal(a, b) for a, b in zip(weights(resumed), weights(reference)))
    assert resumed.recorder.losses[-2 * n + 5:] == reference.recorder.losses[-2 * n + 5:]

    learn.fit(1)  # and the stopped learner itself trains on
    assert learn.stopped is None and (ends.begun, ends.ended) == (2, 2) and learn.position == (1, 0)


def test_stop_in_validation_and_at_the_epoch_end():
    learn = make_learner()

    class PressIn(Callback):
        def __init__(self, event):
            setattr(self, event, lambda: os.kill(os.getpid(), signal.SIGINT))

    line = stopped(learn, 2, PressIn("on_validate_begin"))
    assert line.startswith("fit stopped by KeyboardInterrupt in the validation of epoch 1/2;")
    assert learn.position == (0, len(learn.dls.train))  # validation runs again on resume
    line = stopped(learn, 2, PressIn("on_epoch_end"))
    assert line.startswith("fit stopped by KeyboardInterrupt at the end of epoch 1/2;") and learn.position == (1, 0)
    learn.validate()  # a validation pass after the stop is not stopped by the old press


def test_a_press_while_on_train_end_runs_does_not_cut_it_short():
    "An impatient second press while the callbacks close (a live chart's last frame) is one more request, not a cut."
    class PressAtEnd(Ends):
        def on_train_end(self):
            os.kill(os.getpid(), signal.SIGINT)
            super().on_train_end()

    learn = make_learner()
    end = PressAtEnd()
    line = stopped(learn, 2, [Press(4), end])
    assert line.startswith("fit stopped by KeyboardInterrupt at epoch 1/2, after batch 4/") and end.ended == 1
    assert learn.position == (0, 4)
    line = stopped(learn, 1, end)  # pressed in on_train_end only, after the last epoch ended
    assert line.startswith("fit stopped by KeyboardInterrupt outside the epochs (in on_train_begin or on_train_end);")
    assert learn.position == (1, 0) and end.ended == 2


def test_an_interrupt_inside_a_batch_refuses_the_checkpoint(tmp_path):
    n = len(make_learner().dls.train)
    once = make_learner(cbs=[Ends()])
    stopped(once, 2, Press(5))
    exact = learner_state(once)  # stopped once, between batches: at (0, 5)
    for cb in (Raise(3), Raise(3, "on_batch_end"), Press(3, times=2)):  # raised in the loop; Stop pressed twice
        ends = Ends()
        learn = make_learner(cbs=[ends])
        line = stopped(learn, 2, cb)
        assert line == (f"fit stopped by KeyboardInterrupt inside batch 3/{n} of epoch 1/2, before that batch ended: "
                        "the learner can fit again, but this moment has no exact position to checkpoint (see "
                        "learn.position)"), type(cb).__name__
        assert ends.ended == 1 and all(p.grad is None for p in learn.model.parameters())  # half a batch: cleared
        for refused in (lambda: learn.position, lambda: save_checkpoint(learn, tmp_path / "cut.pt")):
            with pytest.raises(ValueError, match=r"no exact answer: fit stopped .* inside batch 3/16 .*Stop once"):
                refused()
        assert not (tmp_path / "cut.pt").exists()
        load_learner_state(learn, exact)  # a loaded state brings its own exact position
        assert learn.position == (0, 5)
        before = weights(learn)
        learn.fit(1)  # usable: it trains on, and then has a position again
        assert learn.stopped is None and learn.position == (1, 0) and ends.ended == 2
        assert not all(torch.equal(a, b) for a, b in zip(before, weights(learn)))
        save_checkpoint(learn, tmp_path / "after.pt")


SCRIPT = """
import sys
import time
sys.path.insert(0, {tests!r})
from helpers import make_learner
from looplab.callback import Callback

class Ready(Callback):
    "Says so at batch 3, then slows the first epoch's batches, so the press lands in training however loaded the machine."
    def on_batch_end(self):
        if self.learn.n_iter == 3:
            print("training", flush=True)
        if self.learn.epoch == 0 and self.learn.training and self.learn.n_iter >= 3:
            time.sleep(0.2)

learn = make_learner(cbs=[Ready()])
fits = 0
while True:  # a loop of fits: Ctrl-C must end the script, not only the fit it lands in
    learn.fit(1)
    fits += 1
"""


def test_ctrl_c_in_a_script_stops_it_with_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=str(ROOT / "tests")))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "training\n", proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGINT, err  # as any Python script ended by Ctrl-C: 130 in a shell
    assert err.rstrip().splitlines()[-1].startswith("KeyboardInterrupt: fit stopped by KeyboardInterrupt at epoch 1/1,")
    frames = [line for line in err.splitlines() if line.lstrip().startswith("File ")]
    looplab_frames = [line for line in frames if "looplab" in line]
    assert len(looplab_frames) == 1 and looplab_frames[0].endswith("in fit"), err  # fit's raise; no loop internals
    assert "During handling" not in err and len(err.splitlines()) <= 10, err


KERNEL_SETUP = """
import time
from helpers import make_learner
from looplab.callback import Callback
from looplab.loss_plot import LossPlot

class Ready(Callback):
    "Says so at batch 3, then slows epoch 0's batches by `pause` s: the presses land in training, on any machine."
    def __init__(self, pause):
        self.pause = pause
    def on_batch_end(self):
        if self.learn.n_iter == 3:
            print('training', flush=True)
        if self.learn.epoch == 0 and self.learn.n_iter >= 3:
            time.sleep(self.pause)
"""
HINT = " (%tb shows the traceback)"


@pytest.fixture(scope="module")
def kernel():
    "A Jupyter kernel (as JupyterLab starts one) in tests/, with `Ready` defined: (manager, client)."
    pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    with fresh_kernel(ROOT / "tests", prefix="looplab-stop-") as (km, kc):
        assert not [o for o in run_in(km, kc, KERNEL_SETUP) if "ename" in o]
        yield km, kc


def run_in(km, kc, code, presses=()):
    "Execute `code`; once it prints 'training', interrupt the kernel at each of `presses` (ms from then); its outputs."
    msg_id = kc.execute(code)
    outputs = []
    deadline = time.monotonic() + 120
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no end of {code!r} in 120 s: {outputs}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind in ("stream", "error"):
            outputs.append(content)
            if presses and kind == "stream" and "training" in content["text"]:
                began = time.perf_counter()
                for at in presses:  # Stop pressed in JupyterLab: the server signals the kernel (SIGINT)
                    time.sleep(max(0.0, began + at / 1000 - time.perf_counter()))
                    km.interrupt_kernel()
                presses = ()
        if kind == "status" and content["execution_state"] == "idle":
            return outputs


def shown_lines(error: dict) -> list[str]:
    "The lines of an error output as JupyterLab shows them (without the colours)."
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"])).splitlines()


def test_stop_in_a_jupyter_kernel_shows_one_line_and_the_learner_goes_on(kernel):
    km, kc = kernel
    assert not [o for o in run_in(km, kc, "learn = make_learner(cbs=[Ready(0.2)], progress=False)") if "ename" in o]
    outputs = run_in(km, kc, "learn.fit(100_000)\nprint('after fit')", presses=[0])
    errors = [o for o in outputs if "ename" in o]
    assert len(errors) == 1 and errors[0]["ename"] == "KeyboardInterrupt", outputs
    line = errors[0]["evalue"]
    assert line.startswith("fit stopped by KeyboardInterrupt at epoch 1/100000, after batch ")
    assert shown_lines(errors[0]) == [line + HINT]  # the student sees the line, and where the rest is
    assert not any("after fit" in o.get("text", "") for o in outputs)  # Stop ended the cell
    whole = [o for o in run_in(km, kc, "%tb") if "ename" in o]  # the traceback, one step away
    files = [text for text in shown_lines(whole[0]) if text.startswith("File ")]
    assert len(files) == 1 and files[0].endswith("in Learner.fit(self, n_epochs, lr, cbs)"), whole
    assert shown_lines(whole[0])[-1].endswith(line)
    again = run_in(km, kc, "epoch, batch = learn.position\nlearn.fit(1)\nprint('again', epoch, learn.position)")
    assert [o["text"] for o in again] == ["again 0 (1, 0)\n"], again
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "one_press.txt").write_text("\n".join(shown_lines(errors[0])) + "\n")


@pytest.mark.parametrize("plot", [False, True], ids=["no-plot", "LossPlot"])
@pytest.mark.parametrize("ms", [0, 10, 20, 30, 45, 100, 150])
def test_two_quick_presses_keep_the_one_line(kernel, plot, ms):
    """The second press lands in the batch, in on_train_end (a live plot's last frame), while IPython shows the line,
    or after: one line. Without the hold after a stop, 10-20 ms (no plot) and 150 ms (LossPlot) gave a second
    traceback of 15-236 lines on the machine this was written on."""
    km, kc = kernel
    cbs = ", cbs=LossPlot(mode='widget')" if plot else ""
    fit = f"learn = make_learner(cbs=[Ready(0.01)], progress=False)\nlearn.fit(100_000{cbs})\nprint('after fit')"
    outputs = run_in(km, kc, fit, presses=[0, ms])
    errors = [o for o in outputs if "ename" in o]
    assert len(errors) == 1 and errors[0]["ename"] == "KeyboardInterrupt", outputs
    lines = shown_lines(errors[0])
    assert len(lines) == 1 and lines[0].startswith("fit stopped by KeyboardInterrupt ") and lines[0].endswith(HINT)
    assert not [o for o in outputs if o.get("name") == "stderr"], outputs  # no bare KeyboardInterrupt, no traceback
    assert not any("after fit" in o.get("text", "") for o in outputs)
    alive = run_in(km, kc, "print('alive')")  # the kernel goes on, Python's handler back
    assert "".join(o["text"] for o in alive) == "alive\n", alive  # a stream may come in several chunks
    handler = run_in(km, kc, "import signal\nprint(signal.getsignal(signal.SIGINT).__name__)")
    assert "".join(o["text"] for o in handler) in ("default_int_handler\n", "SIG_IGN\n"), handler
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"two_presses_{ms}ms{'_plot' * plot}.txt").write_text("\n".join(lines) + "\n")
