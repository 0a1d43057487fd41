"""Functions that run inside the worker processes of tests/test_distributed.py and tests/test_engines.py.

They live in a module (not in the test files) so that `launch` can also start them with spawn."""
import os
import time
from functools import partial

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch import nn

from looplab.callback import Callback, CancelFitException, CancelStepException, CancelZeroGradException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engines import DistributedDataParallelAMPEngine, DistributedDataParallelEngine
from looplab.learner import Learner
from looplab.metrics import Accuracy
from looplab.regularize import GradientAccumulation


def toy_data(n=96, features=16, classes=4, seed=3):
    "Random inputs whose last column is the item's index, and random labels."
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    x = torch.cat([x, torch.arange(n, dtype=torch.float32)[:, None]], dim=1)
    return x, torch.randint(0, classes, (n,), generator=g)


class DropIndex(nn.Module):
    "A small MLP that ignores the index column."
    def __init__(self, features=16, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 32), nn.Tanh(), nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x[:, :-1])


def toy_learner(engine, n=96, bs=16, cbs=None, seed=3):
    set_seed(0)
    dls = DataLoaders.from_tensors(*toy_data(n, seed=seed), bs=bs, valid_pct=0.0, seed=7)
    learn = Learner(DropIndex(), dls, lr=0.1, opt_func=partial(torch.optim.SGD, momentum=0.9), engine=engine, cbs=cbs)
    learn.remove_cbs(learn.progress)
    return learn


def ddp_toy_params(n_epochs):
    "(a): train the toy model under DDP; return the parameters."
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"))
    learn.fit(n_epochs)
    return {k: v.clone() for k, v in learn.model.state_dict().items()}, learn.n_steps


def ddp_digits_learner(engine):
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=60), metrics=[Accuracy()], engine=engine,
                    opt_func=partial(torch.optim.SGD, momentum=0.9))
    learn.remove_cbs(learn.progress)
    return learn


def ddp_digits_validate():
    "(b): one epoch under DDP, then validate; return the weights, the metrics and this rank's item count."
    learn = ddp_digits_learner(DistributedDataParallelEngine(device="cpu"))
    learn.fit(1)
    result = learn.validate()
    return learn.model.state_dict(), result, learn.recorder.valid_loss.count


class ItemLog(Callback):
    "Appends the global batch of item indices (gathered over ranks) of every training batch to a file, on rank 0."
    def __init__(self, path):
        self.path = path

    def on_batch_begin(self):
        if not self.learn.training:
            return
        mine = self.learn.xb[:, -1].long()
        parts = self.learn.engine.sync_tensor(torch.nn.functional.pad(mine, (0, 16 - len(mine)), value=-1),
                                              "all_gather")
        items = sorted(int(i) for part in parts for i in part if i >= 0)
        if self.learn.engine.is_master_process:
            with open(self.path, "a") as f:
                f.write(" ".join(map(str, items)) + "\n")


class SaveAndStop(Callback):
    "At training batch `n_iter`: save a checkpoint to `path`, then stop the run."
    order = 100

    def __init__(self, path, n_iter=None):
        self.path = path
        self.n_iter = n_iter

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            save_checkpoint(self.learn, self.path)
            raise CancelFitException()


def resume_run(log, ckpt, stop_at=None, resume=False, n=100, n_epochs=2):
    "(c): the toy run with global batches of 12, logging its items; stop and save at `stop_at`, or resume from `ckpt`."
    engine = DistributedDataParallelEngine(device="cpu")
    learn = toy_learner(engine, n=n, bs=12, cbs=[ItemLog(log), SaveAndStop(ckpt, stop_at)])
    if resume:
        load_checkpoint(learn, ckpt)
    learn.fit(n_epochs)
    return learn.n_iter, learn.n_steps


class Accumulate(Callback):
    "Accumulate gradients over windows of `every` batches: no sync, no step, no zero_grad before a window ends."
    order = -30

    def __init__(self, every):
        self.every = every

    def on_batch_begin(self):
        self.learn.sync_grads = self.learn.n_iter % self.every == 0

    def on_step_begin(self):
        if not self.learn.sync_grads:
            raise CancelStepException()

    def on_zero_grad_begin(self):
        if not self.learn.sync_grads:
            raise CancelZeroGradException()


class CountAllReduces(Callback):
    "Counts DDP's gradient all-reduces with a communication hook."
    def __init__(self):
        self.count = 0

    def on_train_begin(self):
        def hook(state, bucket):
            self.count += 1
            return allreduce_hook(None, bucket)
        self.learn.model.register_comm_hook(None, hook)


def count_allreduces(every):
    "(f): one epoch of 8 batches accumulating over `every`; return the all-reduces and the steps."
    counter = CountAllReduces()
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"), n=128, bs=16,
                        cbs=[Accumulate(every), counter])
    learn.fit(1)
    return counter.count, learn.n_steps, {k: v.clone() for k, v in learn.model.state_dict().items()}


