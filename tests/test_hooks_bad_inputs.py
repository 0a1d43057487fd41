"""Hooks and activation statistics against what users do to them: a layer run twice per forward, a closure optimizer,
a copy of the hooked model mid-fit, callbacks removed mid-fit, wrong arguments, and the pictures' promises (a short
last batch reads as a full one, a stopped fit's axes hold what was done)."""
import copy
import io
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import hooks_worker as w
from looplab.activation_panels import _panels
from looplab.activations import ActivationPlot, ActivationStats, _sample_index, activation_row, activation_rows
from looplab.callback import Callback, CallbackError, CancelFitException
from looplab.conv import conv_net, signal_dls
from looplab.hooks import Hook, HookCallback, Hooks, find_modules
from looplab.data import set_seed
from looplab.learner import Learner

pytestmark = pytest.mark.usefixtures("one_thread")  # the fixture is conftest's


def dls(n_train=280):
    "Seven training batches of 40 at the default."
    return signal_dls(n_train=n_train, n_valid=40, bs=40, seed=1)


def learner(model=None, n_train=280, **kwargs) -> Learner:
    set_seed(0)
    return Learner(model or conv_net(channels=w.CHANNELS), dls(n_train), progress=False, **kwargs)


def hooks_left(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._backward_hooks) for m in model.modules())


class Twice(nn.Module):
    "One Linear applied twice in each forward, then a head."
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(40, 40)
        self.head = nn.Linear(40, 10)

    def forward(self, x):
        return self.head(self.lin(torch.relu(self.lin(x))))


def test_a_layer_run_twice_per_forward_gets_one_row_per_batch_merged_and_says_so():
    stats = ActivationStats()
    model = Twice()
    with pytest.warns(UserWarning, match="lin Linear ran more than once.*merges its calls") as record:
        learner(model).fit(1, cbs=stats)
    assert len([r for r in record if "more than once" in str(r.message)]) == 1  # said once
    assert stats.n_batches == 7 and stats.means["lin"].shape == stats.means["head"].shape == (7,)  # was 14 and 7
    assert stats.n_calls == {"lin": 14, "head": 7}
    assert np.allclose(stats.hists["lin"].sum(axis=1), 1.0)  # one histogram of both calls' activations
    # the first batch's row equals the row of both calls' sampled outputs together, seen by a hook of our own
    outputs = []
    seen = model.lin.register_forward_hook(lambda m, i, out: outputs.append(out.detach().reshape(-1).clone()))
    stats = ActivationStats()
    with pytest.warns(UserWarning, match="merges its calls"):
        learner(model).fit(1, cbs=stats)
    seen.remove()
    index = _sample_index(outputs[0].numel(), 1024)  # each call's 1,600 outputs: the same 1,024 positions
    both = torch.cat([outputs[0][index], outputs[1][index]])
    expected = activation_row(both, 40, 10.0, 0.05)
    assert np.allclose(stats.means["lin"][0], expected[0].item(), atol=1e-6)
    assert np.allclose(stats.stds["lin"][0], expected[1].item(), rtol=1e-6)
    assert np.array_equal(stats.hists["lin"][0], expected[3:].cpu().numpy())


def test_an_in_place_operation_after_a_hooked_layer_does_not_reach_its_statistics():
    "The activations wait on the device until a flush describes them: a ReLU(inplace=True) after the layer must not change them."
    set_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(40, 20), nn.ReLU(inplace=True), nn.Linear(20, 10))  # 800 outputs: kept whole
    outputs = []
    seen = model[1].register_forward_hook(lambda m, i, out: outputs.append(out.detach().clone()))  # before the ReLU
    stats = ActivationStats(modules=nn.Linear)
    learner(model).fit(1, cbs=stats)
    seen.remove()
    first = outputs[0].reshape(-1)
    assert (first < 0).sum() > 100  # the ReLU would have zeroed these
    expected = activation_row(first, 40, 10.0, 0.05)
    assert np.allclose(stats.means["1"][0], expected[0].item(), atol=1e-6)
    assert np.array_equal(stats.hists["1"][0], expected[3:].cpu().numpy())


def test_a_closure_optimizer_counts_batches_and_names_its_evaluations_apart():
    stats = ActivationStats()
    learn = learner(opt_func=lambda params, lr: torch.optim.LBFGS(params, lr=lr, max_iter=5))
    learn.fit(1, cbs=stats)
    assert stats.n_batches == 7  # was 35: one row per evaluation
    assert stats.n_reevaluations >= 7  # LBFGS evaluated each batch again, at least once: seen, not recorded
    assert all(n == 7 for n in stats.n_calls.values())


class EMA(Callback):
    "Keeps a deep copy of the model after each training batch (an exponential moving average would start so)."
    def on_batch_end(self):
        if self.learn.training:
            self.copy = copy.deepcopy(self.learn.model)
            self.copy(self.learn.xb)  # the copy's own forward, in training mode
            self.left = hooks_left(self.copy)


