"""The data-order contract (`looplab.data.DataOrder`), run against every looplab class that has `set_start_iter`:
a pass started at any batch, or restored from the state saved after any batch, gives the rest of the epoch the
uninterrupted order gives, and the epoch after it whole — as the Learner uses them (`load_state_dict`, then
`set_epoch`, then `set_start_iter`)."""
import copy
import inspect
import itertools
import json

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import looplab
from looplab.data import DataOrder, EpochBatchSampler, EpochOrder
from looplab.datasets import SeededBatchSampler
from looplab.engines import ShardedBatchSampler
from looplab.resume import EpochwiseBatchSampler, StatefulDistributedSampler, StatefulLoader
from looplab.sampler_chain import DistributedSampler, SeekableBatchSampler
from looplab.samplers import ReproducibleShuffleSampler
from looplab.stateful import BPTTBatches


def plain(x):
    "Batches as nested lists of numbers, whatever they are made of (tensors, tuples, item keys)."
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def in_batches(items, size: int):
    "A sampler of indices read as the batches `set_start_iter` counts: `size` indices each."
    items = iter(items)
    return iter(lambda: list(itertools.islice(items, size)), [])


def shuffling_loader() -> StatefulDataLoader:
    "torchdata's loader, shuffling with its own generator, which its state carries (one passed in, it would not)."
    torch.manual_seed(0)
    return StatefulDataLoader(list(range(10)), batch_size=3, shuffle=True)


# name: (a new order, how its passes read as batches, whether it seeks; a StatefulLoader restores only)
ORDERS = {
    "EpochBatchSampler": (lambda: EpochBatchSampler(10, 3, seed=1), iter, True),
    "EpochBatchSampler drop_last": (lambda: EpochBatchSampler(11, 3, seed=2, drop_last=True), iter, True),
    "SeededBatchSampler": (lambda: SeededBatchSampler(EpochBatchSampler(10, 3, seed=1), n=10, seed=5), iter, True),
    "ShardedBatchSampler rank 1 of 2": (lambda: ShardedBatchSampler(EpochBatchSampler(12, 4, seed=1), 1, 2), iter,
                                        True),
    "EpochwiseBatchSampler": (lambda: EpochwiseBatchSampler(SeekableBatchSampler(DistributedSampler(
        ReproducibleShuffleSampler(range(10), 0), 2, 1), 2)), iter, True),
    "StatefulDistributedSampler rank 1 of 2": (lambda: StatefulDistributedSampler(range(11), batch_size=2, seed=3,
                                                                                  num_replicas=2, rank=1),
                                               lambda s: in_batches(s, 2), True),
    "BPTTBatches": (lambda: BPTTBatches(torch.arange(42).view(2, 21), bptt=4), iter, True),
    "StatefulLoader": (lambda: StatefulLoader(shuffling_loader()), iter, False),
}


def epochs(make, batches, n: int = 3) -> list[list]:
    "The uninterrupted order: `n` epochs of one order, each pass after `set_epoch`, as the Learner makes them."
    order = make()
    out = []
    for epoch in range(n):
        order.set_epoch(epoch)
        out.append(plain(list(batches(order))))
    return out


def test_every_looplab_class_with_set_start_iter_is_run_against_the_contract():
    "A class that gains set_start_iter is added to ORDERS, or this test names it."
    classes = {cls for module in vars(looplab).values() if inspect.ismodule(module) and module.__name__.startswith("looplab.")
               for cls in vars(module).values()
               if inspect.isclass(cls) and cls.__module__ == module.__name__ and hasattr(cls, "set_start_iter")
               and cls is not DataOrder}
    covered = {type(make()) for make, _, _ in ORDERS.values()} | {EpochOrder}  # EpochOrder: EpochBatchSampler's base
    assert classes, "no class found: the search itself is broken"
    assert not classes - covered, f"not run against the contract: {sorted(c.__name__ for c in classes - covered)}"


@pytest.mark.parametrize("name", ORDERS)
def test_follows_the_protocol(name):
    make, _, _ = ORDERS[name]
    assert isinstance(make(), DataOrder)


def test_the_protocol_refuses_what_lacks_a_method():
    assert not isinstance(ReproducibleShuffleSampler(range(4), 0), DataOrder)  # a layer: no set_start_iter
    assert not isinstance(torch.utils.data.BatchSampler(range(4), 2, False), DataOrder)


@pytest.mark.parametrize("name", [name for name, (_, _, seeks) in ORDERS.items() if seeks])
def test_a_pass_started_at_any_batch_is_the_rest_of_the_uninterrupted_epoch(name):
    make, batches, _ = ORDERS[name]
    whole = epochs(make, batches)
    for epoch, k in [(e, k) for e in range(2) for k in range(len(whole[e]) + 1)]:
        order = make()
        order.set_epoch(epoch)
        order.set_start_iter(k)
        assert plain(list(batches(order))) == whole[epoch][k:], f"{name}: epoch {epoch}, started at batch {k}"
        order.set_epoch(epoch + 1)
        assert plain(list(batches(order))) == whole[epoch + 1], f"{name}: the epoch after one started at batch {k}"


@pytest.mark.parametrize("name", ORDERS)
def test_a_state_saved_after_any_batch_resumes_the_uninterrupted_order(name):
    make, batches, _ = ORDERS[name]
    whole = epochs(make, batches)
    for epoch, k in [(e, k) for e in range(2) for k in range(len(whole[e]))]:
        first = make()
        for before in range(epoch):
            first.set_epoch(before)
            list(batches(first))
        first.set_epoch(epoch)
        passing = batches(first)
        trained = plain([next(passing) for _ in range(k)])
        state = copy.deepcopy(first.state_dict())
        if name != "StatefulLoader":  # torchdata's own state holds more than numbers; looplab's are plain
            assert json.loads(json.dumps(state)) == state, f"{name}: a state that is not plain numbers"
        resumed = make()
        resumed.load_state_dict(state)
        resumed.set_epoch(epoch)
        if k:
            resumed.set_start_iter(k)
        assert trained + plain(list(batches(resumed))) == whole[epoch], f"{name}: epoch {epoch}, saved after batch {k}"
        resumed.set_epoch(epoch + 1)
        assert plain(list(batches(resumed))) == whole[epoch + 1], f"{name}: the epoch after one resumed at batch {k}"
