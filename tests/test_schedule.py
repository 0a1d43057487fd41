"""looplab.schedule: annealers, ParamScheduler on real steps, 1cycle and SGDR against torch's schedulers, and the
LR-schedule plot (moved here with its tests from test_widgets.py). The LR finder's tests are in test_lr_finder.py."""
import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from looplab.callback import Callback, CallbackError, CancelStepException
from looplab.checkpoint import learner_state, load_learner_state
from looplab.data import DataLoaders
from looplab.lr_plot import LRPlot
from looplab.schedule import (ParamScheduler, Sched, TorchScheduler, anneal_cos, anneal_exp, anneal_linear, combine_scheds,
                              dry_run_scheduler, fit_flat_cos, fit_one_cycle, fit_sgdr, one_cycle_scheds)

from helpers import PNG, make_dls, make_learner


def sgd_mom(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


# --- annealers and phases -------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5), st.floats(0.0, 1.0))
def test_combined_phases_are_continuous_at_their_bounds_and_cover_0_to_1(shares, pct):
    pcts = [s / sum(shares) for s in shares]
    pcts[-1] = 1 - sum(pcts[:-1])
    values = [float(i) for i in range(len(pcts) + 1)]
    sched = combine_scheds(pcts, [Sched(values[i], values[i + 1], anneal_linear) for i in range(len(pcts))])
    assert sched(0.0) == 0.0 and math.isclose(sched(1.0), len(pcts))
    assert -1e-9 <= sched(pct) <= len(pcts) + 1e-9
    bound = pcts[0]
    assert math.isclose(sched(bound), 1.0, abs_tol=1e-9)  # the end of phase 1 is the start of phase 2


def test_annealers_and_bad_phases():
    assert anneal_cos(2.0, 0.0, 0.5) == 1.0 and math.isclose(anneal_exp(1.0, 100.0, 0.5), 10.0)
    with pytest.raises(ValueError, match="sum to 1"):
        combine_scheds([0.5, 0.4], [Sched(1, 0), Sched(0, 1)])
    with pytest.raises(ValueError, match="same non-zero length"):
        combine_scheds([], [])


# --- ParamScheduler -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pct_start, lr_max, n_epochs", [(0.3, 0.4, 3), (0.25, 0.01, 2), (0.5, 1.0, 1)])
def test_one_cycle_equals_torch_one_cycle_lr_at_every_step(pct_start, lr_max, n_epochs):
    learn = make_learner(opt_func=sgd_mom)
    learn.create_opt()
    n_steps = n_epochs * len(learn.dls.train)
    reference = dry_run_scheduler(lambda opt: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr_max, total_steps=n_steps, pct_start=pct_start, anneal_strategy="cos", div_factor=25.0,
        final_div_factor=1e4, base_momentum=0.85, max_momentum=0.95), learn.opt, n_steps)
    fit_one_cycle(learn, n_epochs, lr_max=lr_max, pct_start=pct_start)
    assert len(learn.recorder.lrs) == n_steps
    np.testing.assert_allclose(learn.recorder.lrs, reference["lr"][0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(learn.recorder.moms, reference["mom"][0], rtol=0, atol=1e-9)


def test_one_cycle_with_adam_cycles_beta1_and_per_group_lrs():
    def two_groups(params, lr):
        params = list(params)
        return torch.optim.Adam([{"params": params[:2], "lr": lr}, {"params": params[2:], "lr": lr}])

    learn = make_learner(opt_func=two_groups)
    learn.create_opt()
    n_steps = 2 * len(learn.dls.train)
    reference = dry_run_scheduler(lambda opt: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=[0.01, 0.001], total_steps=n_steps, pct_start=0.25), learn.opt, n_steps)
    fit_one_cycle(learn, 2, lr_max=[0.01, 0.001])
    for group in range(2):
        np.testing.assert_allclose([h[0][group] for h in learn.recorder.hypers], reference["lr"][group], atol=1e-9)
        np.testing.assert_allclose([h[1][group] for h in learn.recorder.hypers], reference["mom"][group], atol=1e-9)


@pytest.mark.parametrize("n_cycles, cycle_len, mult", [(2, 1, 2), (3, 1, 1), (2, 2, 3)])
def test_sgdr_equals_cosine_annealing_warm_restarts(n_cycles, cycle_len, mult):
    learn = make_learner()
    learn.create_opt()
    per_epoch = len(learn.dls.train)
    n_epochs = sum(cycle_len * mult**i for i in range(n_cycles))
    reference = dry_run_scheduler(lambda opt: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        opt, T_0=cycle_len * per_epoch, T_mult=mult, eta_min=0.002), learn.opt, n_epochs * per_epoch)
    fit_sgdr(learn, n_cycles, cycle_len, lr_max=0.1, cycle_mult=mult, lr_min=0.002)
    np.testing.assert_allclose(learn.recorder.lrs, reference["lr"][0], rtol=0, atol=1e-9)


