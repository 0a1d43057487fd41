"""TorchScheduler resumes exactly: every scheduler in torch.optim.lr_scheduler (and one of one's own, per epoch and per
step), paused mid-epoch and at an epoch's end, saved with save_checkpoint and resumed by load_checkpoint in a new
learner, steps with the same LR and momentum at every step as the uninterrupted run and ends with the same weights,
bit for bit. MultiStepLR's Counter of milestones travels through the checkpoint and comes back a Counter."""
import inspect
from collections import Counter

import pytest
import torch
import torch.optim.lr_scheduler as L
from torch import nn

from helpers import SaveAt, digits_learner
from looplab.checkpoint import load_checkpoint
from looplab.files import read_checkpoint
from looplab.schedule import TorchScheduler

torch.set_num_threads(1)
N_EPOCHS = 3
PER_EPOCH = 23  # the digits' training batches of 64


class Halving(L.LRScheduler):
    "A scheduler of one's own: half the LR at every step of its own unit."
    def get_lr(self):
        return [base * 0.5 ** self.last_epoch for base in self.base_lrs]


def sequential(opt):
    return L.SequentialLR(opt, [L.LinearLR(opt, start_factor=0.25, total_iters=1), L.ExponentialLR(opt, gamma=0.7)],
                          milestones=[1])


TORCH = {  # each of torch's schedulers, with settings that move the LR within the 3 epochs (69 steps)
    "LambdaLR": lambda opt: L.LambdaLR(opt, lambda epoch: 0.5 ** epoch),
    "MultiplicativeLR": lambda opt: L.MultiplicativeLR(opt, lambda epoch: 0.8),
    "StepLR": lambda opt: L.StepLR(opt, step_size=1, gamma=0.5),
    "MultiStepLR": lambda opt: L.MultiStepLR(opt, milestones=[1, 1, 2], gamma=0.5),  # twice at 1: counts matter
    "ConstantLR": lambda opt: L.ConstantLR(opt, factor=0.5, total_iters=2),
    "LinearLR": lambda opt: L.LinearLR(opt, start_factor=0.25, total_iters=2),
    "ExponentialLR": lambda opt: L.ExponentialLR(opt, gamma=0.7),
    "PolynomialLR": lambda opt: L.PolynomialLR(opt, total_iters=3, power=2.0),
    "CosineAnnealingLR": lambda opt: L.CosineAnnealingLR(opt, T_max=3, eta_min=0.01),
    "ChainedScheduler": lambda opt: L.ChainedScheduler([L.LinearLR(opt, start_factor=0.25, total_iters=2),
                                                        L.ExponentialLR(opt, gamma=0.8)]),
    "SequentialLR": sequential,
    "ReduceLROnPlateau": lambda opt: L.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.9),
    "CyclicLR": lambda opt: L.CyclicLR(opt, base_lr=0.02, max_lr=0.5, step_size_up=10),
    "OneCycleLR": lambda opt: L.OneCycleLR(opt, max_lr=0.5, total_steps=N_EPOCHS * PER_EPOCH),
    "CosineAnnealingWarmRestarts": lambda opt: L.CosineAnnealingWarmRestarts(opt, T_0=2, eta_min=0.01),
}
CASES = {**{name: (make, None) for name, make in TORCH.items()},
         "own, every='epoch'": (Halving, "epoch"),
         "own, every='step'": (lambda opt: L.LambdaLR(opt, lambda step: 0.97 ** step), "step"),
         "MultiStepLR in SequentialLR": (lambda opt: L.SequentialLR(opt, [
             L.ConstantLR(opt, factor=0.5, total_iters=1), L.MultiStepLR(opt, milestones=[1, 1], gamma=0.5)],
             milestones=[1]), None)}
PAUSES = {"mid-epoch": dict(n_iter=30), "epoch end": dict(epoch=0)}  # after batch 7 of epoch 1; after epoch 0


def model():
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def learner(make, every, opt_func=None, **save):
    return digits_learner(model, seed=0, opt_func=opt_func, cbs=[TorchScheduler(make, every=every), SaveAt(**save)])


def resumed_and_whole(tmp_path, make, every, pause, opt_func=None):
    "The run paused at `pause`, checkpointed, and resumed in a new learner; and the run never paused."
    whole = learner(make, every, opt_func)
    whole.fit(N_EPOCHS)
    learner(make, every, opt_func, path=tmp_path / "run.pt", **pause).fit(N_EPOCHS)
    resumed = learner(make, every, opt_func)
    torch.manual_seed(999)  # a new process's generators
    load_checkpoint(resumed, tmp_path / "run.pt")
    resumed.fit(N_EPOCHS)
    return resumed, whole


def scheduler_of(learn):
    return next(cb for cb in learn.cbs if isinstance(cb, TorchScheduler)).scheduler


