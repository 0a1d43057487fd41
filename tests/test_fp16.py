"Mixed precision by hand (looplab.fp16): dynamic scaling, masters, accuracy, recorded loss, resume in a new process."
import random
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import digits_learner, run_worker
from looplab.callback import Callback, CallbackError, CancelStepException, CancelZeroGradException
from looplab.engine import AMPEngine, DeviceEngine
from looplab.engines import DataParallelAMPEngine
from looplab.fp16 import LossScale, MixedPrecision, check_half
from looplab.learner import Learner
from looplab.metrics import Accuracy

WORKER = Path(__file__).with_name("fp16_worker.py")


def learner(cbs=(), epochs_seed=42, bs=64, engine=None) -> Learner:
    "A 64-128-10 MLP with batch norm on the digits, SGD with momentum at LR 0.05, accuracy, silent."
    return digits_learner(lambda: nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10)),
                          seed=epochs_seed, bs=bs, lr=0.05, metrics=[Accuracy()], cbs=list(cbs), engine=engine)


class Watch(Callback):
    "Per training batch: the scale before the step, whether the step moved the weights, n_steps; inf at `inject`."
    order = 40

    def __init__(self, mp, inject=()):
        self.mp = mp
        self.inject = set(inject)
        self.rows = []

    def on_backward_end(self):
        if not self.learn.training:
            return
        self.before = [p.detach().clone() for p in self.learn.model.parameters()]
        self.scale = self.mp.scaler.scale
        self.dtypes = [p.dtype for p in self.learn.model.parameters()]
        self.master_dtypes = [m.dtype for m in self.mp.masters]
        if self.learn.n_iter in self.inject:
            next(self.learn.model.parameters()).grad[0, 0] = float("inf")

    def on_batch_end(self):
        if self.learn.training:
            moved = any(not torch.equal(a, p) for a, p in zip(self.before, self.learn.model.parameters()))
            self.rows.append((self.learn.n_iter, self.scale, moved, self.learn.n_steps))


def test_dynamic_scaling_skips_exactly_the_overflowed_step_halves_and_grows():
    mp = MixedPrecision(torch.float16, growth_interval=4)
    watch = Watch(mp, inject=(3, 10))
    learn = learner([mp, watch])
    learn.fit(1)
    rows = {n: (scale, moved, steps) for n, scale, moved, steps in watch.rows}
    assert [n for n, (_, moved, _) in rows.items() if not moved] == [3, 10]  # exactly the injected steps skipped
    assert rows[3][0] == 2.0**16 and rows[4][0] == 2.0**15  # halved after the overflow
    assert rows[8][0] == 2.0**16  # steps 4, 5, 6, 7 clean: doubled
    assert rows[11][0] == 2.0**15 and rows[15][0] == 2.0**16
    assert rows[3][2] == 2 and rows[4][2] == 3  # n_steps did not count the skipped step
    assert learn.recorder.n_skipped == 2 and learn.n_steps == learn.n_iter - 2


def test_masters_stay_fp32_and_model_half_during_training():
    mp = MixedPrecision(torch.float16)
    watch = Watch(mp)
    learner([mp, watch]).fit(1)
    assert watch.dtypes == [torch.float16, torch.float16, torch.float32, torch.float32, torch.float16, torch.float16]
    assert set(watch.master_dtypes) == {torch.float32}


def test_static_scale_skips_overflow_without_changing():
    mp = MixedPrecision(torch.float16, loss_scale=1024.0, dynamic=False)
    watch = Watch(mp, inject=(2,))
    learn = learner([mp, watch])
    learn.fit(1)
    assert mp.scaler.scale == 1024.0 and learn.recorder.n_skipped == 1
    assert [n for n, _, moved, _ in watch.rows if not moved] == [2]


def test_bfloat16_run_on_cpu_reaches_fp32_accuracy_within_one_point():
    fp32 = learner()
    fp32.fit(6)
    bf16 = learner([MixedPrecision(torch.bfloat16)])
    bf16.fit(6)
    acc32 = fp32.recorder.values[-1]["accuracy"]
    acc16 = bf16.recorder.values[-1]["accuracy"]
    assert acc32 > 0.9
    assert abs(acc16 - acc32) <= 0.01, (acc32, acc16)


class Accumulate(Callback):
    "Steps every `n` batches: divides loss_grad by n and cancels the step and zero_grad in between."
    def __init__(self, n):
        self.n = n

    def on_backward_begin(self):
        self.learn.loss_grad = self.learn.loss_grad / self.n

    def on_step_begin(self):
        if self.learn.n_iter % self.n:
            raise CancelStepException()

    def on_zero_grad_begin(self):
        if self.learn.n_iter % self.n:
            raise CancelZeroGradException()


class LossCheck(Callback):
    "The loss recomputed in fp32 from the predictions, beside the learner's `loss` and `loss_grad`."
    order = 60

    def __init__(self):
        self.rows = []

    def on_backward_end(self):
        reference = nn.functional.cross_entropy(self.learn.preds.detach().float(), self.learn.yb)
        self.rows.append((reference.item(), self.learn.loss.item(), self.learn.loss_grad.item()))


