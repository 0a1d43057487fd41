"""Your own Dataset: exact resume in a new process with 0, 2 and persistent workers and random augmentations;
no checkpoint that cannot be loaded; torchdata's StatefulDataLoader; seeding through a sharded order; bad input."""
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from looplab.callback import CallbackError
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders, collate_batch, load_digits, set_seed
from looplab.datasets import SeededBatchSampler, from_datasets, item_seeds, seed_item
from looplab.learner import Learner
from looplab.resume import StatefulLoader, make_epochwise_batch_sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets_worker import AugmentedDigits  # noqa: E402
from resume_worker import StopAfter  # noqa: E402

WORKER = Path(__file__).resolve().parent / "datasets_worker.py"
N_PER_EPOCH = 10  # 640 training digits in batches of 64
TIMEOUT = 300


def run(*args) -> None:
    "Run datasets_worker.py in a new process and check that it succeeded."
    proc = subprocess.run([sys.executable, str(WORKER), *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, f"datasets_worker.py {' '.join(map(str, args))} failed:\n{proc.stderr}"


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("num_workers, persistent", [(0, 0), (2, 0), (2, 1)],
                         ids=["0 workers", "2 workers", "2 persistent workers"])
def test_resume_in_a_new_process_replays_every_augmentation(tmp_path, num_workers, persistent):
    k = random.randrange(1, 2 * N_PER_EPOCH)  # a random batch, of either epoch; never an epoch's end
    while k % N_PER_EPOCH == 0:
        k = random.randrange(1, 2 * N_PER_EPOCH)
    run(tmp_path / "full.pt", num_workers, persistent, "full")
    run(tmp_path / "stop.pt", num_workers, persistent, "stop", tmp_path / "ckpt.pt", k)
    assert (tmp_path / "ckpt.pt").exists()
    run(tmp_path / "resumed.pt", num_workers, persistent, "resume", tmp_path / "ckpt.pt")
    full = load(tmp_path / "full.pt")
    resumed = load(tmp_path / "resumed.pt")
    label = f"num_workers={num_workers}, persistent={bool(persistent)}, stopped after batch {k}"
    assert resumed["n_iter"] == full["n_iter"] == 2 * N_PER_EPOCH, label
    same_items = [torch.equal(a, b) for a, b in zip(resumed["items"], full["items"])]
    assert all(same_items), f"{label}: the augmented items of batches {same_items.index(False)}... differ"
    assert torch.equal(resumed["losses"], full["losses"]), f"{label}: batch losses differ"
    assert all(torch.equal(p, q) for p, q in zip(resumed["params"], full["params"])), f"{label}: parameters differ"


def plain_learner(cbs=()) -> Learner:
    "A learner on a plain DataLoader(shuffle=True): it cannot restart mid-epoch."
    set_seed(3)
    x, y = load_digits()
    dls = DataLoaders(DataLoader(TensorDataset(x[:640], y[:640]), batch_size=64, shuffle=True))
    lrn = Learner(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10)), dls,
                  cbs=list(cbs))
    lrn.remove_cbs(lrn.progress)
    return lrn


def test_plain_loader_refuses_every_n_batches_before_the_first_batch(tmp_path):
    path = tmp_path / "never.pt"
    lrn = plain_learner([Checkpoint(path, every_n_batches=5)])
    with pytest.raises(CallbackError) as info:
        lrn.fit(1)
    message = str(info.value.__cause__)
    assert isinstance(info.value.__cause__, ValueError)
    for fragment in ("every_n_batches=5", "cannot start in the middle of an epoch", "looplab.datasets.from_datasets",
                     "from_tensors", "StatefulDataLoader"):
        assert fragment in message, message
    assert lrn.n_iter == 0 and not path.exists() and list(tmp_path.iterdir()) == []


def test_plain_loader_refuses_a_mid_epoch_save(tmp_path):
    lrn = plain_learner([StopAfter(n_iter=3)])
    lrn.fit(1)
    with pytest.raises(ValueError, match="after batch 3 of epoch 0.*looplab.datasets.from_datasets"):
        save_checkpoint(lrn, tmp_path / "mid.pt")
    assert not (tmp_path / "mid.pt").exists()


def test_plain_loader_end_of_epoch_checkpoint_loads_and_continues(tmp_path):
    path = tmp_path / "epoch.pt"
    reference = plain_learner()
    reference.fit(2)
    first = plain_learner([Checkpoint(path), StopAfter(epoch=0)])
    first.fit(2)
    second = plain_learner([Checkpoint(path), StopAfter()])
    set_seed(999)
    load_checkpoint(second, path)
    second.fit(2)
    assert second.n_iter == reference.n_iter == 20
    # RandomSampler draws the epoch's order from the global generator, which the checkpoint restores
    assert all(torch.equal(p, q) for p, q in zip(second.model.parameters(), reference.model.parameters()))


