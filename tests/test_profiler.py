"""The profiler (looplab.profiler): phases that move a fake clock by known times measure exactly those, the phases add
up to the loop's wall time measured from outside, training is bit for bit the same with it, the plain handlers come
back on every exit, cancels, closure optimizers and DDP ranks are timed, the live chart draws and never stops
training, and the CUDA path reads the GPU's clock.

No test here asserts on how long a real sleep or a real fit took: a fake clock, moved by hand, gives exact phases
on any machine, however loaded; the real clock is only checked for what always holds (the phases are at most the
wall time, and at least the sleeps inside them)."""
import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from looplab.callback import Callback, CancelFitException, CancelStepException
from looplab.checks import FakeClock
from looplab.data import DataLoaders, set_seed
from looplab.distributed import launch
from looplab.engines import DistributedDataParallelEngine
from looplab.learner import Learner
from looplab.profiler import PHASES, Profiler, ProfilePlot
from looplab.regularize import GradientAccumulation
from looplab.widgets import LivePlotWarning, Throttle

from helpers import StopAt, make_dls, make_learner

torch.set_num_threads(1)


class Sleepy(nn.Module):
    "An 8-16-2 MLP whose forward sleeps `seconds` (on `sleep`'s clock)."
    def __init__(self, seconds, sleep=time.sleep):
        super().__init__()
        self.seconds = seconds
        self.sleep = sleep
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        self.sleep(self.seconds)
        return self.net(x)


class SlowBatches:
    "A list of batches, iterated with a sleep of `seconds` before each."
    def __init__(self, batches, seconds, sleep=time.sleep):
        self.batches = batches
        self.seconds = seconds
        self.sleep = sleep

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            self.sleep(self.seconds)
            yield batch


class SleepOnStepEnd(Callback):
    def __init__(self, seconds, sleep=time.sleep):
        self.seconds = seconds
        self.sleep = sleep

    def on_step_end(self):
        self.sleep(self.seconds)


def sleeping_learner(forward=0.0, loss=0.0, data=0.0, step_end=0.0, n=16, valid=False, sleep=time.sleep, **kwargs):
    "The 8-16-2 MLP whose forward, loss, loader and an on_step_end callback each `sleep` the given seconds."
    def slow_loss(preds, yb):
        sleep(loss)
        return nn.functional.cross_entropy(preds, yb)
    dls = make_dls(n=16 * n, valid=valid)
    set_seed(0)
    return Learner(Sleepy(forward, sleep), DataLoaders(SlowBatches(dls.train, data, sleep), dls.valid),
                   loss_func=slow_loss, progress=False, cbs=[SleepOnStepEnd(step_end, sleep)], **kwargs)


def stamped(learn) -> bool:
    "Whether the learner's handlers hold stamps (functions that are not callbacks' bound methods)."
    return any(not hasattr(method, "__self__") for methods in learn.cbh.handlers.values() for method in methods)


@pytest.mark.parametrize("cls", [Profiler, ProfilePlot])
def test_each_phase_measures_exactly_the_time_it_took_on_a_fake_clock(cls):
    clock = FakeClock()
    moved = {"forward": 0.003, "loss": 0.002, "data": 0.004, "callbacks": 0.002}
    learn = sleeping_learner(forward=0.003, loss=0.002, data=0.004, step_end=0.002, valid=True, sleep=clock.sleep)
    prof = cls(clock=clock) if cls is Profiler else cls(mode="text", clock=clock)
    learn.fit(2, cbs=prof)
    assert prof.n_batches == 32  # the validation batches are not training batches
    for phase in PHASES:
        assert np.allclose(prof.times[phase], moved.get(phase, 0.0)), (phase, prof.times[phase][:3])
    assert prof.callback_times[("on_step_end", "SleepOnStepEnd")] == [pytest.approx(32 * 0.002), 32]
    assert prof.outside == pytest.approx(2 * 4 * 0.005)  # the validation batches' forward and loss: outside


