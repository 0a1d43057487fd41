"""Property tests for looplab.samplers, looplab.sampler_chain, looplab.resume and looplab.permutation: the Feistel
permutation is a bijection, every wrapper gives the order its naive definition gives (with the default order and
with the Feistel one), and a state taken at any point resumes to the run that never stopped (epochwise and VISSL's
sampler too)."""
import itertools
import json
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler

from looplab.data import EpochBatchSampler
from looplab.permutation import FeistelPermutation
from looplab.resume import EpochwiseBatchSampler, StatefulDistributedSampler, make_epochwise_batch_sampler
from looplab.sampler_chain import (DistributedBatchSampler, DistributedSampler, RepeatBatchSampler, RepeatSampler,
                                   SeekableBatchSampler, SkipBatchSampler, SkipSampler, make_batch_sampler)
from looplab.samplers import ReproducibleShuffleBatchSampler, ReproducibleShuffleSampler, ShuffledOrder

FAST = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**64 - 1)
permutations = st.sampled_from([ShuffledOrder, FeistelPermutation])  # the default order, and notebook 11c's


class IterOnly(Sampler):
    "A user sampler that can only be iterated; it records the epochs it is told."
    def __init__(self, items):
        self.items = list(items)
        self.epochs = []

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def take(sampler, count):
    return list(itertools.islice(iter(sampler), count))


def order(n, seed, epoch=0, permutation=ShuffledOrder):
    "The order of epoch `epoch`, computed directly from the permutation (by default, notebook 01's shuffled_order)."
    return permutation(n, seed, epoch).take(np.arange(n)).tolist()


def stream(n, seed, length, permutation=ShuffledOrder):
    "The shuffled, repeated global stream, computed naively from the permutation."
    perms = {}
    out = []
    for position in range(length):
        epoch, offset = divmod(position, n)
        if epoch not in perms:
            perms[epoch] = order(n, seed, epoch, permutation) if seed is not None else list(range(n))
        out.append(perms[epoch][offset])
    return out


def assert_plain(state):
    "A state is made of dicts, strings and ints only (no floats, no bools, no numpy scalars)."
    assert isinstance(state, dict)
    for key, value in state.items():
        assert isinstance(key, str)
        if isinstance(value, dict):
            assert_plain(value)
        else:
            assert type(value) in (int, str), (key, value, type(value))
    assert json.loads(json.dumps(state)) == state


# ---- the permutation ------------------------------------------------------------------------------------

def test_bijection_every_size_up_to_2000():
    for n in range(2001):
        items = FeistelPermutation(n, seed=n * 7919, epoch=n % 5).take(np.arange(n))
        assert np.array_equal(np.sort(items), np.arange(n)), n


@pytest.mark.parametrize("k", range(1, 21))
def test_bijection_edge_sizes(k):
    for n in (2**k - 1, 2**k, 2**k + 1):
        perm = FeistelPermutation(n, seed=k, epoch=1)
        items = perm.take(np.arange(n))
        assert np.array_equal(np.sort(items), np.arange(n)), n
        assert np.array_equal(perm.take_inverse(items), np.arange(n)), n


@FAST
@given(n=st.integers(1, 2**62), seed=seeds, epoch=st.integers(0, 10**6), data=st.data())
def test_inverse_on_random_positions_up_to_2_62(n, seed, epoch, data):
    perm = FeistelPermutation(n, seed, epoch)
    positions = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50)), dtype=np.int64)
    items = perm.take(positions)
    assert ((0 <= items) & (items < n)).all()
    assert np.array_equal(perm.take_inverse(items), positions)
    assert items.tolist() == [perm[int(p)] for p in positions], "the scalar and the vectorised paths agree"
    assert [perm.inverse(int(i)) for i in items] == positions.tolist()


@FAST
@given(n=st.integers(1, 3000), seed=seeds, epoch=st.integers(0, 2**64 - 1))
def test_a_pure_function_of_seed_and_epoch(n, seed, epoch):
    np.random.seed(1)
    torch.manual_seed(1)
    first = FeistelPermutation(n, seed, epoch).take(np.arange(n))
    np.random.seed(2)
    torch.manual_seed(2)
    assert np.array_equal(FeistelPermutation(n, seed, epoch).take(np.arange(n)), first)


def test_epochs_and_seeds_give_different_orders():
    orders = {tuple(FeistelPermutation(1000, seed, epoch)) for seed in range(5) for epoch in range(5)}
    assert len(orders) == 25


def test_permutation_bad_input():
    with pytest.raises(TypeError, match="seed must be an int"):
        FeistelPermutation(10, seed=1.0)
    with pytest.raises(TypeError, match="seed must be an int"):
        FeistelPermutation(10, seed=None)
    with pytest.raises(ValueError, match="seed must be an int in"):
        FeistelPermutation(10, seed=-1)
    with pytest.raises(ValueError, match="n must be an int in"):
        FeistelPermutation(2**63 + 1, seed=0)
    with pytest.raises(IndexError, match=r"position must be in \[0, 10\)"):
        FeistelPermutation(10, seed=0)[10]
    with pytest.raises(IndexError):
        FeistelPermutation(10, seed=0).take([0, 10])
    with pytest.raises(TypeError, match="integers"):
        FeistelPermutation(10, seed=0).take([0.5])
    assert list(FeistelPermutation(0, seed=0)) == []


# ---- each wrapper against its naive definition, seekable or not, resumed at every position -----------

def resume_everywhere(build, expected):
    "For every k, a state taken after k elements, loaded into a fresh sampler, gives the rest."
    assert take(build(), len(expected)) == expected
    for k in range(len(expected) + 1):
        sampler = build()
        head = take(sampler, k)
        state = sampler.state_dict()
        assert_plain(state)
        fresh = build()
        fresh.load_state_dict(json.loads(json.dumps(state)))
        if not fresh.infinite:
            remaining = fresh.remaining if isinstance(fresh, SkipSampler) else len(fresh)
            assert remaining == len(expected) - k, "len() is what the next pass yields (a skip: its remaining)"
        assert head + take(fresh, len(expected) - k) == expected, k