def stateful_learner(num_workers: int, cbs=()) -> Learner:
    from torchdata.stateful_dataloader import StatefulDataLoader
    set_seed(4)
    x, y = load_digits()
    loader = StatefulDataLoader(TensorDataset(x[:640], y[:640]), batch_size=64, shuffle=True,
                                generator=torch.Generator().manual_seed(8), num_workers=num_workers)
    lrn = Learner(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)), DataLoaders(StatefulLoader(loader)),
                  cbs=list(cbs))
    lrn.remove_cbs(lrn.progress)
    return lrn


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_checkpoint_round_trip(tmp_path, num_workers):
    pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed (pip install torchdata, "
                                                                "in looplab's dev extras)")
    path = tmp_path / "sdl.pt"
    reference = stateful_learner(num_workers)
    reference.fit(2)
    assert isinstance(reference.dls.train, StatefulLoader)
    first = stateful_learner(num_workers, [Checkpoint(path, every_n_batches=13, at_epoch_end=False), StopAfter(13)])
    first.fit(2)
    second = stateful_learner(num_workers, [Checkpoint(path, every_n_batches=13, at_epoch_end=False), StopAfter()])
    load_checkpoint(second, path)
    assert second.dls.train.start_iter == 3
    second.fit(2)
    assert second.n_iter == 20
    assert torch.equal(torch.tensor(second.recorder.losses[-7:]), torch.tensor(reference.recorder.losses[-7:]))
    assert all(torch.equal(p, q) for p, q in zip(second.model.parameters(), reference.model.parameters()))


def test_distinct_item_seeds_give_distinct_numpy_draws():
    "NumPy is seeded from all 64 bits: seeded from the high 32, 5 pairs of these 200,000 items drew alike."
    seeds = item_seeds(0, 0, range(200_000))
    first_draws = set()
    for seed in seeds:
        seed_item(seed, ("numpy",))
        first_draws.add(np.random.random())
    assert len(first_draws) == len(seeds)


@settings(max_examples=200, deadline=None)
@given(high=st.integers(0, 2**32 - 1), low=st.integers(0, 2**32 - 1), other_low=st.integers(0, 2**32 - 1))
def test_seeds_that_differ_in_their_low_bits_draw_differently(high, low, other_low):
    "The low 32 bits count for NumPy too; PyTorch's and Python's draws are those of their own seed calls."
    if low == other_low:
        return
    draws = []
    for seed in ((high << 32) | low, (high << 32) | other_low):
        seed_item(seed)
        draws.append((torch.rand(1).item(), random.random(), np.random.random()))
        torch.manual_seed(seed)
        random.seed(seed)
        assert (torch.rand(1).item(), random.random()) == draws[-1][:2]
    assert draws[0][2] != draws[1][2]


@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_positions_keep_every_items_seed(world_size):
    "A DDP engine shards the positions: every rank's keys are the single-process keys of the same positions."
    n, bs, seed = 100, 8, 5
    single = SeededBatchSampler(make_epochwise_batch_sampler(range(n), None, 1, 0, bs), n, seed)
    single.set_epoch(2)
    by_position = {key.position: key for batch in single for key in batch}
    seen = []
    for rank in range(world_size):
        sharded = SeededBatchSampler(make_epochwise_batch_sampler(range(n), None, world_size, rank, bs), n, seed)
        sharded.set_epoch(2)
        for batch in sharded:
            for key in batch:
                assert key == by_position[key.position]
                seen.append(key.position)
    assert set(seen) == set(range(n))


def test_bad_input_names_the_argument():
    x, y = load_digits()
    ds = AugmentedDigits(x[:100], y[:100])
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(x, y))

    with pytest.raises(TypeError, match="train_ds is a Stream without __len__.*looks like an IterableDataset"):
        from_datasets(Stream())
    with pytest.raises(ValueError, match="num_workers must be an int >= 0, got -1"):
        from_datasets(ds, num_workers=-1)
    with pytest.raises(ValueError, match="bs must be an int >= 1, got 0"):
        from_datasets(ds, bs=0)
    with pytest.raises(TypeError, match="collate_fn must be None .* got 3"):
        from_datasets(ds, collate_fn=3)
    with pytest.raises(ValueError, match="persistent_workers=True needs worker processes"):
        from_datasets(ds, persistent_workers=True)
    with pytest.raises(ValueError, match="train_ds is empty"):
        from_datasets(AugmentedDigits(x[:0], y[:0]))


def test_from_tensors_loader_is_not_wrapped():
    x, y = load_digits()
    dls = DataLoaders.from_tensors(x, y)
    assert isinstance(dls.train, DataLoader) and dls.train.collate_fn is collate_batch
