"""looplab.optim against torch's optimizers: 100 steps, every parameter within 1e-6; exact resume; decay groups."""
import io

import pytest
import torch
from torch import nn

from looplab.data import DataLoaders, set_seed
from looplab.learner import Learner
from looplab.optim import SGD, AdamW, param_groups
from looplab.schedule import ParamScheduler, Sched


def small_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.BatchNorm1d(16), nn.Linear(16, 3))  # no norm right after a bias:
    # a bias that a norm cancels has a gradient of pure rounding noise, which Adam blows up to steps of size lr


def train_steps(model, opt, n_steps=100, start=0, seed=1, lrs=None):
    "Steps start..start+n_steps of a fixed stream of random batches; `lrs(step)` sets every group's LR if given."
    g = torch.Generator().manual_seed(seed)
    for step in range(start + n_steps):
        x = torch.randn(32, 10, generator=g)
        y = torch.randint(0, 3, (32,), generator=g)
        if step < start:
            continue
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs(step)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model


def groups(model):
    return [{"params": model[0].parameters(), "lr": 3e-3, "weight_decay": 0.0},
            {"params": list(model[2].parameters()) + list(model[3].parameters())}]


def assert_close(a, b, tol=1e-6):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert (p - q).abs().max().item() < tol, name


@pytest.mark.parametrize("kwargs", [dict(lr=1e-2, weight_decay=0.1), dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6,
                                                                           weight_decay=0.0)])
@pytest.mark.parametrize("scheduled", [False, True])
def test_adamw_matches_torch_adamw(kwargs, scheduled):
    lrs = (lambda step: kwargs["lr"] * (1 - step / 100)) if scheduled else None
    ours = small_model()
    train_steps(ours, AdamW(groups(ours), **kwargs), lrs=lrs)
    theirs = small_model()
    train_steps(theirs, torch.optim.AdamW(groups(theirs), **kwargs), lrs=lrs)
    assert_close(ours, theirs)


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_adam_with_l2_matches_torch_adam(wd):
    ours = small_model()
    train_steps(ours, AdamW(groups(ours), lr=1e-2, weight_decay=wd, decouple_wd=False))
    theirs = small_model()
    train_steps(theirs, torch.optim.Adam(groups(theirs), lr=1e-2, weight_decay=wd))
    assert_close(ours, theirs)


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.05, momentum=0.5, weight_decay=0.01)])
def test_sgd_matches_torch_sgd(kwargs):
    ours = small_model()
    train_steps(ours, SGD(groups(ours), **kwargs))
    theirs = small_model()
    train_steps(theirs, torch.optim.SGD(groups(theirs), **kwargs))
    assert_close(ours, theirs)


def test_decoupled_decay_differs_from_l2_with_momentum_and_matches_its_rule():
    "With momentum, decoupled decay is not L2: one explicit step of the rule, by hand."
    p = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.5, decouple_wd=True)
    for grad in (torch.tensor([0.2, 0.4]), torch.tensor([-0.1, 0.3])):
        expected_buf = grad if "momentum_buffer" not in opt.state[p] else 0.9 * opt.state[p]["momentum_buffer"] + grad
        expected = p.detach() * (1 - 0.1 * 0.5) - 0.1 * expected_buf
        p.grad = grad.clone()
        opt.step()
        assert torch.allclose(p.detach(), expected, atol=1e-7)


@pytest.mark.parametrize("make", [lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.1),
                                  lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3)])
def test_state_dict_resumes_bit_for_bit(make):
    straight = small_model()
    train_steps(straight, make(straight.parameters()))
    half = small_model()
    opt = make(half.parameters())
    train_steps(half, opt, 40)
    buffer = io.BytesIO()
    torch.save({"model": half.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = small_model(seed=9)
    resumed.load_state_dict(saved["model"])
    opt2 = make(resumed.parameters())
    opt2.load_state_dict(saved["opt"])
    train_steps(resumed, opt2, 60, start=40)
    assert all(torch.equal(p, q) for p, q in zip(straight.parameters(), resumed.parameters()))


def test_param_groups_skip_biases_and_norm_weights():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 8, bias=False), nn.LayerNorm(8),
                          nn.Embedding(5, 8))
    decay, no_decay = param_groups(model, 0.1, lr=0.01)
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight), id(model[4].weight)}
    assert len(no_decay["params"]) == 5 and no_decay["weight_decay"] == 0.0 and no_decay["lr"] == 0.01
    assert len(param_groups(model, 0.1, no_decay_bias_norm=False)) == 1
    model.eval()
    before = model[1].weight.detach().clone()
    before_linear = model[0].weight.detach().clone()
    opt = AdamW(param_groups(model, 0.5), lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.equal(model[1].weight, before)  # zero gradient, no decay: unchanged
    assert torch.equal(model[0].weight.detach(), before_linear * (1 - 0.1 * 0.5))  # decayed by lr * weight_decay


def test_in_a_learner_with_a_schedule_of_beta1():
    set_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 10, generator=g)
    y = (x[:, 0] > 0).long()
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 128, 16)]
    learn = Learner(nn.Sequential(nn.Linear(10, 2)), DataLoaders(batches, None), lr=1e-2,
                    opt_func=lambda ps, lr: AdamW(ps, lr=lr))
    learn.progress.file = io.StringIO()
    learn.fit(1, cbs=ParamScheduler({"mom": Sched(0.95, 0.85), "wd": Sched(0.0, 0.1)}))
    assert learn.recorder.moms[0] == 0.95 and learn.opt.param_groups[0]["betas"][1] == 0.999
    assert learn.opt.param_groups[0]["weight_decay"] > 0


@pytest.mark.parametrize("make, words", [
    (lambda ps: AdamW(ps, lr=-0.1), ["lr", ">= 0", "-0.1"]),
    (lambda ps: AdamW(ps, betas=(1.2, 0.9)), ["betas", "[0, 1)"]),
    (lambda ps: AdamW(ps, eps=0), ["eps", "> 0"]),
    (lambda ps: SGD(ps, momentum=1.5), ["momentum", "[0, 1)", "1.5"]),
    (lambda ps: SGD(ps, weight_decay=-1), ["weight_decay", ">= 0"]),
])
def test_bad_hyper_parameters(make, words):
    with pytest.raises(ValueError) as info:
        make(nn.Linear(2, 2).parameters())
    for word in words:
        assert word in str(info.value)
