"""Whole optimizer state refused under FSDP before any weight moves, a checkpoint the engine cannot read named as
such (not as a misfit), and a failed `learn.save` on rank 0 raised on every rank at once, in real gloo processes."""
import errno
import time

import pytest
import torch

import torch.distributed.fsdp

if not hasattr(torch.distributed.fsdp, "fully_shard"):  # the floor run's torch 2.4 has FSDP2 only privately
    pytest.skip(f"looplab.fsdp needs FSDP2's public API, torch>=2.6; this is torch {torch.__version__}",
                allow_module_level=True)

import fsdp_workers as w
from looplab import engine as engine_module
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.distributed import launch
from looplab.engine import DeviceEngine
from looplab.engines import DistributedDataParallelEngine
from looplab.files import CheckpointError
from looplab.fsdp import FSDPEngine

torch.set_num_threads(1)


def whole_opt_state_and_unreadable_shards(whole_opt_file, tmp):
    "learn.load/save(with_opt=True) under FSDP after a fit, then a checkpoint whose shards cannot be read."
    learn = w.adam_digits_learner(FSDPEngine(device="cpu"), n=240)
    learn.fit(1)
    before = w.full_weights(learn.model)
    out = {"load": w._attempt(lambda: learn.load(whole_opt_file, with_opt=True)),
           "save": w._attempt(lambda: learn.save(tmp / "whole.pt", with_opt=True))}
    after = w.full_weights(learn.model)
    out["unchanged"] = all(torch.equal(before[k], after[k]) for k in before)
    steps = learn.n_steps
    learn.fit(1)
    out["steps"] = learn.n_steps - steps
    save_checkpoint(learn, tmp / "run.pt")
    read = w.dcp.FileSystemReader.read_data
    if learn.engine.rank == 1:
        def unreadable(*args, **kwargs):
            raise OSError(errno.EIO, "Input/output error")
        w.dcp.FileSystemReader.read_data = unreadable
    out["read error"] = w._attempt(lambda: load_checkpoint(w.adam_digits_learner(FSDPEngine(device="cpu"), n=240),
                                                           tmp / "run.pt"))
    w.dcp.FileSystemReader.read_data = read
    return out


def test_whole_optimizer_state_is_refused_before_anything_loads_and_read_errors_are_not_misfits(tmp_path):
    source = w.adam_digits_learner(DeviceEngine("cpu"), n=240)
    source.fit(1)
    source.save(tmp_path / "both.pt", with_opt=True)  # whole weights and whole Adam state, from one process
    for out in launch(whole_opt_state_and_unreadable_shards, nprocs=2, args=(tmp_path / "both.pt", tmp_path)):
        for call in ("load", "save"):
            kind, message = out[call]
            assert kind == "ValueError" and message.startswith(f"learn.{call}(path, with_opt=True) under FSDPEngine: ")
            assert "load_checkpoint" in message and "weights were loaded" not in message
        assert out["unchanged"] and out["steps"] == 3  # the weights as they were; the next fit trains an epoch
        kind, message = out["read error"]  # the engine's own error, not "does not fit this learner"
        assert kind == "CheckpointError" and message.startswith("the shards folder") and "does not fit" not in message
    assert not (tmp_path / "whole.pt").exists()


class ShardReadFails(DeviceEngine):
    "An engine that reads part of a checkpoint while loading it, from storage that fails (as a sharded one does)."
    def unpack_checkpoint(self, checkpoint, model, optimizers):
        raise CheckpointError("the shards folder 'run.pt.1234.dcp' of checkpoint 'run.pt' could not be read")


def test_a_checkpoint_that_cannot_be_read_is_named_as_such_not_as_a_misfit(tmp_path):
    learn = w.adam_digits_learner(ShardReadFails("cpu"), n=240)  # it saves as DeviceEngine does
    learn.fit(1)
    path = save_checkpoint(learn, tmp_path / "run.pt")
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(w.adam_digits_learner(ShardReadFails("cpu"), n=240), path)
    assert str(caught.value) == "the shards folder 'run.pt.1234.dcp' of checkpoint 'run.pt' could not be read"
    w._flip_byte(path)  # a damaged plain file: refused as damaged, naming it
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(w.adam_digits_learner(DeviceEngine("cpu"), n=240), path)
    assert str(path) in str(caught.value) and "does not fit" not in str(caught.value)


def rank0_cannot_write(target):
    "learn.save under DDP where rank 0's write fails (a full disk): how long each rank takes to raise, and what."
    learn = w.adam_digits_learner(DistributedDataParallelEngine(device="cpu"), n=240)
    if learn.engine.rank == 0:
        def full_disk(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        engine_module.atomic_save = full_disk
    start = time.monotonic()
    said = w._attempt(lambda: learn.save(target))
    waited = time.monotonic() - start
    return said, waited


def test_a_failed_save_on_rank_0_raises_on_every_rank_at_once(tmp_path):
    (kind0, said0, waited0), (kind1, said1, waited1) = [(*said, waited) for said, waited in
                                                        launch(rank0_cannot_write, nprocs=2, args=(tmp_path / "w.pt",))]
    assert kind0 == kind1 == "OSError" and "No space left" in said0 and said1 == f"on rank 0: {said0}"
    assert waited0 < 10 and waited1 < 10  # not the process group's 300 s timeout
    assert not (tmp_path / "w.pt").exists()
