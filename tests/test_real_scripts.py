"""What porting a real training script needs (issue 21): a plateau scheduler equal to torch's, ordered data with its
own validation set, a backward error that says why, progress lines in a log, and the names at the top."""
import io
from functools import partial

import pytest
import torch
from torch import nn

import looplab
from looplab import (Accuracy, DataLoaders, Learner, ProgressCallback, TorchScheduler, fit_one_cycle, load_digits,
                     set_seed)
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.callback import Callback, CallbackError, CancelFitException


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def plateau(opt):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.05)


def digits_split():
    x, y = load_digits()
    return x[:1400], y[:1400], x[1400:], y[1400:]


def test_reduce_lr_on_plateau_matches_a_plain_torch_loop_step_for_step():
    xt, yt, xv, yv = digits_split()
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sched = plateau(opt)
    plain_lrs = []
    for epoch in range(6):
        for i in range(0, len(xt), 100):
            plain_lrs.append(opt.param_groups[0]["lr"])
            loss = nn.functional.cross_entropy(model(xt[i:i + 100]), yt[i:i + 100])
            loss.backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            sched.step(nn.functional.cross_entropy(model(xv), yv).item())
    dls = DataLoaders.from_tensors(xt, yt, bs=100, shuffle=False, valid=(xv, yv), valid_bs=len(xv))
    learn = Learner(mlp(), dls, lr=0.5, opt_func=partial(torch.optim.SGD, momentum=0.9), progress=False)
    learn.fit(6, cbs=TorchScheduler(plateau))
    assert learn.recorder.lrs == plain_lrs and len(set(plain_lrs)) >= 3  # the LR of every step, dropped twice
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), learn.model.parameters()))  # bit for bit


@pytest.mark.parametrize("make, every", [
    (lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5), "step"),
    (lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.7), "epoch"),
    (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.3), None),
])
def test_torch_scheduler_resumes_from_a_checkpoint_taken_mid_run(tmp_path, make, every):
    class StopAt(Callback):
        order = 100
        def __init__(self, at=None):
            self.at = at
        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == self.at:
                save_checkpoint(self.learn, tmp_path / "ckpt.pt")
                raise CancelFitException()

    def run(stop_at=None):
        set_seed(0)
        xt, yt, xv, yv = digits_split()
        dls = DataLoaders.from_tensors(xt, yt, bs=100, valid=(xv, yv))
        return Learner(mlp(), dls, lr=0.5, progress=False, cbs=[TorchScheduler(make, every=every), StopAt(stop_at)])

    whole = run()
    whole.fit(4)
    run(stop_at=31).fit(4)
    resumed = run()
    load_checkpoint(resumed, tmp_path / "ckpt.pt")
    resumed.fit(4)
    assert resumed.recorder.lrs == whole.recorder.lrs and len(set(whole.recorder.lrs)) > 1
    assert all(torch.equal(a, b) for a, b in zip(whole.model.parameters(), resumed.model.parameters()))


def test_torch_scheduler_refuses_what_it_cannot_run():
    dls = DataLoaders.from_tensors(*load_digits(), bs=200)
    learn = Learner(mlp(), dls, progress=False, metrics=[Accuracy()])
    with pytest.raises(CallbackError, match="on_train_begin: ValueError: .*every='epoch'"):
        learn.fit(1, cbs=TorchScheduler(plateau, every="step"))
    with pytest.raises(CallbackError, match=r"'acc' is not recorded.*'accuracy'"):
        learn.fit(1, cbs=TorchScheduler(plateau, monitor="acc"))
    no_valid = Learner(mlp(), DataLoaders.from_tensors(*load_digits(), bs=200, valid_pct=0.0), progress=False)
    with pytest.raises(CallbackError, match="on_epoch_end: ValueError: .*'valid_loss', which is NaN"):
        no_valid.fit(1, cbs=TorchScheduler(plateau))
    with pytest.raises(TypeError, match="make must be callable"):
        TorchScheduler(torch.optim.lr_scheduler.StepLR(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1), 1))


class CarriesHidden(nn.Module):
    "An RNN cell whose hidden state goes from one batch to the next; `detach` decides whether its graph goes too."
    def __init__(self, detach):
        super().__init__()
        self.cell = nn.RNNCell(64, 32)
        self.head = nn.Linear(32, 10)
        self.detach = detach
        self.h = None

    def forward(self, x):
        h = self.h.detach() if self.detach and self.h is not None else self.h
        self.h = self.cell(x, h)
        return self.head(self.h)


def test_a_graph_reused_across_batches_is_named_with_its_batch_and_the_fix():
    x, y = load_digits()
    dls = DataLoaders([(x[i:i + 32], y[i:i + 32]) for i in range(0, 320, 32)])
    learn = Learner(CarriesHidden(detach=False), dls, progress=False)
    with pytest.raises(RuntimeError) as info:
        learn.fit(2)
    message = str(info.value)
    assert message.startswith("backward failed on training batch 1 of epoch 0: Trying to backward through the graph")
    assert "graph reused across batches" in message and "hidden state" in message and "h.detach()" in message
    assert isinstance(info.value.__cause__, RuntimeError) and "backward failed" not in str(info.value.__cause__)
    fixed = Learner(CarriesHidden(detach=True), dls, progress=False)
    fixed.fit(2)  # the fix the message names trains
    assert fixed.n_steps == 20


