"""FSDPEngine in real gloo processes on the CPU: the same numbers as DDP and as one process, sharded checkpoints that
resume on 2, 1 and 3 ranks, a kill during the write, and what is refused before anything trains."""
from pathlib import Path

import pytest
import torch

import torch.distributed.fsdp

if not hasattr(torch.distributed.fsdp, "fully_shard"):  # the floor run's torch 2.4 has FSDP2 only privately
    pytest.skip(f"looplab.fsdp needs FSDP2's public API, torch>=2.6; this is torch {torch.__version__}",
                allow_module_level=True)

import fsdp_workers as w
from looplab.distributed import WorkerError, launch
from looplab.engine import DeviceEngine
from looplab.regularize import GradientAccumulation, GradientClipping

torch.set_num_threads(1)
# float32 sums taken in another order (a mean of 60 against the mean of two means of 30; a reduce-scatter against
# an all-reduce) differ by ~1e-7 relative; a dozen Adam steps of ~3e-3 carry that along: 1e-5 is 100x the rounding
# and 100x below one step
TOL = 1e-5


def gap(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_fsdp_matches_ddp_and_one_process_with_the_global_batch_clipped_accumulated_and_in_bf16():
    ranks = launch(w.fit_each, nprocs=2, args=(1,))
    legs = ranks[0]
    one = w.adam_digits_learner(DeviceEngine("cpu"), cbs=[GradientClipping(max_norm=0.5)])
    one.fit(1)
    single = one.model.state_dict()
    assert legs["FSDP"][3] == legs["DDP"][3] == one.n_steps == 9
    assert gap(legs["FSDP"][0], legs["DDP"][0]) <= TOL
    assert gap(legs["FSDP"][0], single) <= TOL
    accumulated = w.adam_digits_learner(DeviceEngine("cpu"), cbs=[GradientClipping(max_norm=0.5), GradientAccumulation(2)])
    accumulated.fit(1)
    assert gap(legs["FSDP accumulate"][0], accumulated.model.state_dict()) <= TOL  # sharded grads add up
    assert legs["FSDP accumulate"][3] == accumulated.n_steps == 5
    assert gap(legs["FSDP"][0], w.adam_digits_learner(DeviceEngine("cpu")).model.state_dict()) > 1e-2  # it trained
    assert all(torch.equal(ranks[1]["FSDP"][0][k], v) for k, v in legs["FSDP"][0].items())  # one model
    # bfloat16 gathers round the weights to 3 significant digits: near the float32 run, not equal
    assert 0 < gap(legs["FSDP bf16"][0], legs["FSDP"][0]) < 0.05
    assert abs(legs["FSDP bf16"][1] - legs["FSDP"][1]) < 0.05
    for part, held in legs["FSDP"][2].items():  # each rank holds half of what DDP holds
        assert abs(held - legs["DDP"][2][part] / 2) <= 0.01 * legs["DDP"][2][part], part


def lines(path):
    return Path(path).read_text().splitlines()


def test_a_run_saved_on_two_ranks_resumes_bit_exactly_on_two_and_correctly_on_one_and_three(tmp_path):
    whole, n_iter, n_steps = launch(w.run, nprocs=2, args=(tmp_path / "unused.pt", tmp_path / "whole.log"))[0]
    assert n_iter == 2 * 9
    ckpt = tmp_path / "mid.pt"
    launch(w.run, nprocs=2, args=(ckpt, tmp_path / "first.log", 13))  # batch 4 of epoch 1
    first = lines(tmp_path / "first.log")
    assert len(first) == 13
    for nprocs in (2, 1, 3):
        log = tmp_path / f"resumed{nprocs}.log"
        resumed, *counters = launch(w.run, nprocs=nprocs, args=(ckpt, log, None, True))[0]
        assert counters == [n_iter, n_steps]
        assert first + lines(log) == lines(tmp_path / "whole.log")  # the same global batches, in the same order
        if nprocs == 2:
            assert all(torch.equal(resumed[k], whole[k]) for k in whole), "2 -> 2 must be bit for bit"
        else:
            assert gap(resumed, whole) <= TOL, nprocs


def test_a_sigkill_during_the_sharded_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    path = tmp_path / "run.pt"
    with pytest.raises(WorkerError):
        launch(w.killed_run, nprocs=2, args=(path, 3, 7))
    folders = sorted(p.name for p in tmp_path.glob("run.pt.*.dcp"))
    assert len(folders) == 2  # the committed one and the one killed before its commit
    for nprocs in (2, 1):
        where, files = launch(w.resumes_at, nprocs=nprocs, args=(path,))[0]
        assert where["n_iter"] == 3
    assert launch(w.resume_and_save, nprocs=2, args=(path, 5))[0] == 5  # a later save removes the dead folder
    assert len(list(tmp_path.glob("run.pt.*.dcp"))) == 2  # the new one and path.prev's
    assert (tmp_path / "run.pt.prev").exists()


@pytest.mark.parametrize("case, nprocs, fragments", [
    ("LBFGS", 1, ["LBFGS", "DistributedDataParallelEngine"]),
    ("DataParallel", 1, ["wrapped in DataParallel", "bare model"]),
    ("MixedPrecision", 1, ["MixedPrecision", "mp_dtype=torch.bfloat16"]),
    ("optimizer before sharding", 1, ["built before the sharding"]),
    ("to_fp16", 1, ["float16", "bfloat16"]),
    ("validation", 2, ["359 validation items", "[1, 2] batches", "valid_bs"]),
])
def test_what_does_not_make_sense_sharded_is_refused_before_a_step(case, nprocs, fragments):
    message, n_steps = launch(w.refused, nprocs=nprocs, args=(case,))[0]
    assert message is not None, f"{case} was not refused"
    assert all(f in message for f in fragments), message
    assert not n_steps


def test_learn_save_under_fsdp_writes_the_whole_weights_plain_torch_reads_and_learn_load_shards_back(tmp_path):
    path = tmp_path / "weights.pt"
    whole, loaded, refusal = launch(w.save_and_load_weights, nprocs=2, args=(path,))[0]
    plain = torch.load(path, weights_only=True)  # one file, the whole tensors, no DTensor
    assert set(plain) == set(whole) and all(torch.equal(plain[k], whole[k]) for k in whole)
    assert all(torch.equal(loaded[k], whole[k]) for k in whole)  # sharded back into a fresh FSDP learner
    assert "save_checkpoint" in refusal and "with_opt=True" in refusal
    model = w.adam_digits_learner(DeviceEngine("cpu")).model
    model.load_state_dict(plain)  # the obvious line of a plain torch script
