"EpochBatchSampler: every epoch is a permutation split into batches, a pure function of (seed, epoch), resumable."
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from looplab.data import DataLoaders, EpochBatchSampler, EpochOrder, load_digits, make_rings

sizes = st.integers(min_value=1, max_value=300)


@settings(max_examples=80, deadline=None)
@given(n=sizes, bs=st.integers(1, 64), seed=st.integers(0, 2**40), epoch=st.integers(0, 1000),
       drop_last=st.booleans())
def test_epoch_is_a_permutation_in_batches(n, bs, seed, epoch, drop_last):
    if drop_last and bs > n:
        with pytest.raises(ValueError, match="no batch"):
            EpochBatchSampler(n, bs, seed=seed, drop_last=drop_last)
        return
    s = EpochBatchSampler(n, bs, seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    batches = list(s)
    assert len(batches) == len(s) == s.n_batches
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == len(flat)
    if drop_last:
        assert all(len(b) == bs for b in batches) and len(flat) == (n // bs) * bs
    else:
        assert sorted(flat) == list(range(n))
    fresh = EpochBatchSampler(n, bs, seed=seed, drop_last=drop_last)
    fresh.set_epoch(epoch)
    assert list(fresh) == batches  # a pure function of (seed, epoch): no hidden global state


@settings(max_examples=60, deadline=None)
@given(n=sizes, bs=st.integers(1, 32), seed=st.integers(0, 2**31), epoch=st.integers(0, 50), data=st.data())
def test_resume_at_any_batch_gives_the_rest_of_the_epoch(n, bs, seed, epoch, data):
    s = EpochBatchSampler(n, bs, seed=seed)
    s.set_epoch(epoch)
    whole = list(s)
    k = data.draw(st.integers(0, len(whole)))
    s.set_epoch(epoch)  # the pass that ran to its end moved the sampler on to epoch + 1
    s.set_start_iter(k)
    other = EpochBatchSampler(n, bs, seed=seed)
    other.load_state_dict(s.state_dict())
    assert list(other) == whole[k:] and len(other) == other.n_batches
    following = EpochBatchSampler(n, bs, seed=seed)
    following.set_epoch(epoch + 1)
    assert other.epoch == epoch + 1 and list(other) == list(following), "then the next epoch, from its first batch"


def test_shuffle_does_not_touch_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    list(EpochBatchSampler(100, 10, seed=5))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(n=0, bs=1), ValueError, "n must be an int >= 1, got 0"),
    (dict(n=5, bs=0), ValueError, "bs must be an int >= 1, got 0"),
    (dict(n=5, bs=2, seed="1"), TypeError, "seed must be an int"),
    (dict(n=5.0, bs=2), TypeError, "n must be an int"),
    (dict(n=5, bs=True), TypeError, "bs must be an int, got True of type bool"),
])
def test_bad_arguments(kwargs, exc, fragment):
    with pytest.raises(exc, match=fragment):
        EpochBatchSampler(**kwargs)


def test_numpy_integers_are_accepted_as_plain_ints():
    s = EpochBatchSampler(np.int64(10), np.int32(4), seed=np.uint8(1))
    assert (type(s.n), type(s.bs), type(s.seed)) == (int, int, int)
    assert list(s) == list(EpochBatchSampler(10, 4, seed=1))
    s.set_epoch(np.int64(0))
    s.set_start_iter(np.int64(2))
    assert type(s.state_dict()["start_iter"]) is int and len(s) == 1


def test_state_of_another_order_is_refused():
    state = EpochBatchSampler(10, 2, seed=1).state_dict()
    for other in (EpochBatchSampler(11, 2, seed=1), EpochBatchSampler(10, 3, seed=1),
                  EpochBatchSampler(10, 2, seed=2), EpochBatchSampler(10, 2, seed=1, shuffle=False)):
        with pytest.raises(ValueError, match="different order"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="epoch must be an int >= 0, got -1"):
        EpochBatchSampler(10, 2).set_epoch(-1)
    with pytest.raises(TypeError, match="epoch must be an int"):
        EpochBatchSampler(10, 2).set_epoch(1.0)  # a TypeError since check_int (it was a ValueError)
    with pytest.raises(ValueError, match=r"start_iter must be an int in \[0, 5\], got 6"):
        EpochBatchSampler(10, 2).set_start_iter(6)


def test_dataloaders_from_tensors_and_bad_input():
    x, y = load_digits()
    dls = DataLoaders.from_tensors(x, y, bs=100, valid_pct=0.5, seed=0)
    seen = torch.cat([yb for _, yb in dls.train] + [yb for _, yb in dls.valid])
    assert torch.equal(seen.sort().values, y.sort().values)  # nothing dropped or repeated
    with pytest.raises(ValueError, match="same length"):
        DataLoaders.from_tensors(x, y[:-1])
    with pytest.raises(ValueError, match="n must be >= 1"):
        make_rings(0)


