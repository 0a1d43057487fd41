"""The engines of notebook 13, method by method: in real gloo processes for DDP, in this process otherwise."""
from contextlib import nullcontext

import pytest
import torch
from torch import nn

import dist_workers as w
import looplab.engines as engines_module
from looplab.distributed import ShardedBatchSampler, launch, shard_dls
from looplab.data import DataLoaders, EpochBatchSampler, load_digits
from looplab.engine import AMP, AMPEngine, DeviceEngine
from looplab.engines import (APEX_EQUIVALENTS, ENGINES, DataParallelAMPEngine, DataParallelEngine,
                             DistributedDataParallelAMPEngine, DistributedDataParallelEngine, PROCESS_GROUP_ENV,
                             get_engine, process_group_env)

torch.set_num_threads(1)


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_every_ddp_engine_method_on_every_rank(tmp_path, nprocs):
    "(d) sync_tensor modes, rank/world/master, wrap/unwrap, backward/step/zero_grad, pack/unpack, files, autocast."
    results = launch(w.engine_checks, nprocs=nprocs, args=(str(tmp_path / "ckpt.pt"),))
    assert [r[:2] for r in results] == [(rank, nprocs) for rank in range(nprocs)]
    assert len({r[2] for r in results}) == nprocs
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # one file, written once


@pytest.fixture
def no_process_group_env(monkeypatch):
    for name in PROCESS_GROUP_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cls", [DistributedDataParallelEngine, DistributedDataParallelAMPEngine])
def test_ddp_engine_without_environment_says_how_to_launch(no_process_group_env, cls):
    with pytest.raises(RuntimeError, match=r"MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK are not set.*"
                                           r"torchrun --nproc_per_node N.*launch\(train_fn, nprocs=N\)"):
        cls()


