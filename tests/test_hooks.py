"""Hooks and activation statistics (looplab.hooks, looplab.activations): the hooks go after every kind of exit, the weights and an exact
resume are the same with them as without, each DDP rank records its own shard, and the live plot draws without ever
stopping training."""
import gc
import io
import os
import signal
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import hooks_worker as w
from helpers import PNG, StopAt
from looplab.callback import Callback, CallbackError, CancelFitException
from looplab.checkpoint import load_checkpoint
from looplab.conv import conv_net, signal_dls
from looplab.data import DataLoaders, set_seed
from looplab.distributed import launch
from looplab.activations import ActivationPlot, ActivationStats
from looplab.hooks import Hooks
from looplab.learner import Learner
from looplab.widgets import LivePlotWarning


pytestmark = pytest.mark.usefixtures("one_thread", "deterministic_cudnn")  # the fixtures are conftest's


def learner(n_train=120, cbs=None, model=None) -> Learner:
    "A seeded small conv net on the signals, batches of 40 (3 a epoch at the default), no progress table."
    set_seed(0)
    dls = signal_dls(n_train=n_train, n_valid=40, bs=40, seed=1)
    return Learner(model or conv_net(channels=w.CHANNELS), dls, progress=False, cbs=cbs)


def hooks_left(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._backward_hooks) for m in model.modules())


def weights(learn) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learn.model.parameters()]


class RaiseIn(Callback):
    "Raises `error` in `event` (at training batch `n_iter` for batch events)."
    def __init__(self, event, error, n_iter=2, order=0):
        self.error = error
        self.n_iter = n_iter
        self.order = order
        setattr(self, event, self.maybe_raise)

    def maybe_raise(self):
        if self.learn.n_iter >= self.n_iter or not self.learn.training:
            raise self.error


class PressStop(Callback):
    "Sends this process SIGINT at the start of training batch 2: Stop, pressed once (the fit ends after the batch)."
    def on_batch_begin(self):
        if self.learn.training and self.learn.n_iter == 2:
            os.kill(os.getpid(), signal.SIGINT)


class Boom(nn.Module):
    "Passes its input on, and raises in the third forward: an exception in the model's forward."
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("boom in the model")
        return x


EXITS = {  # name: (the extra callbacks or model, the exception fit raises, or None)
    "normal end": ([], None),
    "CancelFitException": ([RaiseIn("on_batch_end", CancelFitException())], None),
    "exception in the model's forward": ("boom", RuntimeError),
    "exception in another callback's on_batch_end": ([RaiseIn("on_batch_end", ValueError("bad"))], CallbackError),
    "another callback's on_train_end raises": ([RaiseIn("on_train_end", ValueError("bad"), 0)], CallbackError),
    "another callback's on_train_begin raises": ([RaiseIn("on_train_begin", ValueError("bad"), 0)], CallbackError),
    "KeyboardInterrupt inside a batch": ([RaiseIn("on_step_begin", KeyboardInterrupt())], KeyboardInterrupt),
    "Stop between two batches": ([PressStop()], KeyboardInterrupt),
}


@pytest.mark.parametrize("kind", ["stats", "plot"])
@pytest.mark.parametrize("exit_name", list(EXITS))
def test_the_hooks_are_gone_after_every_kind_of_exit(exit_name, kind):
    if exit_name == "Stop between two batches" and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT has a handler other than Python's default here")
    extra, error = EXITS[exit_name]
    model = nn.Sequential(conv_net(channels=w.CHANNELS), Boom()) if extra == "boom" else None
    cb = ActivationStats() if kind == "stats" else ActivationPlot(mode="text", file=io.StringIO())
    stats = cb if kind == "stats" else cb.stats
    learn = learner(model=model)
    if error is None:
        learn.fit(2, cbs=[cb, *(extra if extra != "boom" else [])])
    else:
        with pytest.raises(error):
            learn.fit(2, cbs=[cb, *(extra if extra != "boom" else [])])
    assert hooks_left(learn.model) == 0 and stats.hooks is None
    assert len(stats.layers) == 3 and all(not m._forward_hooks for m in stats.layers)
    if exit_name == "normal end":
        assert stats.n_batches == 6
    elif "on_train_begin" not in exit_name:
        assert stats.n_batches >= 1 and len(stats._buffer.rows) == stats.n_batches  # flushed at the end


class CountHooks(Callback):
    "Counts the forward hooks on the model at each training batch."
    def __init__(self):
        self.counts = []

    def on_batch_end(self):
        if self.learn.training:
            self.counts.append(hooks_left(self.learn.model))


