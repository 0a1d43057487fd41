"""Optimizers that evaluate the loss themselves (LBFGS): `Learner(..., opt_func=torch.optim.LBFGS)` trains as
pytorch/examples' plain closure loop does, bit for bit; every evaluation runs with its events; a loss-scaling
engine and an engine whose optimizer_step takes no closure are refused before the first batch."""
from functools import partial

import pytest
import torch
from torch import nn

import dist_workers as w
from looplab import DataLoaders, GradientClipping, Learner, load_digits
from looplab.callback import Callback, CancelBatchException
from looplab.distributed import launch
from looplab.engine import AMPEngine, DeviceEngine, needs_closure


def digits(n=512):
    x, y = load_digits()
    return x[:n], y[:n]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))


def plain_closure_loop(n_epochs, bs=128, max_iter=5, lr=0.5, clip=None):
    "pytorch/examples' loop (time_sequence_prediction): `optimizer.step(closure)`, the closure zeroing, forward, backward."
    x, y = digits()
    net = model()
    opt = torch.optim.LBFGS(net.parameters(), lr=lr, max_iter=max_iter)
    losses, evaluations = [], []
    for _ in range(n_epochs):
        for i in range(0, len(x), bs):
            xb, yb = x[i:i + bs], y[i:i + bs]
            evaluations.append(0)

            def closure():
                evaluations[-1] += 1
                opt.zero_grad()
                loss = nn.functional.cross_entropy(net(xb), yb)
                loss.backward()
                if clip is not None:
                    nn.utils.clip_grad_norm_(net.parameters(), clip)
                return loss
            losses.append(float(opt.step(closure).detach()))
    return net, losses, evaluations


class CountEvaluations(Callback):
    "Per batch: the evaluations (each backward), and the loss each one saw."
    def __init__(self):
        self.per_batch, self.seen = [], []

    def on_batch_begin(self):
        if self.learn.training:
            self.per_batch.append(0)
            self.seen.append([])

    def on_backward_end(self):
        self.per_batch[-1] += 1
        self.seen[-1].append(float(self.learn.loss_grad.detach()))

    def on_batch_end(self):
        if self.learn.training:  # after the step: the batch's first evaluation, as LBFGS.step returns it
            assert float(self.learn.loss) == self.seen[-1][0]
            assert self.learn.preds is self.first_preds  # not the last evaluation's

    def on_step_begin(self):
        self.first_preds = self.learn.preds


def lbfgs_learner(cbs=(), engine=None, **opt_kw):
    dls = DataLoaders.from_tensors(*digits(), bs=128, shuffle=False, valid_pct=0)
    return Learner(model(), dls, opt_func=partial(torch.optim.LBFGS, max_iter=5, **opt_kw), lr=0.5, progress=False,
                   cbs=list(cbs), engine=engine)


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_needs_closure_reads_the_step_signature():
    w = [torch.zeros(1, requires_grad=True)]
    assert needs_closure(torch.optim.LBFGS(w))
    assert not any(needs_closure(opt(w, lr=0.1)) for opt in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW))


@pytest.mark.parametrize("n_epochs", [1, 2])
def test_lbfgs_trains_as_the_plain_closure_loop_bit_for_bit(n_epochs):
    net, losses, evaluations = plain_closure_loop(n_epochs)
    count = CountEvaluations()
    learn = lbfgs_learner([count])
    learn.fit(n_epochs)
    assert same(learn.model, net)
    assert [float(v) for v in learn.recorder.losses] == losses  # each step's loss: the one before it, as LBFGS returns
    assert count.per_batch == evaluations and set(evaluations) == {5}  # max_iter evaluations, each with its events
    assert learn.n_steps == len(losses) == 4 * n_epochs
    assert learn.recorder.losses[-1] < 0.5 * learn.recorder.losses[0]  # and it did learn


def test_clipping_applies_to_every_evaluation_as_in_a_closure_that_clips():
    net, losses, _ = plain_closure_loop(1, clip=0.5)
    learn = lbfgs_learner([GradientClipping(0.5)])
    learn.fit(1)
    assert same(learn.model, net) and [float(v) for v in learn.recorder.losses] == losses


def test_a_penalty_added_at_backward_begin_is_in_every_evaluation():
    "A callback that changes loss_grad (as AR/TAR do) changes the objective LBFGS minimises, in every evaluation."
    class L2(Callback):
        def on_backward_begin(self):
            self.learn.loss_grad = self.learn.loss_grad + 1e-2 * sum((p ** 2).sum() for p in self.learn.model.parameters())

    x, y = digits()
    net = model()
    opt = torch.optim.LBFGS(net.parameters(), lr=0.5, max_iter=5)
    for i in range(0, len(x), 128):
        def closure():
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[i:i + 128]), y[i:i + 128])
            loss = loss + 1e-2 * sum((p ** 2).sum() for p in net.parameters())
            loss.backward()
            return loss
        opt.step(closure)
    learn = lbfgs_learner([L2()])
    learn.fit(1)
    assert same(learn.model, net)