def test_phases_add_up_to_the_wall_time_measured_outside_fit():
    "On the fake clock, exactly; on the real one, at most the fit's wall time and at least what the batches slept."
    clock = FakeClock()
    learn = sleeping_learner(forward=0.002, data=0.003, n=20, sleep=clock.sleep)
    prof = Profiler(clock=clock)
    start = clock()
    learn.fit(2, cbs=prof)
    assert prof.batch_times().sum() == pytest.approx(clock() - start)
    learn = sleeping_learner(forward=0.002, data=0.003, n=20)
    prof = Profiler()
    start = time.perf_counter()
    learn.fit(2, cbs=prof)
    wall = time.perf_counter() - start
    total = prof.batch_times().sum()
    assert 40 * 0.005 <= total <= wall, (total, wall)
    assert np.allclose(prof.batch_times(), np.sum([prof.times[p] for p in PHASES], axis=0))
    assert sum(prof.shares().values()) == pytest.approx(1.0)


@pytest.mark.parametrize("make", [Profiler, lambda: ProfilePlot(mode="widget")])
def test_training_is_bit_identical_with_the_profiler(make, monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)  # the chart draws at every batch
    runs = []
    for cbs in ([], [make()]):
        learn = make_learner(opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9))
        learn.fit(3, cbs=cbs)
        runs.append(list(learn.model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


class Boom(Exception):
    pass


class RaiseAt(Callback):
    "Raises `error` after `n` training batches."
    def __init__(self, n, error):
        self.n, self.error = n, error

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n:
            raise self.error


@pytest.mark.parametrize("exit", ["normal", "cancel_fit", "stop_at", "model_error", "keyboard_interrupt"])
def test_the_plain_handlers_come_back_on_every_exit(exit, tmp_path):
    learn = make_learner()
    plain = learn.cbh.handlers
    prof = Profiler()
    learn.add_cbs(prof)  # attached for every fit: only its own on_train_end can take the stamps out
    cbs = {"normal": [], "cancel_fit": [RaiseAt(5, CancelFitException())],
           "stop_at": [StopAt(5, tmp_path / "ckpt.pt")], "keyboard_interrupt": [RaiseAt(5, KeyboardInterrupt())],
           "model_error": []}[exit]
    if exit == "model_error":
        learn.loss_func = lambda preds, yb: (_ for _ in ()).throw(Boom("the loss broke"))
    seen = []

    class Spy(Callback):
        def on_batch_begin(self):
            seen.append(stamped(self.learn))
    spy = Spy()
    learn.add_cbs(spy)
    expected = {"model_error": Boom, "keyboard_interrupt": KeyboardInterrupt}.get(exit)
    if expected is None:
        learn.fit(2, cbs=cbs)
    else:
        with pytest.raises(expected):
            learn.fit(2, cbs=cbs)
    assert seen and all(seen)  # stamped while it trained
    assert prof.n_batches or exit == "model_error"
    assert not stamped(learn) and learn.cbh.handlers.keys() == plain.keys()
    assert learn.cbh.handlers["on_batch_begin"][-1] == spy.on_batch_begin
    assert prof.n_batches == {"normal": 32, "model_error": 0, "keyboard_interrupt": 4}.get(exit, 5)  # cancels close it


def test_a_cancelled_step_is_charged_to_the_callback_that_cancelled_it():
    "GradientAccumulation(4) cancels 3 steps in 4 (and their zero_grad): their step phase is 0, the cancel's time its own."
    learn = make_learner(dls=make_dls(n=256, bs=16, valid=False))
    prof = Profiler()
    learn.fit(1, cbs=[GradientAccumulation(4), prof])
    assert learn.n_steps == 4 and prof.n_batches == 16
    step = np.asarray(prof.times["step"])
    stepped = (np.arange(16) % 4) == 3
    assert (step[~stepped] == 0).all() and (step[stepped] > 0).all()
    assert (np.asarray(prof.times["zero_grad"])[~stepped] == 0).all()
    assert prof.callback_times[("on_step_begin", "GradientAccumulation")][1] == 16
    assert prof.batch_times().min() > 0 and len(prof.times["zero_grad"]) == 16


def test_a_skipped_step_from_a_callback_keeps_the_batches_whole():
    clock = FakeClock()

    class SkipOdd(Callback):
        def on_step_begin(self):
            if self.learn.iter % 2:
                clock.sleep(0.002)
                raise CancelStepException()
    learn = make_learner(dls=make_dls(n=128, bs=16, valid=False))
    prof = Profiler(clock=clock)
    learn.fit(1, cbs=[SkipOdd(), prof])
    assert learn.n_steps == 4 and prof.n_batches == 8
    seconds, calls = prof.callback_times[("on_step_begin", "SkipOdd")]
    assert calls == 8 and seconds == pytest.approx(4 * 0.002)  # the time until on_step_cancel is the canceller's
    assert prof.batch_times() == pytest.approx([0.0, 0.002] * 4)  # the batches stay whole, and hold it
    assert prof.times["callbacks"] == pytest.approx([0.0, 0.002] * 4)


def ddp_profile(n_epochs):
    "Train the DDP toy under a Profiler on each rank; return its batches and phases' totals."
    from dist_workers import toy_learner
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"))
    prof = Profiler()
    learn.fit(n_epochs, cbs=prof)
    return learn.engine.rank, prof.n_batches, {phase: sum(prof.times[phase]) for phase in PHASES}, stamped(learn)


def test_under_ddp_each_rank_records_its_own_times():
    results = launch(ddp_profile, nprocs=2, args=(2,))
    assert [r[0] for r in results] == [0, 1]
    for rank, n_batches, totals, still_stamped in results:
        assert n_batches == 2 * 6  # 96 items in batches of 16: each rank takes half of each batch, 6 per epoch
        assert totals["backward"] > 0 and totals["forward"] > 0  # backward holds the all-reduce
        assert not still_stamped


def test_the_live_chart_draws_in_widget_mode(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    learn = make_learner()
    plot = ProfilePlot(mode="widget")
    learn.fit(2, cbs=plot)
    assert plot.live.n_draws == 31 + 1  # a batch ends after its on_batch_end: one a batch from the second, and the last
    bands = plot.live.animated[:len(PHASES)]
    assert [band.get_label() for band in bands] == list(PHASES)
    top = bands[-1].get_xy()[:, 1].max()  # one batch a window: the stack's top is the slowest batch, in ms
    assert top == pytest.approx(plot.batch_times().max() * 1e3)
    fig = plot.plot()
    legend = fig.axes[0].get_legend()
    assert legend.get_window_extent().y0 >= fig.axes[0].bbox.y1  # above the axes: off the data


def test_the_chart_marks_rare_peaks_instead_of_flattening_the_rest():
    clock = FakeClock()

    class SleepOnce(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == 10:
                clock.sleep(0.02)
    learn = sleeping_learner(n=40, forward=0.001, data=0.001, sleep=clock.sleep)
    plot = ProfilePlot(mode="text", columns=100, clock=clock)
    learn.fit(1, cbs=[SleepOnce(), plot])
    fig = plot.plot()
    peaks = fig.axes[0].lines[0]
    assert list(peaks.get_xdata()) == [9.5]  # the 10th batch (0-based 9, window [9, 10]), and it alone, is marked
    median_ms = np.median(plot.batch_times()) * 1e3
    assert median_ms == pytest.approx(2.0)
    assert fig.axes[0].get_ylim()[1] == pytest.approx(2 * median_ms)  # the typical batch fills the axes


def test_a_failing_draw_warns_and_training_goes_on(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    learn = make_learner()
    plot = ProfilePlot(mode="widget")

    def broken(fig, artists, grow):
        raise RuntimeError("the figure broke")
    plot._fill = broken
    with pytest.warns(LivePlotWarning, match="the figure broke"):
        learn.fit(2, cbs=plot)
    assert len(learn.recorder.losses) == 32 and plot.n_batches == 32 and not stamped(learn)


def test_text_mode_prints_one_summary_wrapped_at_80_columns(capsys):
    learn = make_learner()
    learn.fit(1, cbs=ProfilePlot(mode="text"))
    out = capsys.readouterr().out.rstrip("\n").splitlines()
    first = next(i for i, line in enumerate(out) if line.startswith("ProfilePlot"))
    summary = " ".join(line.strip() for line in out[first:])  # the summary and its indented continuation lines
    assert all(len(line) <= 80 for line in out[first:]) and "…" not in summary
    assert "16 batches" in summary and "forward" in summary


def test_the_state_is_plain_and_a_checkpoint_saves_with_it(tmp_path):
    from looplab.checkpoint import load_checkpoint, save_checkpoint
    learn = make_learner()
    prof = Profiler()
    learn.add_cbs(prof)
    learn.fit(1)
    assert prof.state_dict() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_checkpoint(learn, tmp_path / "run.pt")
    load_checkpoint(make_learner(cbs=[Profiler()]), tmp_path / "run.pt")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA path needs a GPU; this machine has none")
def test_on_cuda_the_device_phases_are_read_from_cuda_events():
    learn = sleeping_learner(forward=0.002, engine=None)
    assert learn.engine.device.type == "cuda"
    prof = Profiler()
    learn.fit(2, cbs=prof)
    assert prof.n_batches == 32
    for phase in ("forward", "backward", "step"):
        assert len(prof.gpu_times[phase]) == 32 and all(t > 0 for t in prof.gpu_times[phase])
    assert np.median(prof.gpu_times["forward"]) < np.median(prof.times["forward"])  # the host's holds the sleep
    assert "GPU mean" in prof.table()


def test_a_long_epoch_is_read_as_it_goes(monkeypatch):
    import looplab.profiler as profiler
    monkeypatch.setattr(profiler, "_FLUSH_EVERY", 40)
    learn = make_learner(dls=make_dls(n=512, bs=16, valid=False))
    longest = []

    class LogLength(Callback):
        def on_batch_begin(self):
            longest.append(len(prof._reader.ids))
    prof = Profiler()
    learn.fit(1, cbs=[prof, LogLength()])
    assert prof.n_batches == 32 and max(longest) < 40 + 30  # without the guard: hundreds by the last batch
    assert prof.shares()["data"] > 0


def test_torch_trace_writes_a_trace_tensorboard_opens(tmp_path):
    import json
    from looplab.torch_trace import TorchTrace
    learn = make_learner()
    trace = TorchTrace(tmp_path, skip=3, batches=2)
    prof = Profiler()
    learn.fit(1, cbs=[trace, prof])  # the two together: the trace's own callbacks are timed like any other
    assert [path.parent for path in trace.traces] == [tmp_path] and trace.traces[0].name.endswith(".pt.trace.json")
    events = json.loads(trace.traces[0].read_text())["traceEvents"]
    steps = sorted(e["name"] for e in events  # the host's marks (on CUDA each step is marked again on the GPU)
                   if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation")
    assert steps == ["ProfilerStep#3", "ProfilerStep#4"]  # after 3 batches skipped: the 4th and 5th (0-based 3, 4)
    assert prof.n_batches == 16 and ("on_batch_end", "TorchTrace") in prof.callback_times
    learn.fit(1, cbs=TorchTrace(tmp_path, skip=1, batches=1))  # a second fit: its own file, the first kept
    assert len(list(tmp_path.glob("*.pt.trace.json"))) == 2


def test_callbacks_added_mid_fit_are_said_with_the_batches_profiled():
    "Adding a callback during the fit rebuilds the handlers without stamps: a warning says up to which batch the profile holds."
    learn = make_learner(dls=make_dls(n=160, bs=16, valid=False))

    class Silent(Callback):
        def on_batch_end(self):
            pass

    class AddsOne(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 3:
                self.learn.add_cbs(Silent())
    prof = Profiler()
    with pytest.warns(UserWarning, match=r"added or removed during the fit.*first 4 training batches"):
        learn.fit(1, cbs=[prof, AddsOne()])
    assert prof.n_batches == 4 and not stamped(learn)