@FAST
@given(n=st.integers(1, 30), seed=st.integers(0, 2**64 - 1), seekable=st.booleans(), permutation=permutations)
def test_shuffle(n, seed, seekable, permutation):
    source = range(n) if seekable else IterOnly(range(n))
    expected = order(n, seed, 0, permutation)
    resume_everywhere(lambda: ReproducibleShuffleSampler(source, seed, permutation), expected)
    sampler = ReproducibleShuffleSampler(source, seed, permutation)
    assert [list(sampler) for _ in range(3)] == [order(n, seed, e, permutation) for e in range(3)]
    sampler.set_epoch(7)
    assert list(sampler) == order(n, seed, 7, permutation)
    assert sampler.epoch == 8


@FAST
@given(n=st.integers(1, 25), size=st.integers(1, 6), seed=seeds, seekable=st.booleans())
def test_shuffle_batches(n, size, seed, seekable):
    batches = list(BatchSampler(range(n), size, False))
    source = SeekableBatchSampler(range(n), size) if seekable else BatchSampler(range(n), size, False)
    expected = [batches[i] for i in order(len(batches), seed)]
    resume_everywhere(lambda: ReproducibleShuffleBatchSampler(source, seed), expected)


@FAST
@given(n=st.integers(1, 12), seed=st.one_of(st.none(), seeds), seekable=st.booleans())
def test_repeat(n, seed, seekable):
    source = range(n) if seekable else IterOnly(range(n))
    def build():
        return RepeatSampler(source if seed is None else ReproducibleShuffleSampler(source, seed))

    expected = stream(n, seed, 4 * n + 3)
    resume_everywhere(build, expected)
    assert len(build()) == n


def test_repeat_tells_a_user_sampler_its_epoch_and_checks_its_length():
    user = IterOnly(range(3))
    assert take(RepeatSampler(user), 7) == [0, 1, 2, 0, 1, 2, 0]
    assert user.epochs == [0, 1, 2]

    class Liar(IterOnly):
        def __len__(self):
            return 4

    with pytest.raises(RuntimeError, match="yielded 3 elements in epoch 0, but its len"):
        take(RepeatSampler(Liar(range(3))), 10)


@FAST
@given(n=st.integers(1, 10), size=st.integers(1, 4), seed=seeds)
def test_repeat_batches_walks_the_epochs_of_the_shuffle_inside(n, size, seed):
    batch_sampler = SeekableBatchSampler(ReproducibleShuffleSampler(range(n), seed), size)
    per_epoch = len(batch_sampler)
    expected = []
    for epoch in range(3):
        epoch_order = order(n, seed, epoch)
        expected += [epoch_order[i:i + size] for i in range(0, n, size)]
    resume_everywhere(lambda: RepeatBatchSampler(batch_sampler), expected)
    assert len(RepeatBatchSampler(batch_sampler)) == per_epoch


@FAST
@given(n=st.integers(0, 30), workers=st.integers(1, 5), data=st.data(), seekable=st.booleans())
def test_shard(n, workers, data, seekable):
    rank = data.draw(st.integers(0, workers - 1))
    source = range(n) if seekable else IterOnly(range(n))
    expected = list(range(n))[rank::workers]
    assert len(DistributedSampler(source, workers, rank)) == len(expected), "len() is exact per rank"
    resume_everywhere(lambda: DistributedSampler(source, workers, rank), expected)
    shards = [list(DistributedSampler(source, workers, r)) for r in range(workers)]
    assert sorted(sum(shards, [])) == list(range(n))


@FAST
@given(n=st.integers(0, 20), workers=st.integers(1, 4), data=st.data())
def test_shard_batches(n, workers, data):
    rank = data.draw(st.integers(0, workers - 1))
    batches = [[i] for i in range(n)]
    expected = batches[rank::workers]
    resume_everywhere(lambda: DistributedBatchSampler(batches, workers, rank), expected)
    assert len(DistributedBatchSampler(batches, workers, rank)) == len(expected)


@FAST
@given(n=st.integers(0, 30), size=st.integers(1, 7), drop_last=st.booleans(), seekable=st.booleans())
def test_batch(n, size, drop_last, seekable):
    source = range(n) if seekable else IterOnly(range(n))
    expected = list(BatchSampler(range(n), size, drop_last))
    assert len(SeekableBatchSampler(source, size, drop_last)) == len(expected)
    resume_everywhere(lambda: SeekableBatchSampler(source, size, drop_last), expected)


@FAST
@given(n=st.integers(0, 30), data=st.data(), seekable=st.booleans())
def test_skip(n, data, seekable):
    skip = data.draw(st.integers(0, n))
    source = range(n) if seekable else IterOnly(range(n))
    resume_everywhere(lambda: SkipSampler(source, skip), list(range(skip, n)))
    assert len(SkipSampler(source, skip)) == n, "Determined's rule: the underlying length, whatever the skip"
    assert SkipSampler(source, skip).remaining == n - skip
    batches = [[i, i] for i in range(n)]
    resume_everywhere(lambda: SkipBatchSampler(batches, skip), batches[skip:])


def test_skip_a_billion_items_jumps_there():
    n = 10**9
    chain = SkipSampler(RepeatSampler(ReproducibleShuffleSampler(range(n), seed=5, permutation=FeistelPermutation)),
                        3 * n - 1)
    assert chain.seekable
    assert take(chain, 2) == [FeistelPermutation(n, 5, 2)[n - 1], FeistelPermutation(n, 5, 3)[0]]