def test_flat_cos_is_flat_then_anneals():
    learn = make_learner()
    fit_flat_cos(learn, 4, lr=0.1, pct_start=0.75)
    lrs = learn.recorder.lrs
    assert lrs[:48] == [0.1] * 48 and all(a > b for a, b in zip(lrs[48:], lrs[49:])) and lrs[-1] < 0.01


class CancelSomeSteps(Callback):
    "Cancels the step of the batches whose global index is in `skip`, as a loss scaler that finds inf gradients."
    def __init__(self, skip):
        self.skip = set(skip)

    def on_step_begin(self):
        if self.learn.n_iter - 1 in self.skip:
            raise CancelStepException()


def test_a_cancelled_step_does_not_move_the_schedule():
    learn = make_learner()
    sched = Sched(0.1, 0.0, anneal_linear)
    skip = {1, 2, 7, 20}
    learn.fit(2, cbs=[ParamScheduler({"lr": sched}), CancelSomeSteps(skip)])
    steps_before = 0
    expected = []
    for i in range(32):
        expected.append(sched(steps_before / 32))
        steps_before += i not in skip
    assert learn.recorder.lrs == expected and learn.n_steps == 32 - len(skip) and learn.recorder.n_skipped == 0


def test_steps_the_loss_scaler_skips_do_not_move_the_schedule():
    "Inf gradients under AMPEngine(float16): GradScaler refuses those steps; the schedule waits for the next real one."
    from looplab.engine import AMPEngine

    class InfAt(Callback):
        def on_backward_begin(self):
            if self.learn.n_iter in (4, 9):
                self.learn.loss_grad = self.learn.loss_grad * math.inf

    learn = make_learner(engine=AMPEngine(torch.float16))
    sched = Sched(0.1, 0.0, anneal_linear)
    learn.fit(1, cbs=[ParamScheduler({"lr": sched}), InfAt()])
    assert learn.recorder.n_skipped == 2 and learn.n_steps == 14
    steps_before = [0, 1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 12, 13]
    assert learn.recorder.lrs == [sched(s / 16) for s in steps_before]


def test_param_scheduler_resumes_from_a_learner_state_taken_mid_fit():
    class Snap(Callback):
        order = 50
        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == 21:
                self.state = copy.deepcopy(learner_state(self.learn))

    scheds = one_cycle_scheds(0.5, 48)
    reference = make_learner(opt_func=sgd_mom)
    reference.fit(1)  # a first fit: this fit's schedule starts at n_steps = 16, not 0
    snap = Snap()
    reference.fit(3, cbs=[ParamScheduler(scheds), snap])
    resumed = make_learner(opt_func=sgd_mom)
    scheduler = ParamScheduler(scheds)
    load_learner_state(resumed, snap.state)
    resumed.fit(3, cbs=[scheduler, Snap()])
    assert scheduler.start_step == 16
    assert resumed.recorder.hypers == reference.recorder.hypers
    assert all(torch.equal(p, q) for p, q in zip(resumed.model.parameters(), reference.model.parameters()))


def test_param_scheduler_counts_steps_of_a_callback_that_groups_batches():
    class GroupOfFour(Callback):
        def steps_per_epoch(self, n_batches):
            return n_batches // 4

        def on_step_begin(self):
            if self.learn.iter % 4 != 3:
                raise CancelStepException()

    learn = make_learner()
    sched = Sched(0.1, 0.0, anneal_linear)
    scheduler = ParamScheduler({"lr": sched})
    learn.fit(2, cbs=[scheduler, GroupOfFour()])
    assert scheduler.total == 8 and learn.n_steps == 8
    assert learn.recorder.lrs[3::4] == [sched(i / 8) for i in range(8)]


@pytest.mark.parametrize("make, error, words", [
    (lambda: ParamScheduler({"beta": Sched(1, 0)}), ValueError, ["'beta'", "'lr'", "'mom'", "'wd'"]),
    (lambda: ParamScheduler({}), ValueError, ["non-empty"]),
    (lambda: ParamScheduler({"lr": [Sched(1, 0), 3]}), TypeError, ["scheds['lr']", "one per parameter group"]),
    (lambda: one_cycle_scheds(-1.0, 10), ValueError, ["lr_max", "> 0", "-1.0"]),
    (lambda: one_cycle_scheds(0.1, 1), ValueError, ["n_steps", ">= 2"]),
    (lambda: combine_scheds([0.2, 0.2], [Sched(1, 0), Sched(0, 1)]), ValueError, ["pcts", "sum to 1"]),
])
def test_schedule_bad_input(make, error, words):
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value)