def test_a_backward_on_a_detached_loss_gets_its_own_cause():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 10)
        def forward(self, x):
            return self.lin(x).detach()

    x, y = load_digits()
    learn = Learner(Detached(), DataLoaders([(x[:32], y[:32])]), progress=False)
    with pytest.raises(RuntimeError, match="(?s)training batch 0 of epoch 0.*depends on no trainable parameter"):
        learn.fit(1)


def test_progress_lines_in_a_log_every_n_batches_or_t_seconds():
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    n = len(dls.train)
    log = io.StringIO()
    learn = Learner(mlp(), dls, progress=ProgressCallback(file=log, every=7, min_s=0))
    learn.fit(2)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("epoch ")]
    assert [line.split()[3] for line in lines] == 2 * [f"{b}/{n}" for b in range(7, n + 1, 7)]
    assert all(line.endswith("ms/batch") and " lr 0.1 " in line for line in lines)
    by_time = io.StringIO()
    Learner(mlp(), dls, progress=ProgressCallback(file=by_time, every=10**6, every_s=0.0)).fit(1)
    assert sum(line.startswith("epoch ") for line in by_time.getvalue().splitlines()) == n  # the clock: every batch
    forced = io.StringIO()
    Learner(mlp(), dls, progress=ProgressCallback(file=forced, every=7, batch_lines=False, min_s=0)).fit(1)
    assert len(forced.getvalue().splitlines()) == 2  # header and the epoch's row


def test_progress_lines_of_a_fast_loop_wait_min_s_seconds():
    "every=1 on batches of a millisecond would write hundreds of lines a second: min_s holds them back."
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    held = io.StringIO()
    Learner(mlp(), dls, progress=ProgressCallback(file=held, every=1, min_s=3600)).fit(2)
    assert [line.split()[0] for line in held.getvalue().splitlines()] == ["epoch", "1/2", "2/2"]  # header, rows
    paced = io.StringIO()
    small = DataLoaders.from_tensors(*load_digits(), bs=8)  # about 180 batches of well under a millisecond
    Learner(mlp(), small, progress=ProgressCallback(file=paced, every=1, min_s=0.02)).fit(1)
    batch_lines = [line for line in paced.getvalue().splitlines() if line.startswith("epoch ")]
    batches = [int(line.split()[3].split("/")[0]) for line in batch_lines]
    ms = [float(line.split()[-2]) for line in batch_lines]
    assert 0 < len(batch_lines) < len(small.train)
    gaps = [b - a for a, b in zip([0, *batches], batches)]  # batches each line covers: together at least min_s
    assert all(n * (m + 0.005) >= 20.0 for n, m in zip(gaps, ms))  # ms/batch is printed rounded to 0.01
    with pytest.raises(ValueError, match="min_s"):
        ProgressCallback(min_s=-1)


def test_progress_lines_report_the_lr_each_step_used():
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    log = io.StringIO()
    learn = Learner(mlp(), dls, lr=0.3, progress=ProgressCallback(file=log, every=5, min_s=0))
    fit_one_cycle(learn, 1)
    lrs = [float(line.split()[5]) for line in log.getvalue().splitlines() if line.startswith("epoch ")]
    assert lrs == pytest.approx([learn.recorder.lrs[i] for i in range(4, len(dls.train), 5)], rel=1e-3)


def test_from_tensors_takes_python_lists_numpy_arrays_and_lists_of_tensors():
    x, y = load_digits()
    reference = DataLoaders.from_tensors(x, y, bs=50, seed=1)
    for xs, ys in ((x.tolist(), y.tolist()), (x.numpy(), y.numpy()), (list(x), list(y))):
        dls = DataLoaders.from_tensors(xs, ys, bs=50, seed=1)
        assert torch.equal(dls.train.dataset.tensors[0], reference.train.dataset.tensors[0])
        assert torch.equal(dls.valid.dataset.tensors[1], reference.valid.dataset.tensors[1])
    with pytest.raises(TypeError, match="x must be a tensor, or convertible.*list"):
        DataLoaders.from_tensors([[1.0, 2.0], [3.0]], [0, 1])
    with pytest.raises(TypeError, match="valid\\[1\\] must be a tensor"):
        DataLoaders.from_tensors(x, y, valid=(x[:5], ["a", {}]))


def test_the_names_at_the_top_and_the_defaults_a_newcomer_expects():
    assert looplab.set_seed is looplab.data.set_seed and not hasattr(looplab.learner, "set_seed")  # one door a name
    assert set(looplab.__all__) <= set(dir(looplab)) and looplab.__version__
    set_seed(0)
    learn = Learner(mlp(), DataLoaders.from_tensors(*load_digits(), bs=64), lr=0.4, progress=False)
    assert learn.progress not in learn.cbs
    fit_one_cycle(learn, 1, moms=None)
    assert 0.39 < max(learn.recorder.lrs) <= 0.4  # lr_max: the Learner's lr (the peak step is near it)


def test_ordered_data_keeps_its_order_its_tail_for_validation_and_drops_a_short_last_batch():
    x, y = load_digits()
    dls = DataLoaders.from_tensors(x, y, bs=64, valid_pct=0.25, shuffle=False, drop_last=True)
    n_valid = round(len(x) * 0.25)
    assert torch.equal(dls.valid.dataset.tensors[0], x[len(x) - n_valid:])  # the last quarter: no future in training
    batches = [yb for _, yb in dls.train]
    assert all(len(b) == 64 for b in batches) and torch.equal(torch.cat(batches), y[:len(batches) * 64])
    with pytest.raises(ValueError, match="not both"):
        DataLoaders.from_tensors(x, y, valid_pct=0.1, valid=(x[:10], y[:10]))