@pytest.mark.parametrize("kind", ["stats", "plot"])
def test_a_deep_copy_of_the_hooked_model_mid_fit_carries_no_hooks_and_the_original_keeps_recording(kind):
    cb = ActivationStats() if kind == "stats" else ActivationPlot(mode="text", file=io.StringIO())
    stats = cb if kind == "stats" else cb.stats
    ema = EMA()
    learn = learner()
    learn.fit(2, cbs=[cb, ema])  # was: KeyError: Conv1d(...) in on_batch_end
    assert stats.n_batches == 14 and all(n == 14 for n in stats.n_calls.values())  # the copies' forwards: not counted
    assert ema.left == 0 and hooks_left(learn.model) == 0  # the copy dropped what it carried at its first forward


def test_a_whole_model_saved_mid_fit_pickles_and_loads_without_hooks():
    class SaveModel(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == 2:
                self.file = io.BytesIO()
                torch.save(self.learn.model, self.file)  # was: Can't pickle local object 'Hook.__init__.<locals>.call'
    saver = SaveModel()
    learner().fit(1, cbs=[ActivationStats(), saver])
    saver.file.seek(0)
    model = torch.load(saver.file, weights_only=False)
    model(torch.randn(3, 40, device=next(model.parameters()).device))  # where it was saved: the GPU, if any
    assert hooks_left(model) == 0


class Remove(Callback):
    "Removes `cb` from the Learner at training batch 2."
    def __init__(self, cb):
        self.cb = cb

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == 2:
            self.learn.remove_cbs(self.cb)
            self.left = hooks_left(self.learn.model)


@pytest.mark.parametrize("kind", ["stats", "plot", "hook callback"])
def test_a_callback_removed_mid_fit_takes_its_hooks_with_it(kind):
    class Count(HookCallback):
        def hook(self, module, inputs, outputs):
            pass
    cb = {"stats": ActivationStats, "plot": lambda: ActivationPlot(mode="text", file=io.StringIO()),
          "hook callback": Count}[kind]()
    remove = Remove(cb)
    learn = learner()
    learn.add_cbs(cb)
    learn.fit(1, cbs=remove)
    assert remove.left == 0 and hooks_left(learn.model) == 0 and learn.recorder.losses  # training went on


class Conditional(nn.Module):
    "Runs `a` in odd forwards and `b` in even ones."
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(40, 10)
        self.b = nn.Linear(40, 10)
        self.k = 0

    def forward(self, x):
        self.k += 1
        return self.a(x) if self.k % 2 else self.b(x)


def test_a_layer_that_did_not_run_in_a_batch_gets_a_row_of_nan_so_the_rows_stay_aligned():
    stats = ActivationStats()
    learner(Conditional()).fit(1, cbs=stats)  # was: 4 rows for a, 3 for b, n_batches 4
    assert stats.n_batches == 7 and len(stats.means["a"]) == len(stats.means["b"]) == 7
    assert np.isnan(stats.means["b"][0]) and not np.isnan(stats.means["a"][0])
    assert np.isnan(stats.means["a"][1]) and np.isnan(stats.hists["a"][1]).all()  # not measured: not a zero


def test_a_short_last_batch_reads_as_a_full_one():
    "Batches of 40, 40 and 20: the shares per bin add up to 1 in each, so the short one paints no darker stripe."
    stats = ActivationStats()
    learner(n_train=100).fit(1, cbs=stats)
    for name, h in stats.hists.items():
        assert h.shape[0] == 3 and np.allclose(h.sum(axis=1), 1.0), name
        assert abs(h[2].max() - h[1].max()) < 0.5 * h[1].max(), name  # counts would halve it


def test_sample_none_describes_every_activation_and_a_sample_the_same_fixed_positions():
    full, sampled, again = ActivationStats(sample=None), ActivationStats(sample=256), ActivationStats(sample=256)
    for stats in (full, sampled, again):
        learner().fit(1, cbs=stats)
    assert all(np.array_equal(sampled.hists[k], again.hists[k]) for k in sampled.names)  # the same positions
    assert all(np.allclose(full.means[k], sampled.means[k], atol=0.15) for k in full.names)  # about the same numbers
    assert not all(np.array_equal(full.hists[k], sampled.hists[k]) for k in full.names)


@pytest.mark.parametrize("kind", ["cancel", "removed"])
def test_after_a_stopped_fit_the_axes_hold_what_was_done(kind):
    class Stop(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == 4:
                raise CancelFitException()
    plot = ActivationPlot(mode="widget")
    learn = learner()
    learn.fit(5, cbs=[plot, Stop() if kind == "cancel" else Remove(plot)])
    done = plot.stats.n_batches
    assert done in (2, 4)
    panels = _panels(plot.live.fig)
    assert len(panels) == 4 and all(ax.get_xlim() == (0, done) for ax in panels)  # not the 35 batches planned
    assert all(ax.get_xlim() == (0, done) for ax in _panels(plot.plot()))


def test_the_live_figure_fits_a_jupyterlab_output_and_has_a_colour_scale():
    plot = ActivationPlot(mode="widget")
    learner(conv_net()).fit(1, cbs=plot)  # 4 hooked layers
    fig = plot.live.fig
    assert fig.get_size_inches()[0] * fig.dpi <= 900  # a 1,280 pixel window shows it unshrunk
    panels = _panels(fig)
    bars = [ax for ax in fig.axes if ax not in panels]  # the colour scale's axes, in the key's place
    assert [bar.get_xlabel() for bar in bars] == ["share of a batch's activations in a bin"]
    assert [t.get_text() for t in bars[0].get_xticklabels()] == ["0.1%", "1%", "10%", "100%"]
    scale = bars[0].images[0]  # the colour map of the histograms, over the decades their shares span
    assert scale.get_cmap().name == plot.live.fig.axes[0].images[0].get_cmap().name and bars[0].get_xlim() == (-3, 0)
    curves = fig.axes[len(plot.stats.names)]  # the near-zero shares, the panel before the key
    assert curves.lines and bars[0].get_position().x0 > curves.get_position().x1  # right of it, not over it
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == plot.stats.labels
    sizes = [label.get_fontsize() for ax in fig.axes for label in ax.get_xticklabels() + ax.get_yticklabels()]
    assert sizes and min(sizes) >= 9  # points: 10 pixels or more at 80 dpi, shown unshrunk


def test_a_bad_modules_list_is_refused_before_the_first_batch():
    model = conv_net(channels=w.CHANNELS)
    with pytest.raises(ValueError, match="lists .*Conv1d.* twice: give each module once"):
        find_modules(model, [model[1], model[1]])  # was: two names for one module, and n_batches 0
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got 'model'"):
        find_modules("model")  # was: AttributeError: 'str' object has no attribute 'named_modules'
    with pytest.raises(ValueError, match="twice"):
        ActivationStats([model[1], model[1]])


@pytest.mark.parametrize("call, error, fragment", [
    (lambda: Hooks(nn.Linear(2, 2), print), TypeError, "got one Linear: for one module, use Hook or \\[module\\]"),
    (lambda: Hook(nn.Linear(2, 2), print, backward="yes"), TypeError, "backward must be a bool"),
    (lambda: ActivationStats(sample=0), ValueError, "sample must be an int >= 1"),
    (lambda: activation_rows([], 40, 10.0, 0.05), ValueError, "a list of one tensor or more, got an empty list"),
    (lambda: ActivationStats(sample=2.5), TypeError, "sample must be an int"),
    (lambda: ActivationPlot(figsize=(0, 3)), ValueError, "figsize\\[0\\] must be a number > 0"),
    (lambda: ActivationPlot(figsize=10), TypeError, "figsize must be None or \\(width, height\\)"),
    (lambda: ActivationPlot(dpi=-1), ValueError, "dpi must be an int >= 1"),
    (lambda: ActivationStats().hist_plot(figsize=(3,)), TypeError, "figsize"),
    (lambda: ActivationStats().load_state_dict({"names": ["1"], "bins": 40}), ValueError, "lacks hist_max"),
    (lambda: ActivationStats(sample=None).load_state_dict(ActivationStats().state_dict()), ValueError, "sample"),
])
def test_bad_arguments_are_refused_by_name(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()


class Side(nn.Module):
    "A layer with weights whose forward returns None."
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return None


class WithSide(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = Side()
        self.lin = nn.Linear(40, 10)

    def forward(self, x):
        self.side(x)
        return self.lin(x)


def test_a_layer_whose_output_is_not_a_tensor_is_named_with_the_fix():
    learn = learner(WithSide())
    with pytest.raises(TypeError, match="hooked Side, whose output is a NoneType.*modules=nn.Conv1d"):
        learn.fit(1, cbs=ActivationStats())
    assert hooks_left(learn.model) == 0
    stats = ActivationStats(nn.Linear)  # the fix: select the layers whose output is a tensor
    learner(WithSide()).fit(1, cbs=stats)
    assert stats.names == ["lin"] and stats.n_batches == 7


def test_an_empty_activation_gives_nan_statistics_not_an_error():
    row = activation_row(torch.zeros(0, 5), 4, 8.0, 0.5)
    assert row[:2].isnan().all() and (row[2:] == 0).all()


def test_a_model_with_no_layer_with_weights_is_refused_by_name():
    model = nn.Sequential(nn.ReLU())
    with pytest.raises(ValueError, match="selects no module of the model Sequential"):
        find_modules(model)
    learn = learner(nn.Sequential(nn.Linear(40, 10), nn.ReLU()))
    with pytest.raises(CallbackError, match="on_train_begin.*selects no module"):
        learn.fit(1, cbs=ActivationStats(nn.Conv1d))
    assert hooks_left(learn.model) == 0


def test_no_warning_for_a_plain_model():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        learner().fit(1, cbs=ActivationStats())
