"""looplab.regularize and looplab.monitor: clipping through the engine, accumulation equal to the big batch, mixup,
AR/TAR, NaN stops, monitors checked against the Recorder, early stopping, save-best, SWA against AveragedModel,
TensorBoard read back, ablations; and one run combining them, killed at a random batch and resumed in a new process."""
import copy
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from torch import nn

from helpers import run_worker
from looplab.callback import Callback, CallbackError
from looplab.data import DataLoaders, set_seed
from looplab.engine import AMPEngine
from looplab.learner import Learner
from looplab.metrics import Accuracy
from looplab.monitor import SWA, EarlyStopping, SaveBestModel, TensorBoardLogger, ablate
from looplab.regularize import (GradientAccumulation, GradientClipping, LabelSmoothingCrossEntropy, MixUp,
                                RNNRegularizer, TerminateOnNaN)
from looplab.schedule import fit_one_cycle

WORKER = Path(__file__).resolve().parent / "regularize_worker.py"


def batches(n=256, bs=16, seed=0, n_in=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, n_in, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return [(x[i:i + bs], y[i:i + bs]) for i in range(0, n, bs)]


def make_learner(model=None, train=None, valid=None, metrics=None, **kwargs):
    set_seed(0)
    train = train if train is not None else batches()
    model = model or nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    learn = Learner(model, DataLoaders(train, valid if valid is not None else train[:4]), metrics=metrics, **kwargs)
    learn.remove_cbs(learn.progress)
    return learn


class Recording(torch.optim.SGD):
    "SGD that keeps, at each step, the gradients it steps with and their global norm."
    log: list = []

    def step(self, closure=None):
        grads = [p.grad.clone() for g in self.param_groups for p in g["params"] if p.grad is not None]
        Recording.log.append((grads, torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()))
        return super().step(closure)


# --- clipping -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [None, AMPEngine(torch.float16, device="cpu")])
def test_clipping_bounds_the_norm_the_optimizer_sees_also_under_loss_scaling(engine):
    Recording.log = []
    learn = make_learner(lr=2.0, opt_func=Recording, engine=engine)
    learn.fit(1, cbs=GradientClipping(max_norm=0.05))
    norms = [n for _, n in Recording.log]
    assert norms and max(norms) <= 0.05 * (1 + 1e-5)
    assert min(norms) > 0.04  # clipped to the bound, on unscaled gradients (scaled ones would end far below it)
    assert learn.clip_fn is None


def test_clipping_changes_the_run_and_clips_values():
    plain = make_learner(lr=1.0)
    plain.fit(1)
    clipped = make_learner(lr=1.0)
    clipped.fit(1, cbs=GradientClipping(max_norm=0.01))
    assert plain.recorder.losses[0] == clipped.recorder.losses[0] and plain.recorder.losses != clipped.recorder.losses
    Recording.log = []
    learn = make_learner(lr=0.1, opt_func=Recording)
    learn.fit(1, cbs=GradientClipping(max_value=1e-3))
    assert all(g.abs().max() <= 1e-3 for grads, _ in Recording.log for g in grads)


# --- accumulation ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_accumulated_gradient_equals_the_big_batch_gradient(n):
    train = batches(n=16 * n, bs=16)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    start = copy.deepcopy(model)
    Recording.log = []
    learn = make_learner(model=model, train=train, opt_func=Recording, lr=0.1)
    learn.fit(1, cbs=GradientAccumulation(n))
    assert learn.n_steps == 1
    x = torch.cat([xb for xb, _ in train])
    y = torch.cat([yb for _, yb in train])
    nn.functional.cross_entropy(start(x), y).backward()
    for ours, p in zip(Recording.log[0][0], start.parameters()):
        assert (ours - p.grad).abs().max() < 1e-6


def test_recorded_loss_is_the_true_batch_loss_under_float16_loss_scaling():
    train = batches(n=64, bs=16)
    engine = AMPEngine(torch.float16, device="cpu")
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    start = copy.deepcopy(model)
    learn = make_learner(model=model, train=train, engine=engine)
    learn.fit(1, cbs=GradientAccumulation(4))
    with engine.autocast():
        expected = [nn.functional.cross_entropy(start(xb), yb).item() for xb, yb in train]
    assert learn.recorder.losses == expected


@pytest.mark.parametrize("last, n_steps, n_recorded", [("step", 6, 23), ("drop", 5, 20)])
def test_last_partial_window_is_stepped_or_dropped(last, n_steps, n_recorded):
    class Spy(Callback):
        order = 10
        def __init__(self):
            self.flags = []
        def on_backward_end(self):
            self.flags.append(self.learn.sync_grads)

    spy = Spy()
    learn = make_learner(train=batches(n=23 * 16))
    learn.fit(1, cbs=[GradientAccumulation(4, last=last), spy])
    assert learn.n_steps == n_steps and len(learn.recorder.losses) == n_recorded
    last_window = [False, False, True] if last == "step" else []  # dropped batches run no backward at all
    assert spy.flags == [False, False, False, True] * 5 + last_window
    assert learn.sync_grads is True


def test_accumulation_moves_the_schedule_once_per_window():
    learn = make_learner(train=batches(n=24 * 16), opt_func=lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9))
    fit_one_cycle(learn, 2, lr_max=0.1, cbs=GradientAccumulation(3))
    lrs = learn.recorder.lrs
    assert learn.n_steps == 16
    assert all(lrs[i] == lrs[i - i % 3] for i in range(len(lrs)))  # one value per window
    assert math.isclose(lrs[-1], 0.1 / 25 / 1e4)