def engine_checks(ckpt):
    "(d): every method of the DDP engines, run on each rank; assertions inside, a summary returned."
    engine = DistributedDataParallelEngine(device="cpu")
    rank, world = engine.rank, engine.world_size
    assert (engine.is_master_process, engine.is_worker_process) == (rank == 0, rank != 0)
    assert engine.backend == "gloo" and engine.local_rank == rank
    t = torch.tensor([float(rank + 1), 2.0])
    assert engine.sync_tensor(t, "sum").tolist() == [sum(range(1, world + 1)), 2.0 * world]
    assert engine.sync_tensor(t, "mean").tolist() == [sum(range(1, world + 1)) / world, 2.0]
    assert [g.tolist() for g in engine.sync_tensor(t, "all_gather")] == [[r + 1.0, 2.0] for r in range(world)]
    assert t.tolist() == [rank + 1.0, 2.0]  # unchanged by the collectives
    try:
        engine.sync_tensor(t, "max")
        raise AssertionError("expected a ValueError")
    except ValueError as e:
        assert "'max'" in str(e)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    wrapped = engine.init_components(model)
    assert isinstance(wrapped, nn.parallel.DistributedDataParallel) and engine.unwrap_model(wrapped) is model
    opt = torch.optim.Adam(wrapped.parameters(), lr=0.1)
    loss = wrapped(torch.randn(8, 4)).pow(2).mean()
    engine.backward_loss(loss, wrapped, opt)
    assert engine.optimizer_step(loss, wrapped, opt) is True
    packed = engine.pack_checkpoint(wrapped, {"main": opt})
    assert not any(k.startswith("module.") for k in packed["model"])
    assert packed["engine"] == {"kind": "DistributedDataParallelEngine", "state": {"world_size": world}}
    other = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    other_opt = torch.optim.Adam(other.parameters(), lr=0.1)
    engine.unpack_checkpoint(packed, other, {"main": other_opt})
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    assert other_opt.state_dict()["state"][0]["step"] == 1
    engine.zero_grad(loss, wrapped, opt)
    assert all(p.grad is None for p in model.parameters())
    engine.save_checkpoint({"rank_that_wrote": torch.tensor(rank)}, ckpt)  # rank 0 writes; all wait for it
    assert int(engine.load_checkpoint(ckpt)["rank_that_wrote"]) == 0  # every rank reads it
    assert engine.deinit_components(wrapped) is model
    with engine.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    try:
        DistributedDataParallelEngine(device="cpu", sync_bn=True)
        raise AssertionError("expected a ValueError")
    except ValueError as e:
        assert "sync_bn=True needs CUDA" in str(e)
    amp = DistributedDataParallelAMPEngine(torch.bfloat16, device="cpu")
    assert amp.scaler is None and amp.rank == rank
    with amp.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    engine.close()
    assert not dist.is_initialized()
    return rank, world, os.getpid()


def write_pid_then(pid_dir, action):
    "(e): write this process's PID to `pid_dir`, then fail on rank 1, or wait, or sleep."
    rank = dist.get_rank()
    tmp = os.path.join(pid_dir, f"{rank}.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(pid_dir, f"{rank}.pid"))  # whole or absent, whenever this process is ended
    if action == "fail" and rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(pid_dir, "0.pid")) and time.monotonic() < deadline:
            time.sleep(0.01)  # so that the test knows both PIDs whichever rank was scheduled first
        raise KeyError("a bug on rank 1")
    if action == "fail":
        dist.barrier()  # waits for rank 1, which never comes: the launcher must end this process
    if action == "sleep":
        time.sleep(600)
    return rank


def ordered_run(log, ckpt=None, stop_at=None, resume=False, n_epochs=2):
    "Ordered data (shuffle=False) with an explicit validation set: log each global batch; stop, save or resume."
    x, y = toy_data(n=96)
    set_seed(0)
    dls = DataLoaders.from_tensors(x[:80], y[:80], bs=16, shuffle=False, valid=(x[80:], y[80:]))
    engine = DistributedDataParallelEngine(device="cpu") if dist.is_initialized() else None
    learn = Learner(DropIndex(), dls, lr=0.1, opt_func=partial(torch.optim.SGD, momentum=0.9), engine=engine,
                    cbs=[ItemLog(log), SaveAndStop(ckpt, stop_at)], progress=False)
    if resume:
        load_checkpoint(learn, ckpt)
    learn.fit(n_epochs)
    return {k: v.clone() for k, v in learn.model.state_dict().items()}, [r["valid_loss"] for r in learn.recorder.values]


def ddp_lbfgs_params(n_epochs):
    "Train the toy model under DDP with LBFGS; return the parameters and each step's count of closure evaluations."
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"))
    learn.opt_func = partial(torch.optim.LBFGS, max_iter=4)
    evaluations = []

    class Count(Callback):
        def on_batch_begin(self):
            evaluations.append(0)

        def on_backward_end(self):
            evaluations[-1] += 1

    learn.fit(n_epochs, cbs=Count())
    return {k: v.clone() for k, v in learn.model.state_dict().items()}, evaluations


def ddp_save_then_load(path):
    "learn.save then, at once, learn.load on every rank: the save returns only once rank 0's file is written."
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"))
    learn.fit(1)
    learn.save(path, with_opt=True)
    other = toy_learner(DistributedDataParallelEngine(device="cpu"))
    other.load(path, with_opt=True)
    same = all(torch.equal(a, b) for a, b in zip(learn.model.parameters(), other.model.parameters()))
    return same and sorted(other.opts) == ["main"]


def ddp_to_bf16():
    "to_bf16() on a DDP learner: still every rank of a DDP run, now in bfloat16."
    learn = toy_learner(DistributedDataParallelEngine(device="cpu")).to_bf16()
    learn.fit(1)
    engine = learn.engine
    return (type(engine).__name__, engine.dtype, engine.world_size, engine.is_master_process,
            {k: v.clone() for k, v in learn.model.state_dict().items()})


def ddp_accumulated_params(n_epochs):
    "GradientAccumulation(2) under DDP: the parameters each rank ends with."
    learn = toy_learner(DistributedDataParallelEngine(device="cpu"), cbs=[GradientAccumulation(2)])
    learn.fit(n_epochs)
    return {k: v.clone() for k, v in learn.model.state_dict().items()}