def test_the_cases_cover_every_scheduler_torch_has():
    "A scheduler a newer torch adds fails here until it is added to TORCH, and so tested for resume."
    kinds = (L.LRScheduler, L.ReduceLROnPlateau)
    public = {name for name, obj in vars(L).items() if inspect.isclass(obj) and issubclass(obj, kinds)
              and obj.__module__ == L.__name__ and not name.startswith("_") and obj is not L.LRScheduler}
    assert public == set(TORCH)


@pytest.mark.parametrize("pause", PAUSES.values(), ids=PAUSES.keys())
@pytest.mark.parametrize("name", CASES)
def test_every_scheduler_resumes_exactly_through_a_checkpoint(tmp_path, name, pause):
    make, every = CASES[name]
    resumed, whole = resumed_and_whole(tmp_path, make, every, pause)
    lrs = whole.recorder.lrs
    assert len(lrs) == N_EPOCHS * PER_EPOCH
    at = 30 if "n_iter" in pause else PER_EPOCH  # the first step the resumed run takes
    assert len(set(lrs[at:])) > 1 or lrs[at] != lrs[0]  # the schedule moves after the pause: the test can fail
    assert resumed.recorder.hypers == whole.recorder.hypers  # every step's LR and momentum
    assert all(torch.equal(p, q) for p, q in zip(resumed.model.parameters(), whole.model.parameters()))
    assert resumed.opt.state_dict()["param_groups"] == whole.opt.state_dict()["param_groups"]


def test_one_cycle_with_adam_resumes_its_betas_too(tmp_path):
    "OneCycleLR cycles Adam's β₁: the resumed run steps with the β₁ the uninterrupted one did, not the first one."
    make = TORCH["OneCycleLR"]
    resumed, whole = resumed_and_whole(tmp_path, make, None, PAUSES["mid-epoch"], opt_func=torch.optim.Adam)
    moms = [mom for _, mom in whole.recorder.hypers]
    assert moms[30] != moms[0] and resumed.recorder.hypers == whole.recorder.hypers
    assert all(torch.equal(p, q) for p, q in zip(resumed.model.parameters(), whole.model.parameters()))


def test_multi_step_milestones_travel_as_a_dict_and_come_back_a_counter(tmp_path):
    "The checkpoint holds plain data (its milestones a dict with their counts), and the loaded scheduler a Counter."
    learner(TORCH["MultiStepLR"], None, path=tmp_path / "run.pt", n_iter=30).fit(N_EPOCHS)
    state = read_checkpoint(tmp_path / "run.pt")["state"]["callbacks"]["torch_scheduler"]
    assert type(state["milestones"]) is dict and state["milestones"] == {1: 2, 2: 1}
    resumed = learner(TORCH["MultiStepLR"], None)
    load_checkpoint(resumed, tmp_path / "run.pt")
    resumed.fit(N_EPOCHS)
    milestones = scheduler_of(resumed).milestones
    assert type(milestones) is Counter and milestones == Counter([1, 1, 2])
    assert resumed.recorder.lrs[-1] == pytest.approx(0.1 * 0.5 ** 3)  # gamma twice at epoch 1, once at 2


def test_the_state_keeps_the_optimizer_settings_and_a_bare_scheduler_state_still_loads():
    "The state holds the optimizer's groups beside the scheduler's; a scheduler's own state_dict loads, LR untouched."
    learn = learner(TORCH["LinearLR"], None)
    learn.fit(1)
    cb = next(cb for cb in learn.cbs if isinstance(cb, TorchScheduler))
    state = cb.state_dict()
    saved = state["optimizer_param_groups"]
    assert len(saved) == 1 and saved[0]["lr"] == learn.opt.param_groups[0]["lr"] and "params" not in saved[0]
    learn.opt.param_groups[0]["lr"] = 7.0
    cb.load_state_dict(cb.scheduler.state_dict())  # torch's own state: the scheduler's counters only
    assert learn.opt.param_groups[0]["lr"] == 7.0 and cb.scheduler.last_epoch == 1
    cb.load_state_dict(state)
    assert learn.opt.param_groups[0]["lr"] == saved[0]["lr"]


def test_a_state_loaded_before_the_fit_is_kept_and_then_loaded_with_the_optimizer_settings():
    "Loaded before its scheduler is built: state_dict gives it back; the fit builds the scheduler, then loads both."
    donor = learner(TORCH["LinearLR"], None)
    donor.fit(1)
    state = next(cb for cb in donor.cbs if isinstance(cb, TorchScheduler)).state_dict()
    cb = TorchScheduler(TORCH["LinearLR"])
    cb.load_state_dict(state)
    assert cb.state_dict() is state
    learn = digits_learner(model, seed=0, cbs=[cb])
    learn.fit(1)
    lr_then = state["optimizer_param_groups"][0]["lr"]
    assert learn.recorder.lrs[0] == lr_then != 0.1 * 0.25  # the saved run's LR, not LinearLR's first
    assert cb.scheduler.last_epoch == 2