# --- mixup, label smoothing, AR/TAR, NaN ----------------------------------------------------------------------

def test_mixup_blends_inputs_and_losses_in_training_only():
    class Check(Callback):
        order = 1
        def on_loss_begin(self):
            if not self.learn.training:
                assert torch.equal(self.learn.xb, self.learn.dl[self.learn.iter][0])
                return
            mix = next(cb for cb in self.learn.cbs if isinstance(cb, MixUp))
            raw = self.learn.dls.train[self.learn.iter][0]
            assert torch.allclose(self.learn.xb, mix.lam * raw + (1 - mix.lam) * raw[mix.shuffle], atol=1e-6)
            loss = mix.lam * nn.functional.cross_entropy(self.learn.preds, self.learn.yb) + \
                (1 - mix.lam) * nn.functional.cross_entropy(self.learn.preds, self.learn.yb[mix.shuffle])
            self.expected = loss

        def on_backward_begin(self):
            assert torch.allclose(self.learn.loss_grad, self.expected)

    learn = make_learner()
    learn.fit(1, cbs=[MixUp(0.4), Check()])
    assert learn.loss_func is nn.functional.cross_entropy
    with pytest.raises(ValueError, match="alpha must be a number > 0"):
        MixUp(0)
    with pytest.raises(ValueError, match="alpha"):
        MixUp(-0.2)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 6), c=st.integers(1, 6), extra=st.lists(st.integers(1, 4), max_size=2),
       eps=st.sampled_from([0.0, 0.1, 0.35, 0.9]), weighted=st.booleans(), ignore=st.sampled_from([-100, 0, 2]),
       p_ignored=st.sampled_from([0.0, 0.3, 1.0]), reduction=st.sampled_from(["mean", "sum", "none"]),
       seed=st.integers(0, 2**16))
def test_label_smoothing_equals_torch_on_every_shape_weight_ignore_index_and_reduction(
        n, c, extra, eps, weighted, ignore, p_ignored, reduction, seed):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(n, c, *extra, generator=g)
    y = torch.randint(0, c, (n, *extra), generator=g)
    y[torch.rand(y.shape, generator=g) < p_ignored] = ignore
    weight = torch.rand(c, generator=g) + 0.1 if weighted else None
    mine = LabelSmoothingCrossEntropy(eps, weight=weight, ignore_index=ignore, reduction=reduction)(logits, y)
    theirs = nn.functional.cross_entropy(logits, y, weight=weight, ignore_index=ignore, label_smoothing=eps,
                                         reduction=reduction)
    assert mine.shape == theirs.shape
    assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-5, equal_nan=True)  # NaN alike: all targets ignored


def test_label_smoothing_flattened_equals_transposed_and_ignored_rows_do_not_count():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 6, 5, generator=g)
    y = torch.randint(0, 6, (8, 5), generator=g)
    loss = LabelSmoothingCrossEntropy(0.1)
    assert torch.allclose(loss(x, y), loss(x.transpose(1, 2).reshape(-1, 6), y.reshape(-1)))
    y[0] = -100
    x_other = x.clone()
    x_other[0] = 5.0
    assert torch.equal(loss(x, y), loss(x_other, y))