def test_each_pass_of_a_finite_sampler_starts_from_the_beginning_of_the_next_epoch():
    sampler = SkipSampler(ReproducibleShuffleSampler(range(10), 0), 2)
    first = list(sampler)
    assert first == order(10, 0, 0)[2:]
    state_at_end = sampler.state_dict()
    second = list(sampler)
    assert second == order(10, 0, 1)[2:] and len(sampler) == 10 and sampler.remaining == 8
    sampler.load_state_dict(state_at_end)
    assert sampler.remaining == 8 and list(sampler) == second, "a state taken after a pass is the next pass"
    batches = iter(sampler)
    rest = [next(batches) for _ in range(8)]
    at_last_item = sampler.state_dict()
    sampler.load_state_dict(at_last_item)
    assert sampler.remaining == 0 and list(sampler) == [], "taken at its last item, the pass is all consumed"
    assert rest == order(10, 0, 2)[2:] and list(sampler) == order(10, 0, 3)[2:]


def test_set_epoch_keeps_a_resume_position_only_for_the_same_epoch():
    sampler = ReproducibleShuffleSampler(range(10), 0)
    sampler.set_epoch(2)
    head = take(sampler, 3)
    state = sampler.state_dict()
    resumed = ReproducibleShuffleSampler(range(10), 0)
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    resumed.set_epoch(2)
    assert head + list(resumed) == order(10, 0, 2)
    resumed.load_state_dict(state)
    resumed.set_epoch(4)
    assert list(resumed) == order(10, 0, 4)


# ---- the chains of make_batch_sampler -------------------------------------------------------------------

def training_reference(n, seed, workers, rank, size, skip, steps, permutation=ShuffledOrder):
    "Rank `rank`'s batches: positions rank + workers*j of the global stream, in batches, after `skip` of them."
    global_items = stream(n, seed, workers * size * (skip + steps), permutation)
    mine = global_items[rank::workers]
    batches = [mine[i:i + size] for i in range(0, len(mine), size)]
    return batches[skip:skip + steps]


chain_args = dict(n=st.integers(1, 25), seed=st.one_of(st.none(), seeds), workers=st.integers(1, 4),
                  size=st.integers(1, 5), skip=st.integers(0, 12), data=st.data())


@FAST
@given(**chain_args, permutation=permutations)
def test_training_chain_order(n, seed, workers, size, skip, data, permutation):
    rank = data.draw(st.integers(0, workers - 1))
    chain = make_batch_sampler(range(n), "training", seed, workers, rank, size, skip, permutation=permutation)
    assert take(chain, 9) == training_reference(n, seed, workers, rank, size, skip, 9, permutation)
    assert len(chain) == -(-(-(-n // workers)) // size), "one pass per rank, the same on every rank"
    lookalike = make_batch_sampler(IterOnly(range(n)), "training", seed, workers, rank, size, skip,
                                   permutation=permutation)
    lookalike_batches = take(lookalike, 18)
    assert lookalike_batches == training_reference(n, seed, workers, rank, size, skip, 18, permutation), \
        "a sampler that cannot seek gives the same batches"
    assert take(chain, 9) == lookalike_batches[9:], "a second pass of an endless stream goes on where it was"


@FAST
@given(**chain_args, seekable=st.booleans())
def test_training_chain_resumes_at_any_batch(n, seed, workers, size, skip, data, seekable):
    source = range(n) if seekable else IterOnly(range(n))
    paused_at = data.draw(st.integers(0, 10))
    saving_rank = data.draw(st.integers(0, workers - 1))
    never_stopped = [take(make_batch_sampler(source, "training", seed, workers, r, size, skip), 12)
                     for r in range(workers)]
    saver = make_batch_sampler(source, "training", seed, workers, saving_rank, size, skip)
    take(saver, paused_at)
    state = json.loads(json.dumps(saver.state_dict()))
    assert_plain(state)
    for rank in range(workers):
        resumed = make_batch_sampler(source, "training", seed, workers, rank, size)
        resumed.load_state_dict(state)
        assert take(resumed, 12 - paused_at) == never_stopped[rank][paused_at:]


@FAST
@given(n=st.integers(1, 25), seed=st.one_of(st.none(), seeds), workers=st.integers(1, 4), size=st.integers(1, 5),
       new_workers=st.integers(1, 5), new_size=st.integers(1, 5), data=st.data(), seekable=st.booleans())
def test_elastic_resume_continues_the_global_stream(n, seed, workers, size, new_workers, new_size, data, seekable):
    source = range(n) if seekable else IterOnly(range(n))
    steps = data.draw(st.integers(0, 6))
    saving_rank = data.draw(st.integers(0, workers - 1))
    saver = make_batch_sampler(source, "training", seed, workers, saving_rank, size)
    take(saver, steps)
    consumed = steps * size * workers
    chains = [make_batch_sampler(source, "training", seed, new_workers, r, new_size) for r in range(new_workers)]
    for chain in chains:
        chain.load_state_dict(saver.state_dict())
    after = [take(chain, 4) for chain in chains]
    global_items = stream(n, seed, consumed + 4 * new_size * new_workers)
    for step in range(4):
        start = consumed + step * new_size * new_workers
        got = sorted(sum((after[r][step] for r in range(new_workers)), []))
        assert got == sorted(global_items[start:start + new_size * new_workers]), step


@FAST
@given(n=st.integers(1, 30), workers=st.integers(1, 4), size=st.integers(1, 6), seed=st.one_of(st.none(), seeds),
       data=st.data())
def test_validation_chain(n, workers, size, seed, data):
    rank = data.draw(st.integers(0, workers - 1))
    chain = make_batch_sampler(range(n), "validation", seed, workers, rank, size)
    mine = list(range(n))[rank::workers]
    expected = [mine[i:i + size] for i in range(0, len(mine), size)]
    assert list(chain) == list(chain) == expected, "never shuffled, repeated or skipped; only sharded"
    assert len(chain) == len(expected)
    resume_everywhere(lambda: make_batch_sampler(range(n), "validation", seed, workers, rank, size), expected)


def test_a_dataset_uses_its_indices_and_plugs_into_a_dataloader():
    data = torch.arange(100.0) * 10
    dataset = torch.utils.data.TensorDataset(data)
    chain = make_batch_sampler(dataset, "training", 3, 2, 1, 8)
    loader = DataLoader(dataset, batch_sampler=chain)
    batches = [xb for (xb,) in itertools.islice(loader, 30)]
    indices = take(make_batch_sampler(SequentialSampler(dataset), "training", 3, 2, 1, 8), 30)
    assert all(torch.equal(xb, data[idx]) for xb, idx in zip(batches, indices))
    state = chain.state_dict()
    resumed = make_batch_sampler(range(100), "training", 3, 2, 1, 8)
    resumed.load_state_dict(state)
    assert take(resumed, 1) == take(make_batch_sampler(dataset, "training", 3, 2, 1, 8, skip=30), 1)


# ---- epoch by epoch -------------------------------------------------------------------------------------

def epoch_loop(sampler, epochs, stop_after=None, call_set_epoch=True):
    seen = []
    for epoch in epochs:
        if call_set_epoch:
            sampler.set_epoch(epoch)
        for i, batch in enumerate(sampler):
            seen.append((epoch, batch))
            if (epoch, i) == stop_after:
                return seen, sampler.state_dict()
    return seen, None


@FAST
@given(n=st.integers(1, 20), seed=st.one_of(st.none(), seeds), workers=st.integers(1, 3), size=st.integers(1, 5),
       drop_last=st.booleans(), call_set_epoch=st.booleans(), data=st.data())
def test_epochwise_resumes_at_any_batch(n, seed, workers, size, drop_last, call_set_epoch, data):
    rank = data.draw(st.integers(0, workers - 1))

    def build():
        return make_epochwise_batch_sampler(range(n), seed, workers, rank, size, drop_last)

    never_stopped, _ = epoch_loop(build(), range(3), call_set_epoch=call_set_epoch)
    mine = list(range(n))[rank::workers]
    per_epoch = len(mine) // size if drop_last else -(-len(mine) // size)
    assert len(build()) == per_epoch and len(never_stopped) == 3 * per_epoch
    if per_epoch == 0:
        return
    stop_after = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, per_epoch - 1)))
    before, state = epoch_loop(build(), range(3), stop_after, call_set_epoch)
    resumed = build()
    resumed.load_state_dict(state)
    assert len(resumed) == per_epoch - stop_after[1] - 1
    after, _ = epoch_loop(resumed, range(stop_after[0], 3), call_set_epoch=call_set_epoch)
    assert before + after == never_stopped
    by_start_iter = build()
    by_start_iter.set_epoch(stop_after[0])
    by_start_iter.set_start_iter(stop_after[1] + 1)
    assert by_start_iter.start_iter == stop_after[1] + 1
    same_epoch = [b for e, b in never_stopped if e == stop_after[0]]
    assert list(by_start_iter) == same_epoch[stop_after[1] + 1:]


