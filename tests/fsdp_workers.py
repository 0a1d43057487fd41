"""Functions that run inside the worker processes of tests/test_fsdp.py (a module, so that `launch` can start them)."""
import os
import signal
from functools import partial

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.tensor import DTensor

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, load_digits
from looplab.engines import DistributedDataParallelEngine
from looplab.fp16 import MixedPrecision
from looplab.fsdp import FSDPEngine, bytes_per_rank
from looplab.learner import Learner, set_seed
from looplab.regularize import GradientAccumulation, GradientClipping


def digits_learner(engine, cbs=None, n=720):
    "Adam on the first `n` digits, global batches of 60 (the last partial one dropped, so any of 1-4 ranks split evenly)."
    set_seed(0)
    x, y = load_digits()
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 48), nn.ReLU(), nn.Linear(48, 10))
    dls = DataLoaders.from_tensors(x[:n], y[:n], bs=60, valid_bs=60, drop_last=True)
    learn = Learner(model, dls, lr=3e-3, opt_func=torch.optim.Adam, engine=engine, cbs=cbs)
    learn.remove_cbs(learn.progress)
    return learn


def full_weights(model):
    "The whole weights (a DTensor gathers its shards), on the CPU."
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in model.state_dict().items()}


def fit_each(n_epochs):
    "DDP, FSDP, FSDP with gradient accumulation and in bfloat16, all clipped: whole weights, loss, bytes held, steps."
    out = {}
    legs = {"DDP": (DistributedDataParallelEngine(device="cpu"), []),
            "FSDP": (FSDPEngine(device="cpu"), []),
            "FSDP accumulate": (FSDPEngine(device="cpu"), [GradientAccumulation(2)]),
            "FSDP bf16": (FSDPEngine(device="cpu", mp_dtype=torch.bfloat16), [])}
    for name, (engine, cbs) in legs.items():
        learn = digits_learner(engine, cbs=[GradientClipping(max_norm=0.5), *cbs])
        learn.fit(n_epochs)
        out[name] = (full_weights(learn.model), learn.recorder.last_valid["valid_loss"],
                     bytes_per_rank(learn.model, list(learn.opts.values())), learn.n_steps)
    return out


class SaveAt(Callback):
    "At training batch `n_iter`, save a checkpoint to `path`; `stop`: then end the fit."
    order = 100

    def __init__(self, path, n_iter, stop=True):
        self.path, self.n_iter, self.stop = path, n_iter, stop

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            save_checkpoint(self.learn, self.path)
            if self.stop:
                raise CancelFitException()


class ItemLog(Callback):
    "Rank 0 appends the global batch's items (gathered over the ranks) of every training batch to `path`."
    def __init__(self, path):
        self.path = path

    def on_batch_begin(self):
        if not self.learn.training:
            return
        mine = self.learn.xb.sum(1)  # an item's fingerprint: the sum of its pixels
        parts = self.learn.engine.sync_tensor(nn.functional.pad(mine, (0, 60 - len(mine)), value=-1), "all_gather")
        if self.learn.engine.is_master_process:
            items = sorted(float(v) for part in parts for v in part if v >= 0)
            with open(self.path, "a") as f:
                f.write(" ".join(f"{v:g}" for v in items) + "\n")


def run(ckpt, log, save_at=None, resume=False, n_epochs=2):
    "A digits run under FSDP: stopped and saved at `save_at`, or resumed from `ckpt`; its whole weights and counters."
    learn = digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(ckpt, save_at), ItemLog(log)])
    if resume:
        load_checkpoint(learn, ckpt)
    learn.fit(n_epochs)
    return full_weights(learn.model), learn.n_iter, learn.n_steps


class KillDuringSave(Callback):
    "At batch `n_iter`, rank 1 dies by SIGKILL inside DCP's write, once its own shards are written."
    order = 100

    def __init__(self, path, n_iter):
        self.path, self.n_iter = path, n_iter

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            if self.learn.engine.rank == 1:
                write = dcp.FileSystemWriter.write_data

                def write_then_die(*args, **kwargs):
                    write(*args, **kwargs).wait()
                    os.kill(os.getpid(), signal.SIGKILL)
                dcp.FileSystemWriter.write_data = write_then_die
            save_checkpoint(self.learn, self.path)


def killed_run(path, save_at, kill_at):
    learn = digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(path, save_at, stop=False),
                                                          KillDuringSave(path, kill_at)])
    learn.fit(1)


def resume_and_save(path, save_at):
    "The killed run, loaded and continued to batch `save_at`, where it saves (and stops)."
    learn = digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(path, save_at), KillDuringSave(path, None)])
    load_checkpoint(learn, path)
    learn.fit(1)
    return learn.n_iter


def resumes_at(path):
    "Load `path` into a fresh FSDP learner: where it resumes, and the files beside it."
    learn = digits_learner(FSDPEngine(device="cpu"))
    where = load_checkpoint(learn, path)["resumes_at"]
    return where, sorted(p.name for p in path.parent.iterdir())


def refused(case):
    "The message refusing `case`, and how many steps were taken (a fit that raises tears the group down: one a launch)."
    learn = digits_learner(FSDPEngine(device="cpu"))
    if case == "LBFGS":
        learn.opt_func = partial(torch.optim.LBFGS, max_iter=2)
        action = partial(learn.fit, 1)
    elif case == "DataParallel":
        learn.model = nn.DataParallel(learn.model)
        action = partial(learn.fit, 1)
    elif case == "MixedPrecision":
        learn.add_cbs(MixedPrecision(torch.bfloat16))
        action = partial(learn.fit, 1)
    elif case == "optimizer before sharding":
        learn.create_opt()
        learn.engine.init_components(learn.model)  # sharded after the optimizer was built
        action = partial(learn.fit, 1)
    elif case == "to_fp16":
        action = learn.to_fp16
    else:
        x, y = load_digits()
        dls = DataLoaders.from_tensors(x, y, bs=60, valid_bs=358)  # 179 a rank: 180 items make 2 batches, 179 one
        action = partial(Learner, nn.Linear(64, 10), dls, engine=FSDPEngine(device="cpu"))
    try:
        action()
    except ValueError as e:
        return str(e), learn.n_steps
    return None, None


def save_and_load_weights(path):
    "learn.save after a fit under FSDP (the whole weights, for plain torch); learn.load into a fresh FSDP learner and a refusal."
    learn = digits_learner(FSDPEngine(device="cpu"))
    learn.fit(1)
    whole = full_weights(learn.model)
    learn.save(path)
    try:
        learn.save(path.with_name("both.pt"), with_opt=True)
        refusal = None
    except ValueError as e:
        refusal = str(e)
    fresh = digits_learner(FSDPEngine(device="cpu"))
    fresh.fit(0)  # sharded, untrained
    fresh.load(path)
    return whole, full_weights(fresh.model), refusal