# ---- a new order on each pass ----------------------------------------------------------------------------

def test_each_pass_is_the_next_epoch_and_a_fresh_sampler_replays_them():
    s = EpochBatchSampler(30, 4, seed=7)
    passes = [list(s) for _ in range(3)]
    assert len({str(p) for p in passes}) == 3, "three passes, three orders"
    fresh = EpochBatchSampler(30, 4, seed=7)
    assert [list(fresh) for _ in range(3)] == passes, "deterministic in (seed, pass)"
    told = EpochBatchSampler(30, 4, seed=7)
    for epoch in range(3):
        told.set_epoch(epoch)  # torch's convention gives the same orders
        assert list(told) == passes[epoch]


def fresh_epoch(epoch):
    s = EpochBatchSampler(30, 4, seed=7)
    s.set_epoch(epoch)
    return list(s)


def test_a_pass_begins_at_its_first_batch_and_an_unfinished_one_counts():
    s = EpochBatchSampler(30, 4, seed=7)
    iter(s)
    iter(s)  # a DataLoader with worker processes calls iter() twice: no batch drawn, no pass begun
    assert s.epoch == 0 and next(iter(s)) == fresh_epoch(0)[0]
    assert list(s) == fresh_epoch(1), "the peek began epoch 0: the next pass is epoch 1"
    assert s.epoch == 2 and len(s) == s.n_batches


def test_a_state_taken_during_a_pass_names_that_pass():
    s = EpochBatchSampler(30, 4, seed=7)
    list(s)
    batches = iter(s)
    next(batches)
    state = s.state_dict()
    assert (state["epoch"], state["start_iter"]) == (1, 0)
    list(batches)
    assert (s.state_dict()["epoch"], s.state_dict()["start_iter"]) == (2, 0), "after its end, the next pass"


def test_a_plain_dataloader_loop_sees_a_new_order_each_epoch():
    dls = DataLoaders.from_tensors(*make_rings(200), bs=50, valid_pct=0.0, seed=3)
    orders = [torch.cat([yb for _, yb in dls.train]) for _ in range(3)]
    assert not torch.equal(orders[0], orders[1]) and not torch.equal(orders[1], orders[2])


# ---- order() is the one override point ------------------------------------------------------------------

class Interleaved(EpochBatchSampler):
    "Another permutation for `self.epoch` (evens then odds, rotated by the epoch); everything else inherited."
    def order(self):
        base = torch.cat([torch.arange(0, self.n, 2), torch.arange(1, self.n, 2)])
        return base.roll(self.epoch % self.n)


@settings(max_examples=60, deadline=None)
@given(n=sizes, bs=st.integers(1, 32), epoch=st.integers(0, 50), data=st.data())
def test_a_subclass_overriding_order_inherits_passes_resume_and_state(n, bs, epoch, data):
    def batches_of(e):
        told = Interleaved(n, bs)
        told.set_epoch(e)
        return [b.tolist() for b in told.order().split(bs)]

    s = Interleaved(n, bs)
    s.set_epoch(epoch)
    whole = list(s)
    assert whole == batches_of(epoch) and sorted(i for b in whole for i in b) == list(range(n))
    assert list(s) == batches_of(epoch + 1), "each pass is the next epoch, in the subclass's order"
    k = data.draw(st.integers(0, len(whole)))
    s.set_epoch(epoch)
    s.set_start_iter(k)
    resumed = Interleaved(n, bs)
    resumed.load_state_dict(s.state_dict())
    assert list(resumed) == whole[k:]
    with pytest.raises(ValueError, match="type="):
        EpochBatchSampler(n, bs).load_state_dict(s.state_dict())


def test_epoch_order_alone_is_the_order_and_the_position():
    o = EpochOrder(10, 4, seed=3)
    o.set_epoch(5)
    o.set_start_iter(1)
    s = EpochBatchSampler(10, 4, seed=3)
    s.load_state_dict({**o.state_dict(), "type": "EpochBatchSampler"})
    assert torch.equal(s.order(), o.order()) and list(s) == [b.tolist() for b in o.order().split(4)][1:]


def test_a_validation_set_leaves_training_bit_identical():
    "from_tensors' validation loader draws from its own generator: a Learner with dropout trains the same without it."
    from torch import nn
    from looplab.data import set_seed
    from looplab.learner import Learner

    def train(with_valid: bool) -> list:
        dls = DataLoaders.from_tensors(*load_digits(), bs=64, seed=1)
        if not with_valid:
            dls.valid = None
        set_seed(0)
        model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10))
        learn = Learner(model, dls, lr=0.1, progress=False)
        learn.fit(3)
        if with_valid:
            learn.validate()  # and a pass in between, outside fit
            learn.fit(4)
        else:
            learn.fit(4)
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(train(True), train(False)))