def test_leftovers_of_a_fit_whose_on_train_end_never_came_are_removed_at_the_next_fit():
    "A callback of a lower order raises in on_train_end first: the hooks stay, and the next fit removes them."
    stats = ActivationStats()
    learn = learner()
    with pytest.raises(CallbackError):
        learn.fit(1, cbs=[stats, RaiseIn("on_train_end", ValueError("first"), 0, order=-200)])
    assert hooks_left(learn.model) == 3  # ActivationStats's on_train_end never ran
    counter = CountHooks()
    learn.fit(1, cbs=[stats, counter])
    assert counter.counts == [3, 3, 3] and hooks_left(learn.model) == 0  # one hook per layer, not two


def test_a_failure_while_registering_removes_what_was_registered(monkeypatch):
    learn = learner()
    last = learn.model[-1]

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot hook this one")
    monkeypatch.setattr(last, "register_forward_hook", refuse)
    stats = ActivationStats()
    with pytest.raises(CallbackError, match="cannot hook this one"):
        learn.fit(1, cbs=stats)
    assert hooks_left(learn.model) == 0 and learn.recorder.losses == []


def test_hooks_nobody_keeps_are_removed_when_collected():
    model = conv_net(channels=w.CHANNELS)
    hooks = Hooks(model.modules(), lambda *args: None)
    assert hooks_left(model) == len(list(model.modules()))
    del hooks
    gc.collect()
    assert hooks_left(model) == 0


@pytest.mark.usefixtures("always_due")
def test_the_weights_are_bit_identical_with_the_statistics_and_the_plot_on_and_off():
    runs = {}
    for name, cbs in (("off", []), ("stats", [ActivationStats()]), ("plot", [ActivationPlot(mode="widget")])):
        learn = learner()
        learn.fit(3, cbs=cbs)
        runs[name] = weights(learn)
    for name in ("stats", "plot"):
        assert all(torch.equal(p, q) for p, q in zip(runs[name], runs["off"])), name


