"""looplab.lr_finder: the LR sweep puts the Learner back bit for bit, stops on divergence and suggests an LR below it
(moved here from test_schedule.py with notebook 06b)."""
import copy

import pytest
import torch

from looplab.callback import Callback
from looplab.lr_finder import lr_find

from helpers import PNG, make_learner


def sgd_mom(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


@pytest.mark.parametrize("opt_func", [sgd_mom, torch.optim.Adam])
def test_lr_find_puts_back_weights_optimizer_recorder_and_callbacks_bit_for_bit(opt_func):
    class Counter(Callback):
        def __init__(self):
            self.n = 0
        def on_batch_end(self):
            self.n += 1
        def state_dict(self):
            return {"n": self.n}
        def load_state_dict(self, state):
            self.n = state["n"]

    counter = Counter()
    learn = make_learner(opt_func=opt_func, cbs=[counter])
    learn.fit(1)
    weights = copy.deepcopy(learn.model.state_dict())
    opt_state = copy.deepcopy(learn.opt.state_dict())
    recorder = learn.recorder.state_dict()
    n_iter, n_steps, count = learn.n_iter, learn.n_steps, counter.n
    rng = torch.get_rng_state()
    found = lr_find(learn, n_steps=60)
    assert len(found.lrs) > 10 and found.lrs[0] == 1e-7
    assert all(torch.equal(v, learn.model.state_dict()[k]) for k, v in weights.items())
    after = learn.opt.state_dict()
    assert after["param_groups"] == opt_state["param_groups"]
    for key, state in opt_state["state"].items():
        assert all(torch.equal(v, after["state"][key][name]) for name, v in state.items())
    after_rec = learn.recorder.state_dict()
    assert torch.equal(after_rec["losses"], recorder["losses"]) and after_rec["hypers"] == recorder["hypers"]
    assert after_rec["values"] == recorder["values"]
    assert (learn.n_iter, learn.n_steps, counter.n) == (n_iter, n_steps, count) and torch.equal(rng, torch.get_rng_state())
    assert counter in learn.cbs and not any(type(cb).__name__ == "LRFinder" for cb in learn.cbs)


def test_lr_find_then_fit_equals_fit_alone_and_before_any_fit_leaves_no_optimizer():
    alone = make_learner()
    alone.fit(2)
    learn = make_learner()
    lr_find(learn, n_steps=30)
    assert learn.opts == {} and learn.opt is None
    learn.fit(2)
    assert learn.recorder.losses == alone.recorder.losses


def test_lr_find_stops_on_divergence_and_suggests_below_it():
    learn = make_learner()
    found = lr_find(learn, start_lr=1e-4, end_lr=1e4, n_steps=100)
    assert len(found.lrs) < 100
    assert found.suggestions["steep"] < found.lrs[-1] and found.suggestions["min/10"] < found.lrs[-1]
    assert found._repr_png_()[:8] == PNG
    with pytest.raises(ValueError, match="end_lr"):
        lr_find(learn, start_lr=1.0, end_lr=0.5)
    with pytest.raises(ValueError, match="n_steps"):
        lr_find(learn, n_steps=1)
