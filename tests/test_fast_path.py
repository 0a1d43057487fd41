"""The Learner's fast path (04_learner's FastBatchLoop) changes nothing a callback or a user can see.

Each test runs the same training twice, once on the fast path and once on BatchLoop's full path (kept there by a
callback listening to an event the fast path skips, which does nothing), and compares what both leave behind:
weights, recorded history, events seen by the other callbacks, errors, cancels.
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers import make_dls, make_learner
from looplab.callback import (Callback, CancelBatchException, CancelFitException, CancelStepException,
                              CancelZeroGradException)
from looplab.engine import AMPEngine, DeviceEngine
from looplab.regularize import GradientClipping
from looplab.schedule import fit_one_cycle

FAST_EVENTS = ("on_batch_begin", "on_step_begin", "on_step_end", "on_step_cancel", "on_batch_end", "on_batch_cancel")


class KeepsFullPath(Callback):
    "Listens to on_loss_begin, which the fast path skips, and does nothing."
    def on_loss_begin(self):
        pass


class Trace(Callback):
    "Records the batch events the fast path dispatches (listening to them keeps it on)."
    def __init__(self):
        self.seen = []

    def _note(self, event):
        self.seen.append((event, self.learn.training, self.learn.iter))


for _event in FAST_EVENTS:
    setattr(Trace, _event, lambda self, e=_event: self._note(e))


def train(full: bool, n_epochs=2, cbs=(), fit=None, **kwargs):
    learn = make_learner(**kwargs)
    extra = [*cbs, *([KeepsFullPath()] if full else [])]
    if fit is None:
        learn.fit(n_epochs, cbs=extra)
    else:
        fit(learn, extra)
    return learn


def same_run(fast, full, forwarded=True):
    "`forwarded`: a batch reached its forward pass, where the path is decided (a fit cancelled before has none)."
    assert not forwarded or (fast._fast and not full._fast)
    assert all(torch.equal(a, b) for a, b in zip(fast.model.parameters(), full.model.parameters()))
    assert fast.recorder.losses == full.recorder.losses and fast.recorder.hypers == full.recorder.hypers
    assert [r["valid_loss"] for r in fast.recorder.values] == [r["valid_loss"] for r in full.recorder.values]
    assert (fast.n_iter, fast.n_steps, fast.recorder.n_skipped) == (full.n_iter, full.n_steps, full.recorder.n_skipped)


def test_default_learner_takes_the_fast_path_and_trains_the_same_weights():
    fast, full = train(False, cbs=[Trace()]), train(True, cbs=[Trace()])
    same_run(fast, full)
    assert fast.recorder.values[-1]["train_loss"] == full.recorder.values[-1]["train_loss"]


def test_one_cycle_clipping_and_momentum_take_the_fast_path_with_the_same_result():
    "ParamScheduler listens to on_batch_begin, GradientClipping sets clip_fn: both stay on the fast path."
    def fit(learn, extra):
        fit_one_cycle(learn, 2, lr_max=0.5, cbs=[GradientClipping(0.1), *extra])
    sgd = lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)
    fast, full = train(False, fit=fit, opt_func=sgd), train(True, fit=fit, opt_func=sgd)
    same_run(fast, full)
    assert len(set(fast.recorder.lrs)) > 10  # the schedule did move the LR, and both recorded the same LRs


def test_listeners_of_the_dispatched_events_see_the_same_sequence():
    fast_trace, full_trace = Trace(), Trace()
    train(False, cbs=[fast_trace])
    train(True, cbs=[full_trace])
    assert fast_trace.seen == full_trace.seen and len(fast_trace.seen) > 0


@pytest.mark.parametrize("event", ["on_loss_begin", "on_backward_begin", "on_backward_end", "on_zero_grad_begin",
                                   "on_zero_grad_end"])
def test_a_listener_of_a_skipped_event_turns_the_fast_path_off(event):
    calls = []
    listener = type("Listener", (Callback,), {event: lambda self: calls.append(self.learn.iter)})()
    learn = train(False, n_epochs=1, cbs=[listener])
    assert not learn._fast and len(calls) > 0


def test_engines_that_are_not_plain_keep_the_full_path():
    class Scaled(DeviceEngine):
        def backward_loss(self, loss, model, optimizer, sync_grads=True):
            (loss * 2).backward()
    for engine in (Scaled("cpu"), AMPEngine(torch.bfloat16, device="cpu")):
        learn = make_learner(engine=engine)
        learn.fit(1)
        assert not learn._fast, engine
    plain = make_learner(engine=DeviceEngine("cpu"))
    plain.fit(1)
    assert plain._fast


def test_the_engines_optimizer_step_runs_on_the_fast_path():
    "The step phase is BatchLoop's own on both paths: an engine's optimizer_step is called for every step."
    class CountsSteps(DeviceEngine):
        n = 0
        def optimizer_step(self, loss, model, optimizer, clip_fn=None):
            self.n += 1
            return super().optimizer_step(loss, model, optimizer, clip_fn)
    learn = make_learner(engine=CountsSteps("cpu"))
    learn.fit(2)
    assert learn._fast and learn.engine.n == learn.n_steps == 2 * len(learn.dls.train)


def test_a_callback_attached_mid_epoch_is_called_from_the_next_batch():
    "A new handlers dict on every add: the fast path is decided again, so no event of the newcomer is lost."
    class CountsZeroGrad(Callback):
        def __init__(self):
            self.iters = []
        def on_zero_grad_end(self):
            self.iters.append(self.learn.iter)

    counter = CountsZeroGrad()

    class AttachesAtBatch3(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.epoch == 0 and self.learn.iter == 3:
                self.learn.add_cbs(counter)

    learn = make_learner()
    learn.fit(1, cbs=[AttachesAtBatch3()])
    assert counter.iters == list(range(4, len(learn.dls.train))) and not learn._fast


def test_removing_the_last_skipped_listener_goes_back_to_the_fast_path():
    keeper = KeepsFullPath()
    learn = make_learner(cbs=[keeper])
    learn.fit(1)
    assert not learn._fast
    learn.remove_cbs(keeper)
    learn.fit(1)
    assert learn._fast


def test_batches_of_other_shapes_on_the_fast_path():
    "Tuples of inputs are spread, dicts passed as keywords, as on the full path."
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 2)
            self.b = nn.Linear(8, 2)

        def forward(self, x1, x2=None):
            return self.a(x1) + self.b(x2)

    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(64, 8, generator=g), torch.randn(64, 8, generator=g)
    y = (x1[:, 0] > 0).long()
    shapes = {"tuple": [(x1[i:i + 16], x2[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)],
              "dict": [{"x1": x1[i:i + 16], "x2": x2[i:i + 16], "labels": y[i:i + 16]} for i in range(0, 64, 16)]}
    for name, batches in shapes.items():
        runs = []
        for full in (False, True):
            torch.manual_seed(0)
            from looplab.data import DataLoaders
            from looplab.learner import Learner
            learn = Learner(TwoInputs(), DataLoaders(batches, batches[:1]), lr=0.1, progress=False,
                            cbs=[KeepsFullPath()] if full else [])
            learn.fit(2)
            runs.append(learn)
        same_run(*runs)


def test_errors_read_the_same_on_both_paths():
    def message(full, model=None, loss_func=None, dls=None):
        kwargs = {}
        if loss_func is not None:
            kwargs["loss_func"] = loss_func
        learn = make_learner(dls=dls, cbs=[KeepsFullPath()] if full else [], **kwargs)
        if model is not None:
            learn.model = model
        with pytest.raises(Exception) as info:
            learn.fit(1)
        return type(info.value), str(info.value)

    wrong_width = nn.Linear(3, 2)
    assert message(False, model=wrong_width) == message(True, model=wrong_width)
    assert "the model failed on training batch 0 of epoch 0" in message(False, model=wrong_width)[1]
    per_item = lambda preds, yb: nn.functional.cross_entropy(preds, yb, reduction="none")
    assert message(False, loss_func=per_item) == message(True, loss_func=per_item)
    assert "loss_func must return a scalar tensor" in message(False, loss_func=per_item)[1]
    no_grad = lambda preds, yb: nn.functional.cross_entropy(preds.detach(), yb)
    fast, full = message(False, loss_func=no_grad), message(True, loss_func=no_grad)
    assert fast == full and "backward failed on training batch 0 of epoch 0" in fast[1]
    assert "The usual cause: the loss depends on no trainable parameter" in fast[1]


@settings(max_examples=25, deadline=None)
@given(cancel=st.sampled_from([CancelStepException, CancelBatchException, CancelFitException, None]),
       where=st.sampled_from(["on_batch_begin", "on_step_begin", "on_step_end", "on_batch_end"]),
       at=st.integers(0, 9), epochs=st.integers(1, 2))
def test_cancels_from_the_dispatched_events_end_the_same_on_both_paths(cancel, where, at, epochs):
    "A cancel raised in an event the fast path dispatches, at one batch: the same history, weights, events, errors."
    class Cancels(Callback):
        def __init__(self):
            self.seen = []

        def _maybe(self, event):
            self.seen.append((event, self.learn.training, self.learn.epoch, self.learn.iter))
            if cancel is not None and event == where and self.learn.training and self.learn.iter == at:
                raise cancel()

    for event in FAST_EVENTS:
        setattr(Cancels, event, lambda self, e=event: self._maybe(e))
    runs = []
    for full in (False, True):
        cb = Cancels()
        learn = make_learner(cbs=[cb, *([KeepsFullPath()] if full else [])])
        try:
            learn.fit(epochs)
            raised = None
        except Exception as e:  # a cancel raised outside its phase (a step cancel in on_batch_begin) escapes fit
            raised = type(e)
        runs.append((learn, cb, raised))
    (fast, fast_cb, fast_raised), (full, full_cb, full_raised) = runs
    same_run(fast, full, forwarded=fast.n_iter > 1 or where != "on_batch_begin")
    assert fast_cb.seen == full_cb.seen and fast_raised is full_raised


def test_cancel_zero_grad_is_seen_only_on_the_full_path():
    "CancelZeroGradException can only come from the zero_grad events, and listening to them keeps the full path."
    class Accumulate(Callback):
        def on_zero_grad_begin(self):
            if self.learn.iter % 2 == 0:
                raise CancelZeroGradException()

    learn = make_learner(cbs=[Accumulate()])
    learn.fit(1)
    assert not learn._fast and learn.n_steps == len(make_dls().train)