def test_rnn_regularizer_adds_ar_and_tar_to_loss_grad_only():
    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 8, batch_first=True)
            self.drop = nn.Dropout(0.5)
            self.head = nn.Linear(8, 2)
        def forward(self, x):
            raw, _ = self.lstm(x)
            dropped = self.drop(raw)
            return self.head(dropped[:, -1]), raw, dropped

    class Check(Callback):
        order = 10
        def on_backward_begin(self):
            reg = next(cb for cb in self.learn.cbs if isinstance(cb, RNNRegularizer))
            ar = 2.0 * reg.dropped.pow(2).mean()
            tar = 0.5 * (reg.raw[:, 1:] - reg.raw[:, :-1]).pow(2).mean()
            assert torch.allclose(self.learn.loss_grad, self.learn.loss + ar + tar)
            assert self.learn.preds.shape == (len(self.learn.yb), 2)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, 3, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long()
    train = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    learn = make_learner(model=Seq(), train=train, metrics=[Accuracy()])
    learn.fit(1, cbs=[RNNRegularizer(alpha=2.0, beta=0.5), Check()])
    assert not math.isnan(learn.recorder.values[-1]["accuracy"])


def test_terminate_on_nan_reads_its_flag_only_every_check_every_batches(monkeypatch):
    class NaNFrom(Callback):
        def on_loss_begin(self):
            if self.learn.training and self.learn.n_iter >= 5:
                self.learn.preds = self.learn.preds * math.nan

    checks = []
    real_check = TerminateOnNaN._check
    monkeypatch.setattr(TerminateOnNaN, "_check", lambda self: checks.append(self.learn.n_iter) or real_check(self))
    stop = TerminateOnNaN(check_every=4)
    learn = make_learner()
    with pytest.warns(RuntimeWarning, match="the training loss is nan from training batch 5 "):
        learn.fit(3, cbs=[NaNFrom(), stop])
    assert checks == [4, 8] and learn.n_iter == 8 and stop.stopped_at == (0, 7)
    checks.clear()
    healthy = TerminateOnNaN(check_every=8)
    learn = make_learner()
    learn.fit(2, cbs=healthy)
    assert learn.n_iter == 32 and healthy.stopped_at is None
    assert checks == [8, 16, 16, 24, 32, 32]  # every 8 batches, and at each epoch end


# --- monitors -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: EarlyStopping("val_loss"), lambda: SaveBestModel("acc")])
def test_monitors_must_be_recorded(make):
    learn = make_learner(metrics=[Accuracy()])
    with pytest.raises(CallbackError) as info:
        learn.fit(1, cbs=make())
    message = str(info.value)
    assert "'valid_loss'" in message and "'accuracy'" in message and "'train_loss'" in message


@pytest.mark.parametrize("make, error, words", [
    (lambda: EarlyStopping(patience=0), ValueError, ["patience", ">= 1", "0"]),
    (lambda: EarlyStopping(patience=1.5), TypeError, ["patience", "1.5"]),
    (lambda: EarlyStopping(mode="down"), ValueError, ["mode", "'min'", "'max'"]),
    (lambda: SaveBestModel(min_delta=-1), ValueError, ["min_delta", ">= 0"]),
    (lambda: SWA(start_epoch=-2), ValueError, ["start_epoch", ">= 0"]),
    (lambda: GradientAccumulation(0), ValueError, ["n_batches", ">= 1", "0"]),
    (lambda: GradientAccumulation(2.0), TypeError, ["n_batches", "an int"]),
    (lambda: GradientClipping(max_norm=0), ValueError, ["max_norm", "> 0"]),
    (lambda: GradientClipping(max_norm=float("nan")), ValueError, ["max_norm", "finite"]),
    (lambda: TerminateOnNaN(0), ValueError, ["check_every"]),
    (lambda: RNNRegularizer(beta=-1), ValueError, ["beta", ">= 0"]),
])
def test_bad_arguments(make, error, words):
    "A wrong type is a TypeError, a value out of range a ValueError; both name the argument and what is valid."
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value)


class Script(Callback):
    "Overwrites a recorded column with scripted values per epoch."
    order = -5

    def __init__(self, key, values):
        self.key = key
        self.values = values

    def on_epoch_end(self):
        self.learn.recorder.values[-1][self.key] = self.values[self.learn.epoch]


@pytest.mark.parametrize("patience, stopped", [(1, 2), (2, 3), (3, None)])
def test_early_stopping_patience_and_min_delta(patience, stopped):
    learn = make_learner(metrics=[Accuracy()])
    stop = EarlyStopping("accuracy", patience=patience, min_delta=0.01)
    learn.fit(5, cbs=[Script("accuracy", [0.5, 0.6, 0.605, 0.609, 0.7]), stop])
    assert stop.stopped_epoch == stopped and stop.mode == "max"
    assert len(learn.recorder.values) == (5 if stopped is None else stopped + 1)  # the epochs trained