def test_schedules_that_do_not_fit_the_optimizer_are_refused_at_train_begin():
    learn = make_learner(opt_func=torch.optim.Adagrad)
    with pytest.raises(CallbackError, match="cannot schedule 'mom'.*Adagrad"):
        learn.fit(1, cbs=ParamScheduler({"mom": Sched(0.9, 0.8)}))
    learn = make_learner()
    with pytest.raises(CallbackError, match="2 schedules but the optimizer has 1"):
        learn.fit(1, cbs=ParamScheduler({"lr": [Sched(0.1, 0), Sched(0.1, 0)]}))
    fit_one_cycle(make_learner(), 1, lr_max=0.1)  # SGD without momentum: its momentum of 0 is cycled like any other
    with pytest.raises(ValueError, match="lr_max"):
        fit_one_cycle(make_learner(), 1, lr_max=0)


# --- LRPlot ---------------------------------------------------------------------------------------------------

class PerStepScheduler(Callback):
    "Steps a torch scheduler after every optimizer step, by hand."
    def __init__(self, scheduler):
        self.scheduler = scheduler

    def on_train_begin(self):
        self.sched = self.scheduler(self.learn.opt)

    def on_step_end(self):
        self.sched.step()


class FnScheduler(Callback):
    "Sets every group's LR from sched_fn(pct) before each training step, pct = step / n_steps."
    def __init__(self, sched_fn):
        self.sched_fn = sched_fn

    def on_train_begin(self):
        self.n_steps = self.learn.n_epochs * len(self.learn.dls.train)
        self.step = 0

    def on_batch_begin(self):
        if self.learn.training:
            for group in self.learn.opt.param_groups:
                group["lr"] = self.sched_fn(self.step / self.n_steps)
            self.step += 1


def two_group_adam(params, lr):
    params = list(params)
    return torch.optim.Adam([{"params": params[:2], "lr": lr}, {"params": params[2:], "lr": lr / 10}])


def test_lr_plot_dry_run_predicts_training_exactly_for_every_group():
    learn = make_learner(opt_func=two_group_adam, lr=0.01)
    learn.create_opt()
    step_lr = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    plot = LRPlot(scheduler=step_lr, n_steps=48, opt=learn.opt)
    assert set(plot.planned["lr"]) == {"plan (scheduler, group 0)", "plan (scheduler, group 1)"}
    learn.fit(3, cbs=[plot, PerStepScheduler(step_lr)])
    assert plot.lrs == [plot.planned["lr"]["plan (scheduler, group 0)"], plot.planned["lr"]["plan (scheduler, group 1)"]]
    assert plot.lrs[0][:11] == [0.01] * 10 + [0.005]
    assert plot.moms == [[0.9] * 48, [0.9] * 48]  # Adam's betas[0]


def test_lr_plot_plans_a_function_of_progress_at_train_begin_and_matches_it(always_due):
    learn = make_learner()
    cosine = lambda pct: 0.05 + 0.05 * math.cos(math.pi * pct)
    plot = LRPlot(sched_fn=cosine, mode="widget")
    learn.fit(2, cbs=[plot, FnScheduler(cosine)])
    assert plot.n_steps == 32
    assert plot.lrs == [plot.planned["lr"]["plan (sched_fn)"]]
    assert plot.live.n_draws > 1 and plot.live.png[:8] == PNG
    assert plot.moms == [[0.0] * 32]  # SGD without momentum still has a momentum of 0


def test_lr_plot_without_plan_draws_what_was_used():
    learn = make_learner()
    plot = LRPlot()
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.plot()
    assert plot._repr_png_() is None
    learn.fit(1, cbs=plot)
    assert plot.lrs == [[0.1] * 16] and plot.planned == {"lr": {}, "mom": {}}
    assert plot._repr_png_()[:8] == PNG


def test_lr_plot_needs_n_steps_when_the_loader_has_no_length():
    batches = make_dls().train

    class Stream:
        def __iter__(self):
            return iter(batches)

    learn = make_learner(dls=DataLoaders(Stream(), None))
    with pytest.raises(CallbackError, match="n_steps"):
        learn.fit(1, cbs=LRPlot(sched_fn=lambda pct: 0.1))
    plot = LRPlot(sched_fn=lambda pct: 0.1, n_steps=16)
    learn.fit(1, cbs=plot)
    assert len(plot.lrs[0]) == 16


def test_dry_run_never_touches_the_real_optimizer_or_model():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # the real optimizer already has a scheduler
    model(torch.ones(2, 3)).sum().backward()  # and gradients waiting
    weights = [p.detach().clone() for p in model.parameters()]
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    plan = dry_run_scheduler(lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.5), opt, 4)
    assert plan["lr"] == [[0.1, 0.05, 0.025, 0.0125]] and plan["mom"] == [[0.9] * 4]
    assert all(torch.equal(w, p) for w, p in zip(weights, model.parameters()))
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups
    assert not opt.state


