"""FSDPEngine at its edges, in real gloo processes: sharded saves that every rank agrees on, shards verified by their
digests, folders kept while a checkpoint names them, BatchNorm resumed bit for bit, and the seams with precision,
learn.load, tied weights, meta models and inference."""
import pytest
import torch

import torch.distributed.fsdp

if not hasattr(torch.distributed.fsdp, "fully_shard"):  # the floor run's torch 2.4 has FSDP2 only privately
    pytest.skip(f"looplab.fsdp needs FSDP2's public API, torch>=2.6; this is torch {torch.__version__}",
                allow_module_level=True)

import fsdp_workers as w
from looplab.distributed import launch
from looplab.engine import DeviceEngine

torch.set_num_threads(1)


def test_sharded_saves_and_loads_that_fail_fail_on_every_rank_alike_and_leave_no_folder(tmp_path):
    ranks = launch(w.broken_targets_and_shards, nprocs=2, args=(tmp_path,))
    (out, shard, folder), (other, _, _) = ranks
    for seen in (out, other):  # every rank raises, an Exception (DCP's own is a BaseException), with the same cause
        assert seen["read-only"][0] == "PermissionError" and "read-only" in seen["read-only"][1]
        assert seen["pipe"][0] == "ValueError" and "not a regular file" in seen["pipe"][1]
        kind, message = seen["full disk"]
        assert kind == "OSError" and "disk is full" in message and "removed" in message
        assert seen["after full disk"] == out["saved"]  # the partial folder removed, the committed one kept
        for case in ("rank 1's target", "rank 0's commit"):  # one rank fails: every rank raises, nothing is left
            assert seen[case][0] == "PermissionError" and f"{case} fails here" in seen[case][1], case
            assert seen[f"after {case}"] == out["saved"], case
        kind, message = seen["read error"]  # inside DCP: its CheckpointException, as the kit's error naming the folder
        assert kind == "CheckpointError" and folder in message and "rank 1: OSError" in message
        assert seen["the copy"] is None  # cp run.pt keep.pt, two more saves of run.pt: keep.pt still loads
        for case, named, said in (("damaged", shard, "damaged"), ("partial", shard, "is missing"),
                                  ("no folder", folder, "is missing")):
            kind, message = seen[case]
            assert kind == "CheckpointError" and named in message and said in message, case
    assert not any(name.startswith(("ro.pt.", "pipe.pt.")) for name in out["saved"])  # refused before any shard
    assert out["rank 1's target"][1].startswith("on rank 1: ") and other["rank 0's commit"][1].startswith("on rank 0: ")
    assert sum(name.endswith(".dcp") for name in out["saved"]) == 1


def test_batchnorm_buffers_agree_over_the_ranks_and_a_two_rank_resume_is_bit_for_bit(tmp_path):
    ranks = launch(w.batchnorm_resume, nprocs=2, args=(tmp_path / "bn.pt", 4))  # batch 1 of epoch 1 (3 a epoch)
    for whole, resumed in ranks:
        assert all(torch.equal(resumed[k], whole[k]) for k in whole), "2 -> 2 must be bit for bit, buffers too"
    buffers = [k for k in ranks[0][0] if "running" in k]
    assert buffers and all(torch.equal(ranks[0][0][k], ranks[1][0][k]) for k in buffers)  # rank 0's on every rank


def test_fsdp_seams_are_refused_with_their_fix_or_work(tmp_path):
    source = w.adam_digits_learner(DeviceEngine("cpu"), n=240)
    source.fit(1)
    source.save(tmp_path / "both.pt", with_opt=True)  # whole weights and whole Adam state, from one process
    out, other = launch(w.seams, nprocs=2, args=(tmp_path / "both.pt",))
    assert out["get_preds"] == (24, 10) and out["predict"] == (10,)  # every rank calls: each its half of 48 items
    kind, message = out["with_opt"]
    assert kind == "ValueError" and "with_opt=True" in message and "load_checkpoint" in message
    kind, message = out["to_bf16"]
    assert kind == "ValueError" and "mp_dtype None -> torch.bfloat16" in message and "save_checkpoint" in message
    assert out["to_bf16 steps"] == 0 and out["fit after refusals"] == 3  # refused before a step; then it trains an epoch
    assert "mp_dtype torch.bfloat16 -> None" in out["engine swap"][1]
    assert "float32 is what FSDPEngine() trains in" in out["float32"][1] and "loss scale" not in out["float32"][1]
    kind, message = out["tied"]
    assert kind == "ValueError" and "'a' and 'b' share the parameter 'weight'" in message and "layers=" in message
    assert out["tied, layers="] is None  # the layers= the message shows trains
    assert out["meta gap"] == 0.0  # built on meta, initialised after sharding: the weights of the whole build
    message = out["meta without reset_parameters"][1]
    assert "'1' (NoReset: scale) hold tensors of their own and have no reset_parameters" in message
    assert "'0' (Linear: weight, bias) hold real tensors" in out["partly meta"][1]
    kind, message = out["get_preds on rank 0"]
    assert kind == "RuntimeError" and "every rank must call them" in message and "only 1 of the 2 ranks" in message
    assert 1.0 <= out["waited"] < 5  # refused after inference_wait_s, not after the group's 300 s timeout
    assert "get_preds on rank 0" not in other