def test_process_group_env_checks_its_values(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(RuntimeError, match="RANK=2 must be below WORLD_SIZE=2"):
        process_group_env()
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(RuntimeError, match="RANK must be a non-negative integer, got 'one'"):
        process_group_env()
    monkeypatch.setenv("RANK", "1")
    assert process_group_env()["RANK"] == "1"


def test_data_parallel_engines_run_on_the_one_device_here_and_say_so():
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has several GPUs: the fallback is not taken")
    with pytest.warns(UserWarning, match="without nn.DataParallel"):
        engine = DataParallelEngine()
    model = nn.Linear(3, 2)
    assert engine.init_components(model) is model
    assert engine.device == DeviceEngine().device
    with pytest.warns(UserWarning):
        amp = DataParallelAMPEngine(torch.bfloat16)
    with amp.autocast():
        assert (torch.ones(2, 2, device=amp.device) @ torch.ones(2, 2, device=amp.device)).dtype == torch.bfloat16
    assert amp.scaler is None
    with pytest.raises(ValueError, match="device_ids must be CUDA device numbers"):
        DataParallelEngine(device_ids=[7])


def test_get_engine_by_name_class_name_and_apex_name():
    assert type(get_engine("device", device="cpu")) is DeviceEngine
    assert type(get_engine("DeviceEngine", device="cpu")) is DeviceEngine
    assert get_engine("amp", dtype=torch.bfloat16, device="cpu").dtype == torch.bfloat16
    assert set(APEX_EQUIVALENTS.values()) <= set(ENGINES)
    if torch.cuda.is_available():
        assert type(get_engine("APEXEngine")) is AMPEngine and get_engine("APEXEngine").dtype == torch.float16
    with pytest.raises(ValueError, match=r"unknown engine name 'dpp'; did you mean 'dp'\?.*Known names: device, amp"):
        get_engine("dpp")


def test_sharded_batch_sampler_bad_input():
    with pytest.raises(TypeError, match="follows looplab.data.DataOrder \\(it lacks set_epoch"):
        ShardedBatchSampler([[0, 1]], 0, 1)
    with pytest.raises(ValueError, match="rank must be an int in \\[0, 1\\], got 2"):
        ShardedBatchSampler(EpochBatchSampler(10, 2), 2, 2)
    with pytest.raises(ValueError, match="bs=5 must be a multiple of the 2 processes"):
        ShardedBatchSampler(EpochBatchSampler(10, 5), 0, 2)
    with pytest.raises(ValueError, match="last batch of 13 items in batches of 4 has 1 item"):
        ShardedBatchSampler(EpochBatchSampler(13, 4), 0, 2)
    assert len(ShardedBatchSampler(EpochBatchSampler(13, 4, drop_last=True), 0, 2)) == 3


def test_shard_dls_deals_every_item_once():
    dls = DataLoaders.from_tensors(*load_digits(), bs=60)
    parts = [shard_dls(dls, rank, 3) for rank in range(3)]
    assert sorted(i for p in parts for batch in p.valid.batch_sampler for i in batch) == list(range(359))
    assert [sum(len(yb) for _, yb in p.valid) for p in parts] == [120, 120, 119]
    train_items = [sum(len(yb) for _, yb in p.train) for p in parts]
    assert sum(train_items) == len(dls.train.dataset)
    again = shard_dls(parts[0], 1, 2)  # a sharded loader re-sharded: from the global sampler
    assert again.train.batch_sampler.batch_sampler is dls.train.batch_sampler
    with pytest.raises(TypeError, match="under DDP, dls.train must be a DataLoader"):
        shard_dls(DataLoaders([(torch.zeros(2, 64), torch.zeros(2))]), 0, 2)


def test_precision_is_a_part_every_engine_holds_not_a_second_parent(monkeypatch):
    "One parent each; `dtype` builds an AMP part in any engine; the AMP names build the same engine; no isinstance."
    assert AMPEngine.__bases__ == (DeviceEngine,)
    assert DataParallelAMPEngine.__bases__ == (DataParallelEngine,)
    assert DistributedDataParallelAMPEngine.__bases__ == (DistributedDataParallelEngine,)
    full = DeviceEngine("cpu")
    assert (full.amp, full.dtype, full.scaler, full.state_dict()) == (None, None, None, {})
    for dtype, scaled in ((torch.bfloat16, False), (torch.float16, True)):
        try:
            held, named = DeviceEngine("cpu", dtype=dtype, init_scale=2.0**8), AMPEngine(dtype, "cpu", 2.0**8)
        except ValueError:  # float16 autocast is missing on this CPU: AMP refuses it, as AMPEngine did
            continue
        assert type(held.amp) is type(named.amp) is AMP and held.dtype == named.dtype == dtype
        assert (held.scaler is not None) is (named.scaler is not None) is scaled
        assert held.state_dict().keys() == named.state_dict().keys() == ({"scaler"} if scaled else set())
        assert repr(held) == f"DeviceEngine(dtype={dtype}, device='cpu')" and repr(named).startswith("AMPEngine(dtype=")
    with pytest.warns(UserWarning) if torch.cuda.device_count() < 2 else nullcontext():
        dp = DataParallelEngine(dtype=torch.bfloat16)  # the plain name with a dtype: accepted, as DeviceEngine's
    assert dp.dtype == torch.bfloat16 and type(dp.amp) is AMP and not isinstance(dp, AMPEngine)
    assert repr(dp).startswith("DataParallelEngine(dtype=torch.bfloat16, device_ids=")
    with pytest.warns(UserWarning) if torch.cuda.device_count() < 2 else nullcontext():
        assert type(dp.with_precision(torch.bfloat16)) is DataParallelAMPEngine
    joined = []
    monkeypatch.setattr(engines_module, "_join_process_group", lambda *args: joined.append(args))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="dtype must be torch.float16 or torch.bfloat16, got torch.float32"):
        DistributedDataParallelAMPEngine(torch.float32, device="cpu")
    assert joined == []  # refused before the process group is joined: no rank waits for this one
    ddp = DistributedDataParallelAMPEngine(torch.bfloat16, device="cpu")
    assert len(joined) == 1 and ddp.dtype == torch.bfloat16 and ddp.state_dict() == {"world_size": 2}