def test_dry_run_works_for_an_optimizer_with_required_arguments():
    class PlainSGD(torch.optim.Optimizer):
        def __init__(self, params, lr, wd):
            super().__init__(params, {"lr": lr, "wd": wd})

        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.data.add_(p.grad, alpha=-group["lr"])

    opt = PlainSGD(nn.Linear(2, 1).parameters(), lr=1.0, wd=0.1)
    plan = dry_run_scheduler(lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.5, 1.0, total_iters=2), opt, 3)
    assert plan["lr"][0] == pytest.approx([0.5, 0.75, 1.0]) and plan["mom"] is None


@pytest.mark.parametrize("call, error, words", [
    (lambda opt: dry_run_scheduler(torch.optim.lr_scheduler.StepLR(opt, 1), opt, 3), TypeError, ["lambda opt"]),
    (lambda opt: dry_run_scheduler(lambda o: torch.optim.lr_scheduler.StepLR(o, 1), "sgd", 3), TypeError, ["opt", "str"]),
    (lambda opt: dry_run_scheduler(lambda o: None, opt, 3), TypeError, ["step()", "NoneType"]),
    (lambda opt: dry_run_scheduler(lambda o: torch.optim.lr_scheduler.StepLR(o, 1), opt, 2.5), TypeError, ["n_steps", "2.5"]),
    (lambda opt: dry_run_scheduler(lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=5), opt, 7),
     ValueError, ["step 6", "n_steps=7"]),
    (lambda opt: LRPlot(scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 1), n_steps=4).plan(), ValueError, ["opt="]),
    (lambda opt: LRPlot(mom_fn=3), TypeError, ["mom_fn", "3"]),
    (lambda opt: LRPlot(n_steps=0), ValueError, ["n_steps", "0"]),
])
def test_lr_plot_bad_input(call, error, words):
    opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(error) as info:
        call(opt)
    for word in words:
        assert word in str(info.value)




# --- TorchScheduler's unit --------------------------------------------------------------------------------------

def lrs_per_epoch(learn) -> list[float]:
    per_epoch = len(learn.dls.train)
    return [lrs[0] for lrs, _ in learn.recorder.hypers[::per_epoch]]


def test_step_lr_steps_once_per_epoch_as_torch_documents_it():
    "StepLR(step_size=1, gamma=0.7) for 3 epochs: 0.7 per epoch, not per batch (which would leave ~1e-11)."
    learn = make_learner(lr=0.1)
    sched = TorchScheduler(lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7))
    learn.fit(3, cbs=sched)
    assert lrs_per_epoch(learn) == pytest.approx([0.1, 0.07, 0.049])
    assert learn.opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.7 ** 3)


def test_one_cycle_lr_steps_after_every_batch_as_torch_documents_it():
    learn = make_learner(lr=0.1)
    n_steps = 2 * len(learn.dls.train)
    sched = TorchScheduler(lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, 0.5, total_steps=n_steps))
    learn.fit(2, cbs=sched)  # one step too many would raise in OneCycleLR itself
    assert sched.scheduler.last_epoch == n_steps
    lrs = [lrs[0] for lrs, _ in learn.recorder.hypers]
    assert 0.45 < max(lrs) <= 0.5 and lrs[0] < 0.05 and lrs[-1] < 1e-3


def test_reduce_lr_on_plateau_steps_per_epoch_on_its_monitor():
    learn = make_learner(lr=0.1)
    sched = TorchScheduler(lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0,
                                                                                  threshold=10.0))
    learn.fit(3, cbs=sched)  # a threshold no epoch clears: halved after every epoch
    assert lrs_per_epoch(learn) == pytest.approx([0.1, 0.05, 0.025])


def test_every_overrides_the_documented_unit_and_a_scheduler_of_ones_own_must_name_it():
    learn = make_learner(lr=0.1)
    per_step = TorchScheduler(lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5), every="step")
    learn.fit(1, cbs=per_step)
    assert per_step.scheduler.last_epoch == len(learn.dls.train)

    class Halving(torch.optim.lr_scheduler.LRScheduler):
        def get_lr(self):
            return [base * 0.5 ** self.last_epoch for base in self.base_lrs]

    with pytest.raises(CallbackError, match="every='step'.*every='epoch'"):
        make_learner().fit(1, cbs=TorchScheduler(Halving))
    learn = make_learner(lr=0.1)
    learn.fit(2, cbs=TorchScheduler(Halving, every="epoch"))
    assert lrs_per_epoch(learn) == pytest.approx([0.1, 0.05])