def test_epochwise_elastic_and_errors():
    two = [make_epochwise_batch_sampler(range(30), 1, 2, r, 3) for r in range(2)]
    heads = [take(s, 2) for s in two]
    three = [make_epochwise_batch_sampler(range(30), 1, 3, r, 2) for r in range(3)]
    for s in three:
        s.load_state_dict(two[0].state_dict())
    seen = [item for head in heads for batch in head for item in batch]
    rest = [item for sampler in three for batch in sampler for item in batch]
    assert sorted(seen + rest) == list(range(30)), "the epoch is finished by the new ranks, nothing twice"
    with pytest.raises(ValueError, match="start_iter=6 is past the end"):
        make_epochwise_batch_sampler(range(30), 1, 2, 0, 3).set_start_iter(6)
    with pytest.raises(ValueError, match="finite batch sampler"):
        EpochwiseBatchSampler(RepeatBatchSampler([[0]]))


# ---- VISSL's sampler ------------------------------------------------------------------------------------

@FAST
@given(n=st.integers(1, 40), replicas=st.integers(1, 5), size=st.integers(1, 6), seed=seeds, epoch=st.integers(0, 9),
       drop_last=st.booleans(), shuffle=st.booleans(), data=st.data())
def test_stateful_distributed_sampler(n, replicas, size, seed, epoch, drop_last, shuffle, data):
    if drop_last and n < replicas:
        with pytest.raises(ValueError, match="leaves every rank with nothing"):
            StatefulDistributedSampler(range(n), size, seed, replicas, 0, drop_last, shuffle)
        return
    per_rank = n // replicas if drop_last else -(-n // replicas)
    parts = []
    for rank in range(replicas):
        sampler = StatefulDistributedSampler(range(n), size, seed, replicas, rank, drop_last, shuffle)
        sampler.set_epoch(epoch)
        part = list(sampler)
        block = [i % n for i in range(rank * per_rank, (rank + 1) * per_rank)]
        assert sorted(part) == sorted(block), "each rank shuffles only its own contiguous part"
        if not shuffle:
            assert part == block
        parts += part
    padded = [i % n for i in range(per_rank * replicas)]
    assert sorted(parts) == sorted(padded), "no item lost unless drop_last; the padding reuses the first items"
    rank = data.draw(st.integers(0, replicas - 1))
    start_iter = data.draw(st.integers(0, -(-per_rank // size)))
    sampler = StatefulDistributedSampler(range(n), size, seed, replicas, rank, drop_last, shuffle)
    sampler.set_epoch(epoch)
    whole = list(sampler)
    assert sampler.epoch == epoch + 1, "a pass that ran to its end moved the sampler on"
    sampler.set_epoch(epoch)
    sampler.set_start_iter(start_iter)
    assert len(sampler) == max(0, per_rank - start_iter * size)
    tail = take(sampler, 10**6)
    assert tail == whole[start_iter * size:]
    sampler.set_epoch(epoch)
    assert list(sampler) == whole, "start_iter is used once"

    def build():
        sampler = StatefulDistributedSampler(range(n), size, seed, replicas, rank, drop_last, shuffle)
        sampler.set_epoch(epoch)
        return sampler

    resume_everywhere(build, whole)


def test_stateful_distributed_sampler_errors():
    sampler = StatefulDistributedSampler(range(10), 3, num_replicas=2, rank=1)
    with pytest.raises(ValueError, match=r"start_iter=3 is past the end of the epoch: rank 1 has 5 items, 2 batches"):
        sampler.set_start_iter(3)
    with pytest.raises(ValueError, match="empty dataset"):
        StatefulDistributedSampler([], 3)
    with pytest.raises(ValueError, match=r"rank \(of num_replicas=2\) must be an int in \[0, 1\]"):
        StatefulDistributedSampler(range(10), 3, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas=2 but this StatefulDistributedSampler has num_replicas=3"):
        StatefulDistributedSampler(range(10), 3, num_replicas=3, rank=1).load_state_dict(sampler.state_dict())
    with pytest.raises(TypeError, match="seed must be an int"):
        StatefulDistributedSampler(range(10), 3, seed="0")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        StatefulDistributedSampler(range(10), 0)
    assert len(StatefulDistributedSampler(range(10), 3)) == 10, "without a process group: one replica"


# ---- Determined's sampler tests, as a Determined user runs them -----------------------------------------
# Our own tests of the behaviour Determined's suite checks for determined.pytorch.samplers; only the exact orders
# differ (Determined pins numpy RandomState shuffles, ours is notebook 01's shuffled_order by default).

def test_determined_skip_sampler_reports_the_underlying_length():
    skip_sampler = SkipSampler(SequentialSampler(range(15)), 2)
    assert len(skip_sampler) == 15 and skip_sampler.remaining == 13
    assert list(skip_sampler) == list(range(2, 15))


def test_determined_skip_batch_sampler_reports_the_underlying_length():
    batch_sampler = BatchSampler(SequentialSampler(range(15)), batch_size=2, drop_last=False)
    skip_batch_sampler = SkipBatchSampler(batch_sampler, 2)
    assert len(skip_batch_sampler) == 8 and skip_batch_sampler.remaining == 6
    assert list(skip_batch_sampler) == list(batch_sampler)[2:]


def test_determined_repeat_samplers():
    repeat_sampler = RepeatSampler(SequentialSampler(range(10)))
    assert len(repeat_sampler) == 10
    assert take(repeat_sampler, 30) == list(range(10)) * 3
    batch_sampler = BatchSampler(SequentialSampler(range(10)), 3, False)
    repeat_batch_sampler = RepeatBatchSampler(batch_sampler)
    assert len(repeat_batch_sampler) == 4
    assert take(repeat_batch_sampler, 12) == list(batch_sampler) * 3


def test_determined_distributed_samplers():
    expected = [[0, 4, 8, 12, 16], [1, 5, 9, 13, 17], [2, 6, 10, 14, 18], [3, 7, 11, 15]]
    for rank in range(4):
        dist_sampler = DistributedSampler(SequentialSampler(range(19)), 4, rank)
        assert list(dist_sampler) == expected[rank] and len(dist_sampler) == len(expected[rank])
    batches = BatchSampler(SequentialSampler(range(19)), batch_size=2, drop_last=False)
    expected = [[[0, 1], [8, 9], [16, 17]], [[2, 3], [10, 11], [18]], [[4, 5], [12, 13]], [[6, 7], [14, 15]]]
    for rank in range(4):
        dist_sampler = DistributedBatchSampler(batches, 4, rank)
        assert list(dist_sampler) == expected[rank] and len(dist_sampler) == len(expected[rank])


def test_determined_shuffle_sampler_gives_a_new_seeded_order_on_every_pass():
    sampler = ReproducibleShuffleSampler(SequentialSampler(range(5)), 777)
    first, second = list(sampler), list(sampler)
    assert first != second and sorted(first) == sorted(second) == list(range(5))
    assert first == order(5, 777, 0) and second == order(5, 777, 1)


def test_determined_shuffle_sampler_wraps_a_batch_sampler_and_shuffles_whole_batches():
    batch_sampler = BatchSampler(SequentialSampler(range(10)), batch_size=2, drop_last=False)
    shuffle_batch_sampler = ReproducibleShuffleSampler(batch_sampler, 777)
    batches = list(batch_sampler)
    first, second = list(shuffle_batch_sampler), list(shuffle_batch_sampler)
    assert first == [batches[i] for i in order(5, 777, 0)]
    assert second == [batches[i] for i in order(5, 777, 1)]
    assert len(shuffle_batch_sampler) == 5
    for source in (SeekableBatchSampler(range(10), 2), batches):
        assert list(ReproducibleShuffleSampler(source, 777)) == first, type(source).__name__
    assert list(ReproducibleShuffleBatchSampler(batch_sampler, 777)) == first


# ---- a new order on each pass -------------------------------------------------------------------------------

SHUFFLERS = {
    "items": lambda: ReproducibleShuffleSampler(range(40), 5),
    "items, iterable only": lambda: ReproducibleShuffleSampler(IterOnly(range(40)), 5),
    "a torch BatchSampler, batches whole": lambda: ReproducibleShuffleSampler(BatchSampler(range(40), 3, False), 5),
    "ReproducibleShuffleBatchSampler": lambda: ReproducibleShuffleBatchSampler(SeekableBatchSampler(range(40), 3), 5),
    "shuffle, shard, batch": lambda: SeekableBatchSampler(DistributedSampler(ReproducibleShuffleSampler(range(40), 5),
                                                                             2, 1), 3),
    "epochwise": lambda: make_epochwise_batch_sampler(range(40), 5, 2, 1, 3),
    "VISSL": lambda: StatefulDistributedSampler(range(40), 3, seed=5, num_replicas=2, rank=1),
    "EpochBatchSampler": lambda: EpochBatchSampler(40, 3, seed=5),
}


@pytest.mark.parametrize("name", [*SHUFFLERS, "torch's BatchSampler around ours"])
def test_three_passes_three_orders_and_a_fresh_sampler_replays_them(name):
    build = SHUFFLERS.get(name, lambda: BatchSampler(ReproducibleShuffleSampler(range(40), 5), 3, False))
    sampler = build()
    passes = [list(sampler) for _ in range(3)]
    assert len({repr(p) for p in passes}) == 3, "three passes, three orders"
    fresh = build()
    assert [list(fresh) for _ in range(3)] == passes, "deterministic in (seed, pass)"
    told = build()
    for epoch in reversed(range(3)):
        if hasattr(told, "set_epoch"):
            told.set_epoch(epoch)  # torch's convention, in any order: pass k is epoch k
            assert list(told) == passes[epoch]


@FAST
@given(name=st.sampled_from(sorted(set(SHUFFLERS) - {"EpochBatchSampler"})), passes=st.integers(0, 3),
       data=st.data())
def test_the_pass_counter_is_in_the_state_and_resumes_exactly(name, passes, data):
    never_stopped = SHUFFLERS[name]()
    expected = [list(never_stopped) for _ in range(passes + 2)]
    sampler = SHUFFLERS[name]()
    for _ in range(passes):
        list(sampler)
    k = data.draw(st.integers(0, len(expected[passes])))
    head = take(sampler, k)
    state = json.loads(json.dumps(sampler.state_dict()))
    assert_plain(state)
    resumed = SHUFFLERS[name]()
    resumed.load_state_dict(state)
    assert head + list(resumed) == expected[passes]
    assert list(resumed) == expected[passes + 1], "after the resumed pass, the next epoch"


def test_a_pass_begins_at_its_first_element_and_an_unfinished_pass_counts():
    sampler = ReproducibleShuffleSampler(range(10), 3)
    iter(sampler)
    iter(sampler)  # a DataLoader with worker processes calls iter() twice before the first batch
    assert sampler.epoch == 0 and next(iter(sampler)) == order(10, 3, 0)[0]
    assert list(sampler) == order(10, 3, 1), "the peek began epoch 0: this pass is epoch 1"


def test_an_iterator_replaced_by_a_newer_pass_refuses_to_go_on():
    sampler = ReproducibleShuffleSampler(range(10), 3)
    old = iter(sampler)
    next(old)
    new = iter(sampler)
    next(new)
    with pytest.raises(RuntimeError, match="replaced by a newer pass"):
        next(old)
    sampler.set_epoch(5)
    with pytest.raises(RuntimeError, match="a sampler serves one pass at a time"):
        next(new)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_plain_dataloader_epoch_loop_gets_a_new_order_each_epoch(num_workers):
    loader = DataLoader(torch.arange(20), batch_size=5, sampler=ReproducibleShuffleSampler(range(20), 0),
                        num_workers=num_workers)
    orders = [torch.cat(list(loader)).tolist() for _ in range(2)]
    assert orders == [order(20, 0, epoch) for epoch in range(2)]


def test_a_new_pass_of_an_endless_stream_goes_on_where_the_last_one_left_it():
    chain = make_batch_sampler(range(10), "training", 0, 2, 1, 3, skip=2)
    first = take(chain, 4)
    second = take(chain, 4)
    assert first + second == take(make_batch_sampler(range(10), "training", 0, 2, 1, 3, skip=2), 8)


# ---- lengths: one rule ------------------------------------------------------------------------------------

def test_len_is_the_next_pass_except_for_a_skip_which_is_the_epoch():
    epochwise = make_epochwise_batch_sampler(range(20), 0, 1, 0, 3)
    epochwise.set_start_iter(5)
    assert len(epochwise) == 2, "after set_start_iter: what the next pass yields"
    batches = iter(epochwise)
    next(batches)
    assert len(epochwise) == 7, "once the resumed pass is under way, the next pass is a whole epoch"
    vissl = StatefulDistributedSampler(range(20), 3, num_replicas=2, rank=0)
    vissl.set_start_iter(2)
    assert len(vissl) == 4
    skip = make_batch_sampler(range(20), "training", 0, 1, 0, 3, skip=5)
    assert len(skip) == 7 and skip.remaining is None, "after an endless repeat, only the epoch's length means anything"


def test_skip_past_the_end_of_an_epoch():
    with pytest.raises(ValueError, match="skip=16 is past the end of a sampler of length 15: skip at most 15"):
        SkipSampler(range(15), 16)
    at_the_end = SkipSampler(range(15), 15)
    assert len(at_the_end) == 15 and at_the_end.remaining == 0 and list(at_the_end) == []
    endless = SkipSampler(RepeatSampler(ReproducibleShuffleSampler(range(10), 4)), 25)
    assert len(endless) == 10 and endless.remaining is None
    assert take(endless, 10) == stream(10, 4, 35)[25:], "past an epoch of an endless stream: into a later one"


EVENTS_PER_BATCH = ("on_batch_begin", "on_batch_end")


def fit_recording_epoch_len(order, n_epochs: int, resume_at: tuple = (0, 0), stop_at: tuple | None = None):
    """A Learner's resume protocol without a Learner: each epoch set_epoch, then set_start_iter; the epoch length by
    the documented rule (start_iter + len() before the pass), recorded at every event with its epoch and batch."""
    record = []
    for epoch in range(resume_at[0], n_epochs):
        order.set_epoch(epoch)
        order.set_start_iter(resume_at[1] if epoch == resume_at[0] else 0)
        epoch_len = order.start_iter + len(order)
        record.append(("on_epoch_begin", epoch, None, epoch_len, len(order)))
        for i, _ in enumerate(order, start=order.start_iter):
            for event in EVENTS_PER_BATCH:
                record.append((event, epoch, i, epoch_len))
            if (epoch, i) == stop_at:
                return record, order.state_dict()
        record.append(("on_epoch_end", epoch, None, epoch_len))
    return record, None


@pytest.mark.parametrize("build", [lambda: EpochBatchSampler(23, 4, seed=1),
                                   lambda: make_epochwise_batch_sampler(range(23), 1, 1, 0, 4)])
def test_a_mid_epoch_resume_records_the_same_epoch_length_at_every_event(build):
    never_stopped, _ = fit_recording_epoch_len(build(), 3)
    _, state = fit_recording_epoch_len(build(), 3, stop_at=(1, 2))
    resumed = build()
    resumed.load_state_dict(state)
    after, _ = fit_recording_epoch_len(resumed, 3, resume_at=(1, 3))
    same_point = [r for r in never_stopped if r[1] > 1 or (r[1] == 1 and (r[2] is None or r[2] >= 3))]
    assert [r[:4] for r in after] == [r[:4] for r in same_point]
    assert {r[3] for r in after} == {6}
    assert after[0][4] == 3 and same_point[0][4] == 6, "len() at a resumed on_epoch_begin is the remainder"


# ---- bad input ------------------------------------------------------------------------------------------

BAD = [
    (lambda: DistributedSampler(range(10), 0, 0), ValueError, "num_replicas must be an int >= 1, got 0"),
    (lambda: DistributedSampler(range(10), num_workers=0, rank=0), ValueError, r"num_workers \(the number of ranks\) must be an int >= 1"),
    (lambda: DistributedSampler(range(10), 3, 0, num_workers=2), ValueError, "two names of the number of ranks; pass num_replicas only"),
    (lambda: DistributedSampler(range(10)), TypeError, "needs num_replicas"),
    (lambda: DistributedSampler(range(10), 2), TypeError, "needs rank"),
    (lambda: ReproducibleShuffleSampler(range(10), 0, permutation="feistel"), TypeError, "permutation must be called as"),
    (lambda: DistributedSampler(range(10), 2, 2), ValueError, r"rank \(of num_replicas=2\) must be an int in \[0, 1\], got 2"),
    (lambda: DistributedBatchSampler([[0]], 2, -1), ValueError, "rank"),
    (lambda: DistributedSampler(range(10), 2.0, 0), TypeError, "num_replicas must be an int"),
    (lambda: SkipSampler(range(10), -1), ValueError, "skip must be an int >= 0, got -1"),
    (lambda: SkipSampler(range(10), 11), ValueError, "skip=11 is past the end of a sampler of length 10"),
    (lambda: SkipBatchSampler(SeekableBatchSampler(range(10), 3), 5), ValueError, "past the end"),
    (lambda: SeekableBatchSampler(range(10), 0), ValueError, "batch_size must be an int >= 1, got 0"),
    (lambda: SeekableBatchSampler(range(10), 2, drop_last=1), TypeError, "drop_last must be a bool"),
    (lambda: make_batch_sampler(range(10), "training", 0, 1, 0, 0), ValueError, "batch_size must be an int >= 1"),
    (lambda: make_batch_sampler(range(10), "training", 0, 0, 0, 2), ValueError, "num_replicas must be an int >= 1"),
    (lambda: make_batch_sampler(range(10), "training", 0, 2, 5, 2), ValueError, "rank"),
    (lambda: make_batch_sampler(range(10), "training", 0, 1, 0, 2, skip=-3), ValueError, "skip must be an int >= 0"),
    (lambda: make_batch_sampler(range(10), "train", 0, 1, 0, 2), ValueError, "mode must be 'training' or 'validation', got 'train'"),
    (lambda: make_batch_sampler(range(10), "validation", 0, 1, 0, 2, skip=1), ValueError, "validation is never skipped"),
    (lambda: make_batch_sampler([], "training", 0, 1, 0, 2), ValueError, "empty"),
    (lambda: make_batch_sampler([], "validation", 0, 1, 0, 2), ValueError, "empty"),
    (lambda: make_epochwise_batch_sampler([], 0, 1, 0, 2), ValueError, "empty"),
    (lambda: make_batch_sampler(range(10), "training", 1.5, 1, 0, 2), TypeError, "shuffle_seed must be an int"),
    (lambda: make_batch_sampler(range(10), "training", True, 1, 0, 2), TypeError, "shuffle_seed must be an int"),
    (lambda: make_batch_sampler(object(), "training", 0, 1, 0, 2), TypeError, "needs a sampler or a dataset"),
    (lambda: ReproducibleShuffleSampler(range(10), "42"), TypeError, "seed must be an int"),
    (lambda: ReproducibleShuffleSampler(range(10), 2**64), ValueError, "seed must be an int in"),
    (lambda: ReproducibleShuffleSampler(RepeatSampler(range(3)), 0), ValueError, "Shuffle first, then repeat"),
    (lambda: ReproducibleShuffleBatchSampler(range(4), 0), TypeError, "wraps batch samplers"),
    (lambda: ReproducibleShuffleSampler(IterOnly([[0, 1], [2]]), 0), TypeError, "a sampler of indices was expected"),
    (lambda: RepeatSampler(BatchSampler(range(4), 2, False)), TypeError, "use the ...BatchSampler wrapper"),
    (lambda: SeekableBatchSampler(SeekableBatchSampler(range(4), 2), 2), TypeError, "wraps item samplers"),
    (lambda: RepeatBatchSampler(range(4)), TypeError, "wraps batch samplers"),
    (lambda: ReproducibleShuffleSampler(torch.utils.data.TensorDataset(torch.zeros(3)), 0), TypeError, "got a dataset"),
    (lambda: ReproducibleShuffleSampler(5, 0), TypeError, "must be iterable and have a len"),
    (lambda: RepeatSampler([]), ValueError, "empty sampler"),
    (lambda: RepeatSampler(RepeatSampler(range(2))), ValueError, "infinite stream"),
    (lambda: ReproducibleShuffleSampler(range(3), 0).set_epoch(-1), ValueError, r"epoch must be an int in \[0, 18446744073709551615\], got -1"),
    (lambda: ReproducibleShuffleBatchSampler([[0]], 0).set_epoch(1.0), TypeError, "epoch must be an int"),
    (lambda: make_epochwise_batch_sampler(range(9), 0, 1, 0, 3).set_epoch(-2), ValueError, "epoch must be an int in"),
    (lambda: StatefulDistributedSampler(range(9), 3).set_epoch(-1), ValueError, "epoch must be an int in"),
    (lambda: ReproducibleShuffleSampler(range(3), seed=1.5), TypeError, "seed must be an int, got 1.5 of type float"),
    (lambda: ReproducibleShuffleSampler(range(3), seed=-1), ValueError, "seed must be an int in"),
    (lambda: SkipBatchSampler(BatchSampler(range(15), 2, False), 9), ValueError, "skip=9 is past the end of a sampler of length 8: skip at most 8"),
]


@pytest.mark.parametrize("call, error, message", BAD)
def test_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_state_from_another_sampler_is_refused():
    def trained(*args):
        chain = make_batch_sampler(range(10), "training", *args)
        take(chain, 3)
        return chain

    state = trained(0, 2, 0, 3).state_dict()
    refusals = [
        (make_batch_sampler(range(11), "training", 0, 2, 0, 3), "length=10 but this ReproducibleShuffleSampler has length=11"),
        (make_batch_sampler(range(10), "training", 1, 2, 0, 3), "seed=0 but this ReproducibleShuffleSampler has seed=1"),
        (make_batch_sampler(range(10), "training", None, 2, 0, 3), "made by ReproducibleShuffleSampler, not by SequentialSampler"),
        (make_batch_sampler(range(10), "validation", 0, 2, 0, 3), "made by SkipBatchSampler, not by SeekableBatchSampler"),
        (make_epochwise_batch_sampler(range(10), 0, 2, 0, 3), "not by EpochwiseBatchSampler"),
        (make_batch_sampler(IterOnly(range(10)), "training", None, 2, 0, 3), "not by IterOnly"),
    ]
    for sampler, message in refusals:
        before = sampler.state_dict()
        with pytest.raises(ValueError, match=message):
            sampler.load_state_dict(state)
        assert sampler.state_dict() == before, "a refused state changes nothing"
    with pytest.raises(TypeError, match="must be a dict"):
        make_batch_sampler(range(10), "training", 0, 2, 0, 3).load_state_dict([1, 2])
    broken = json.loads(json.dumps(state))
    del broken["inner"]["inner"]["inner"]
    with pytest.raises(ValueError, match="needs the key 'inner'"):
        make_batch_sampler(range(10), "training", 0, 2, 0, 3).load_state_dict(broken)
    broken = json.loads(json.dumps(state))
    broken["inner"]["inner"]["inner"]["inner"]["position"] = 11
    with pytest.raises(ValueError, match=r"state\['position'\] must be an int in \[0, 10\], got 11"):
        make_batch_sampler(range(10), "training", 0, 2, 0, 3).load_state_dict(broken)


def test_samplers_pickle_for_worker_processes():
    chain = make_batch_sampler(range(50), "training", 0, 2, 1, 4, skip=3)
    copy = pickle.loads(pickle.dumps(chain))
    assert take(copy, 5) == take(chain, 5)


def test_wrapping_a_sampler_starts_it_from_the_beginning():
    shuffle = ReproducibleShuffleSampler(range(10), 0)
    take(shuffle, 4)
    state = shuffle.state_dict()
    shuffle.load_state_dict(state)
    assert len(shuffle) == 6
    repeat = RepeatSampler(shuffle)
    assert len(repeat) == 10 and take(repeat, 10) == order(10, 0)


def test_the_permutation_is_pluggable_and_named_in_the_state():
    feistel = ReproducibleShuffleSampler(range(10), 3, permutation=FeistelPermutation)
    assert list(feistel) == list(FeistelPermutation(10, 3, 0))
    assert feistel.state_dict()["permutation"] == "FeistelPermutation"
    default = ReproducibleShuffleSampler(range(10), 3)
    with pytest.raises(ValueError, match="permutation='FeistelPermutation' but this ReproducibleShuffleSampler has "
                                         "permutation='ShuffledOrder'"):
        default.load_state_dict(feistel.state_dict())
    vissl = StatefulDistributedSampler(range(10), 2, seed=1, num_replicas=2, rank=1, permutation=FeistelPermutation)
    assert list(vissl) == [5 + i for i in FeistelPermutation(5, 1, 0)]
    assert list(StatefulDistributedSampler(range(10), 2, seed=1, num_replicas=2, rank=1)) == \
        [5 + i for i in order(5, 1, 0)]


def test_num_workers_is_determineds_name_for_num_replicas():
    assert list(DistributedSampler(range(10), num_workers=3, rank=1)) == list(DistributedSampler(range(10), 3, 1))
    assert DistributedSampler(range(10), num_replicas=3, rank=1, num_workers=3).num_workers == 3, "agreeing: accepted"
    chain = make_batch_sampler(range(10), "training", 0, num_workers=2, rank=1, batch_size=3)
    assert take(chain, 3) == take(make_batch_sampler(range(10), "training", 0, num_replicas=2, rank=1, batch_size=3), 3)
    epochwise = make_epochwise_batch_sampler(range(10), 0, num_workers=2, rank=1, batch_size=3)
    assert list(epochwise) == list(make_epochwise_batch_sampler(range(10), 0, 2, 1, 3))


@FAST
@given(n=st.integers(1, 30), bs=st.integers(1, 7), seed=seeds, shuffle=st.booleans(), drop_last=st.booleans(),
       epoch=st.integers(0, 50), data=st.data())
def test_one_rank_epochwise_chain_is_notebook_01s_epoch_batch_sampler(n, bs, seed, shuffle, drop_last, epoch, data):
    if drop_last and bs > n:
        return  # EpochBatchSampler refuses an epoch with no batch
    notebook_01 = EpochBatchSampler(n, bs, seed % 2**63, shuffle, drop_last)
    chain = make_epochwise_batch_sampler(range(n), seed % 2**63 if shuffle else None, 1, 0, bs, drop_last)
    assert [list(notebook_01) for _ in range(3)] == [list(chain) for _ in range(3)], "each pass the next epoch"
    start_iter = data.draw(st.integers(0, notebook_01.n_batches))
    for sampler in (notebook_01, chain):
        sampler.set_epoch(epoch)
        sampler.set_start_iter(start_iter)
    assert len(notebook_01) == len(chain)
    assert list(notebook_01) == list(chain) and list(notebook_01) == list(chain)