@pytest.mark.parametrize("accumulate", [1, 3])
def test_recorded_loss_is_the_unscaled_loss(accumulate):
    mp = MixedPrecision(torch.float16)
    check = LossCheck()
    learn = learner([mp, Accumulate(accumulate), check])
    learn.fit(1)
    for (reference, loss, loss_grad), recorded in zip(check.rows, learn.recorder.losses):
        assert loss == pytest.approx(reference, rel=1e-6) and recorded == loss
        assert loss_grad == pytest.approx(loss * 2.0**16 / accumulate, rel=1e-5)  # what backward saw was scaled
    assert learn.n_steps == len(check.rows) // accumulate


def test_clip_bounds_the_unscaled_master_gradients():
    norms = []

    class Norm(Callback):
        order = 90  # after MixedPrecision's on_step_begin

        def on_step_begin(self):
            norms.append(torch.linalg.vector_norm(torch.stack([m.grad.norm() for m in mp.masters])).item())

    mp = MixedPrecision(torch.float16, clip=0.05)
    learner([mp, Norm()]).fit(1)
    assert max(norms) <= 0.05 * (1 + 1e-5) and len(norms) > 10


def test_learner_is_fp32_after_fit_and_trains_on():
    learn = learner([MixedPrecision(torch.bfloat16)])
    learn.fit(1)
    assert all(p.dtype == torch.float32 for p in learn.model.parameters())
    assert [p for g in learn.opt.param_groups for p in g["params"]] == list(learn.model.parameters())
    learn.fit(2)
    assert learn.recorder.values[-1]["accuracy"] > 0.85
    assert abs(learn.validate()["accuracy"] - learn.recorder.values[-1]["accuracy"]) <= 0.01  # fp32 now, callback attached


def test_bad_input_is_a_clear_error(monkeypatch):
    for bad in (0, -2.0):
        with pytest.raises(ValueError, match=rf"loss_scale must be a number > 0.*{bad}"):
            MixedPrecision(loss_scale=bad)
    with pytest.raises(ValueError, match="dtype must be torch.float16 or torch.bfloat16, got torch.float64"):
        MixedPrecision(torch.float64)
    with pytest.raises(ValueError, match="clip must be"):
        MixedPrecision(clip=0)
    with pytest.raises(ValueError, match="growth_interval"):
        LossScale(growth_interval=0)
    learn = learner([MixedPrecision()], engine=AMPEngine(torch.bfloat16, device="cpu"))
    with pytest.raises(CallbackError, match="ValueError: MixedPrecision does by hand what AMPEngine.*use one of them"):
        learn.fit(1)
    with warnings.catch_warnings():  # DataParallelEngine on a machine without two GPUs says so
        warnings.simplefilter("ignore")
        held = [DeviceEngine("cpu", dtype=torch.bfloat16), DataParallelAMPEngine(torch.bfloat16)]
    for engine in held:  # every engine that holds an AMP part, whatever its class: not only AMPEngine's subclasses
        learn = learner([MixedPrecision()], engine=engine)
        with pytest.raises(CallbackError, match=rf"MixedPrecision does by hand what {type(engine).__name__}\(dtype="):
            learn.fit(1)

    def no_half(*args, **kwargs):
        raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')

    monkeypatch.setattr(nn.functional, "linear", no_half)
    with pytest.raises(ValueError, match=r"half precision in torch.float16 cannot run on cpu .*not implemented"):
        check_half(torch.device("cpu"), torch.float16)


def test_interrupted_run_resumes_bit_for_bit_in_a_new_process(tmp_path):
    stop_at = random.Random().randint(2, 40)  # any batch of the first two epochs (23 batches each)
    whole = run_worker(WORKER, tmp_path / "whole.pt")
    run_worker(WORKER, tmp_path / "stopped.pt", "--stop-at", stop_at, "--ckpt", tmp_path / "ckpt.pt")
    resumed = run_worker(WORKER, tmp_path / "resumed.pt", "--resume", tmp_path / "ckpt.pt")
    assert whole["n_skipped"] >= 1 and whole["n_skipped"] == resumed["n_skipped"]  # the injected overflow and more
    assert all(torch.equal(a, b) for a, b in zip(whole["params"], resumed["params"])), f"stopped at {stop_at}"
    assert torch.equal(whole["losses"], resumed["losses"]) and torch.equal(whole["valid"], resumed["valid"])
    assert whole["scale"] == resumed["scale"] and whole["n_steps"] == resumed["n_steps"]


def test_learn_clip_fn_clips_the_unscaled_fp32_masters():
    seen = []

    def clip_fn(params):
        seen.append(({p.dtype for p in params}, torch.nn.utils.clip_grad_norm_(params, 0.05).item()))

    mp = MixedPrecision(torch.float16)
    learn = learner([mp])
    learn.clip_fn = clip_fn
    learn.fit(1)
    assert seen and all(dtypes == {torch.float32} for dtypes, _ in seen)
    assert max(norm for _, norm in seen) < 1e3  # true gradient norms, not 65536 times them