def test_save_best_model_loads_the_best_weights_at_the_end_even_when_stopped_early():
    class Keep(Callback):
        order = 12
        def __init__(self):
            self.weights = []
        def on_epoch_end(self):
            self.weights.append(copy.deepcopy(self.learn.model.state_dict()))

    keep = Keep()
    best = SaveBestModel()
    learn = make_learner()
    learn.fit(6, cbs=[Script("valid_loss", [0.9, 0.5, 0.7, 0.8, 0.9, 0.1]), best, keep, EarlyStopping(patience=2)])
    assert best.best_epoch == 1 and len(keep.weights) == 4  # epochs 2 and 3 do not improve: stopped at 3
    assert all(torch.equal(v, learn.model.state_dict()[k]) for k, v in keep.weights[1].items())


@pytest.mark.parametrize("start_epoch", [0, 2])
def test_swa_equals_averaged_model_and_recomputes_batch_norm(start_epoch):
    from looplab.data import load_digits
    set_seed(0)
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    model = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))

    class Reference(Callback):
        order = 16
        def on_train_begin(self):
            self.averaged = torch.optim.swa_utils.AveragedModel(self.learn.model)
        def on_epoch_end(self):
            if self.learn.epoch >= start_epoch:
                self.averaged.update_parameters(self.learn.model)

    reference = Reference()
    learn = Learner(model, dls, lr=0.1)
    learn.remove_cbs(learn.progress)
    swa = SWA(start_epoch)
    learn.fit(4, cbs=[swa, reference])
    torch.optim.swa_utils.update_bn((xb for xb, _ in dls.train), reference.averaged)
    assert swa.n_averaged == 4 - start_epoch
    for ours, theirs in zip(learn.model.state_dict().values(), reference.averaged.module.state_dict().values()):
        assert torch.allclose(ours.float(), theirs.float(), atol=1e-6)


def test_tensorboard_event_file_reads_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    learn = make_learner(metrics=[Accuracy()])
    learn.fit(2, cbs=TensorBoardLogger(tmp_path))
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    losses = [e.value for e in events.Scalars("train/batch_loss")]
    assert [e.step for e in events.Scalars("train/batch_loss")] == list(range(32))
    assert torch.allclose(torch.tensor(losses), torch.tensor(learn.recorder.losses))
    assert [e.value for e in events.Scalars("lr/group0")] == pytest.approx(learn.recorder.lrs)
    assert len(events.Scalars("epoch/valid_loss")) == 2


def test_tensorboard_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match="pip install tensorboard"):
        TensorBoardLogger("runs")


def test_ablation_runs_the_same_seed_and_data_order():
    make = lambda: make_learner(metrics=[Accuracy()])
    study = ablate(make, {"plain": [], "clip": [GradientClipping(0.01)], "plain again": lambda: []}, 2)
    recs = study.recorders
    assert recs["plain"].losses == recs["plain again"].losses and recs["plain"].losses != recs["clip"].losses
    assert recs["plain"].losses[0] == recs["clip"].losses[0]
    assert [row["run"] for row in study.table()] == ["plain", "clip", "plain again"]
    assert "accuracy" in repr(study) and study._repr_png_()[:4] == b"\x89PNG"
    with pytest.raises(TypeError, match="make_learner"):
        ablate(None, {"a": []}, 1)


# --- everything at once, killed at a random batch and resumed in a new process ----------------------------

def test_combined_run_killed_at_a_random_batch_resumes_bit_for_bit_in_a_new_process(tmp_path):
    run_worker(WORKER, tmp_path / "reference.pt")
    reference = torch.load(tmp_path / "reference.pt", weights_only=True)
    n_batches = len(reference["losses"])
    rng = random.Random()
    kills = sorted({rng.randrange(1, n_batches), rng.randrange(1, n_batches), 23 + 4})  # 27: inside a window of 3
    for kill in kills:
        ckpt = tmp_path / f"kill{kill}.ckpt"
        run_worker(WORKER, tmp_path / "dead.pt", "--die-after", kill, "--ckpt", ckpt)
        assert ckpt.exists() and not (tmp_path / "dead.pt").exists()
        run_worker(WORKER, tmp_path / f"resumed{kill}.pt", "--ckpt", ckpt, "--resume")
        resumed = torch.load(tmp_path / f"resumed{kill}.pt", weights_only=True)
        label = f"killed after batch {kill}"
        assert all(torch.equal(a, b) for a, b in zip(reference["params"], resumed["params"])), label
        for key in ("losses", "lrs", "valid"):
            assert torch.equal(reference[key], resumed[key]), f"{label}: {key} differ"
        for key in ("n_steps", "n_averaged", "best_epoch"):
            assert reference[key] == resumed[key], f"{label}: {key} differs"