def test_a_cancelled_batch_takes_no_step_and_the_next_batches_go_on():
    class SkipSecond(Callback):
        def on_batch_begin(self):
            if self.learn.training and self.learn.iter == 1:
                raise CancelBatchException()

    learn = lbfgs_learner([SkipSecond()])
    learn.fit(1)
    assert learn.n_steps == 3 and len(learn.recorder.losses) == 3


def test_float16_loss_scaling_is_refused_before_the_first_batch():
    learn = lbfgs_learner(engine=AMPEngine(torch.float16, device="cpu"))
    before = [p.detach().clone() for p in learn.model.parameters()]
    with pytest.raises(ValueError, match=r"LBFGS steps with a closure .* GradScaler.*AMPEngine\(torch.bfloat16\)"):
        learn.fit(1)
    assert learn.n_iter == 0 and all(torch.equal(a, b) for a, b in zip(before, learn.model.parameters()))
    learn.engine = AMPEngine(torch.bfloat16, device="cpu")  # no loss scale: the closure steps
    learn.fit(1)
    assert learn.n_steps == 4


def test_an_engine_whose_optimizer_step_takes_no_closure_is_refused_with_the_fix():
    class OldEngine(DeviceEngine):
        def optimizer_step(self, loss, model, optimizer, clip_fn=None):
            return super().optimizer_step(loss, model, optimizer, clip_fn)

    learn = lbfgs_learner(engine=OldEngine("cpu"))
    with pytest.raises(ValueError, match=r"OldEngine.optimizer_step\(loss, model, optimizer, clip_fn\) takes none: "
                                         r"add `closure=None`"):
        learn.fit(1)
    plain = Learner(model(), lbfgs_learner().dls, progress=False, engine=OldEngine("cpu"))  # SGD: no closure needed
    plain.fit(1)
    assert plain.n_steps == 4


def test_under_ddp_every_rank_evaluates_alike_and_ends_with_the_same_weights():
    "LBFGS decides from the loss when to evaluate again: the closure's loss is the mean over ranks, so none waits alone."
    (params, evals), (params1, evals1) = launch(w.ddp_lbfgs_params, nprocs=2, args=(2,))
    assert evals == evals1 and len(evals) == 12 and all(n >= 1 for n in evals)
    for name in params:
        assert torch.equal(params[name], params1[name]), name
    single = w.toy_learner(DeviceEngine("cpu"))
    single.opt_func = partial(torch.optim.LBFGS, max_iter=4)
    single.fit(2)
    for name, p in single.model.state_dict().items():
        assert (params[name] - p).abs().max() <= 1e-4, name  # the same run up to the order of the sums


def test_the_time_sequence_prediction_port_equals_its_plain_twin(tmp_path):
    "examples/time_sequence_prediction.py (the Learner, opt_func=LBFGS) against the plain closure loop of its twin."
    import subprocess
    import sys
    from pathlib import Path
    examples = Path(__file__).resolve().parent.parent / "examples"
    sys.path.insert(0, str(examples))
    import time_sequence_prediction as port
    import time_sequence_prediction_plain as plain

    model, test_losses = plain.train(steps=2, n=12, length=40, verbose=False)
    learn = port.train(steps=2, n=12, length=40, verbose=False)
    assert same(learn.model, model)
    # the original's test loss after each step (the Recorder's weighted float64 mean: equal up to the last bit)
    assert [row["valid_loss"] for row in learn.recorder.values] == pytest.approx(test_losses, rel=1e-12, abs=0)
    assert test_losses[-1] < 0.1
    done = subprocess.run([sys.executable, str(examples / "time_sequence_prediction.py"), "--quick", "--plot",
                           str(tmp_path / "predictions.png")], capture_output=True, text=True, timeout=300,
                          cwd=examples)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "valid_loss" in done.stdout and (tmp_path / "predictions.png").stat().st_size > 10_000


def test_by_hand_mixed_precision_refuses_a_closure_optimizer():
    from looplab.callback import CallbackError
    from looplab.fp16 import MixedPrecision
    learn = lbfgs_learner([MixedPrecision(torch.bfloat16)])
    with pytest.raises(CallbackError, match=r"LBFGS evaluates the loss again inside its step, and MixedPrecision "
                                            r".*AMPEngine\(torch.bfloat16\)"):
        learn.fit(1)
    assert learn.n_steps == 0


def test_gradient_accumulation_over_several_batches_refuses_a_closure_optimizer():
    from looplab.callback import CallbackError
    from looplab.regularize import GradientAccumulation
    learn = lbfgs_learner([GradientAccumulation(2)])
    with pytest.raises(CallbackError, match=r"LBFGS evaluates the loss again .* GradientAccumulation\(2\) .*bigger batches"):
        learn.fit(1)
    assert learn.n_steps == 0
    net, losses, _ = plain_closure_loop(1)
    learn = lbfgs_learner([GradientAccumulation(1)])  # a window of one batch is every batch's own step
    learn.fit(1)
    assert same(learn.model, net)