@pytest.mark.parametrize("kind", ["stats", "plot"])
def test_a_checkpoint_mid_fit_resumes_to_the_same_weights_and_statistics(tmp_path, kind):
    "Stopped after batch 7 of 10 with ActivationStats attached, resumed in a fresh Learner: as if never stopped."
    def make():
        return ActivationStats() if kind == "stats" else ActivationPlot(mode="text", file=io.StringIO())

    def rows(cb):
        return (cb if kind == "stats" else cb.stats).state_dict()["rows"]
    whole_cb = make()
    whole = learner(n_train=200)
    whole.fit(2, cbs=[whole_cb, StopAt(None, tmp_path / "unused.pt")])
    path = tmp_path / "mid.pt"
    first_cb = make()
    first = learner(n_train=200)
    first.fit(2, cbs=[first_cb, StopAt(7, path)])
    assert len(rows(first_cb)) == 7
    resumed_cb = make()
    resumed = learner(n_train=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no callback holds tensors the checkpoint would not save
        load_checkpoint(resumed, path)
    resumed.fit(2, cbs=[resumed_cb, StopAt(None, path)])
    assert all(torch.equal(p, q) for p, q in zip(weights(resumed), weights(whole)))
    assert len(rows(resumed_cb)) == len(rows(whole_cb)) == 10
    # On the CPU the rows are the same bits. On CUDA the mean and std of each row are reduced by a kernel chosen for
    # the shape of the whole flush (how many batches it holds), which a resume changes: the last bit may differ.
    exact = next(resumed.model.parameters()).device.type == "cpu"
    for mine, theirs in zip(rows(resumed_cb), rows(whole_cb)):
        assert torch.equal(mine, theirs) if exact else torch.allclose(mine, theirs, rtol=1e-5, atol=1e-7)


def test_autocast_activations_are_counted_in_float():
    "bfloat16 autocast on the CPU: every activation lands in a bin, and the weights train as without the statistics."
    stats = ActivationStats()
    learn = learner().to_bf16()
    learn.fit(1, cbs=stats)
    reference = learner().to_bf16()
    reference.fit(1)
    assert all(torch.equal(p, q) for p, q in zip(weights(learn), weights(reference)))
    head = stats.hists["8"]
    assert head.shape == (3, 40) and np.allclose(head.sum(axis=1), 1.0)  # every logit in a bin: shares add up to 1


@pytest.mark.parametrize("by_class", [False, True], ids=["default modules", "modules=nn.Conv1d"])
def test_under_ddp_each_rank_records_its_own_shard(by_class):
    "Two gloo ranks: each rank's rows equal a hand computation on the items of its own shard."
    results = launch(w.ddp_rank_stats, nprocs=2, args=(by_class,))
    for rank, r in enumerate(results):
        assert r["wrapper"] == "_LoopDDP" and r["same_layers"] and r["hooks_left"] == 0, rank
        assert r["names"] == (["1", "3"] if by_class else ["1", "3", "8"]), rank
        assert r["batch_sizes"] == [20, 20, 20, 20], rank  # a shard: half of each batch of 40
        for name, rows, hand in zip(r["names"], r["rows"], r["hand"]):
            assert rows.shape == hand.shape == (4, 43), (rank, name)
            assert torch.allclose(rows[:, :2], hand[:, :2], rtol=1e-5, atol=1e-6), (rank, name)  # mean, std
            assert torch.equal(rows[:, 2:], hand[:, 2:]), (rank, name)  # share near zero, histogram: exact
            assert torch.allclose(rows[:, 3:].sum(dim=1), torch.ones(4)), (rank, name)  # shares of the sample
    assert not torch.equal(results[0]["rows"][0], results[1]["rows"][0])  # two shards: two sets of numbers


@pytest.mark.usefixtures("always_due")
def test_the_live_plot_draws_frames_in_widget_mode_blitted():
    plot = ActivationPlot(mode="widget")
    learn = learner()
    learn.fit(2, cbs=plot)
    assert plot.live.n_draws == 6 + 1  # every batch (all due here), and the last picture at the end
    assert plot.live.n_full_draws == 1  # the axes span the whole fit from the start: only the images and lines redraw
    assert plot.live.png.startswith(b"\x89PNG") and plot.stats.n_batches == 6


def test_the_static_pictures_save_as_png(tmp_path):
    stats = ActivationStats()
    learner().fit(1, cbs=stats)
    for name, figure in (("hists", stats.hist_plot()), ("curves", stats.stats_plot())):
        path = figure.save(tmp_path / f"{name}.png")
        assert path.read_bytes().startswith(PNG) and figure._repr_png_().startswith(PNG), name


class XLims(Callback):
    "The first panel's x limits after each training batch (the plot draws before, at its order)."
    def __init__(self, plot):
        self.plot = plot
        self.xlims = []

    def on_batch_end(self):
        if self.learn.training and self.plot.live is not None:
            self.xlims.append(tuple(self.plot.live.fig.axes[0].get_xlim()))


@pytest.mark.usefixtures("always_due")
def test_the_x_axes_grow_for_a_loader_without_a_length():
    class NoLength:
        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            return iter(self.batches)
    x, y = signal_dls(n_train=200, n_valid=40, bs=40, seed=1).train.dataset.tensors
    batches = [(x[i:i + 20], y[i:i + 20]) for i in range(0, 200, 20)]  # 10 batches
    set_seed(0)
    learn = Learner(conv_net(channels=w.CHANNELS), DataLoaders(NoLength(batches)), progress=False)
    plot = ActivationPlot(mode="widget")
    probe = XLims(plot)
    learn.fit(2, cbs=[plot, probe])
    assert probe.xlims[-1] == (0, 32)  # 20 batches while training: the axis doubled to the next power of two
    assert plot.live.fig.axes[0].get_xlim() == (0, 20)  # the final picture: what was done
    assert plot.stats.n_batches == 20 and 1 < plot.live.n_full_draws < plot.live.n_draws


@pytest.mark.usefixtures("always_due")
def test_a_failing_draw_never_stops_training(monkeypatch):
    def broken(self, fig, artists, grow):
        raise RuntimeError("the drawing broke")
    monkeypatch.setattr(ActivationPlot, "_fill", broken)
    plot = ActivationPlot(mode="widget")
    learn = learner()
    with pytest.warns(LivePlotWarning, match="the drawing broke"):
        learn.fit(2, cbs=plot)
    reference = learner()
    reference.fit(2)
    assert len(learn.recorder.values) == 2 and plot.stats.n_batches == 6  # trained on, statistics kept
    assert all(torch.equal(p, q) for p, q in zip(weights(learn), weights(reference)))
    assert hooks_left(learn.model) == 0


class Terminal(io.StringIO):
    "A file that says it is a terminal: the progress line is rewritten in it (elsewhere only finished lines)."
    def isatty(self):
        return True


def test_text_mode_prints_a_progress_line_and_one_summary_within_80_columns():
    out = Terminal()
    learn = learner()
    learn.fit(2, cbs=ActivationPlot(mode="text", file=out, every_ms=1, max_overhead=1))
    lines = out.getvalue().splitlines()  # the progress line's rewrites (carriage returns) count as lines
    assert all(len(line) <= 80 for line in lines) and out.getvalue().count("ActivationPlot:") == 1
    assert any(line.startswith("epoch 2/2 · batch 3/3") for line in lines)  # the progress line, while training
    summary = out.getvalue().rstrip("\n").rsplit("\r", 1)[-1]
    assert "\n" not in summary and summary.startswith("ActivationPlot: 6 batches; |a| < 0.05 at the last: 1 ")
    assert ", 3 " in summary and ", 8 " in summary
