"""Functions that run inside the worker processes of tests/test_fsdp.py (a module, so that `launch` can start them)."""
import errno
import os
import shutil
import signal
import time
from functools import partial

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.tensor import DTensor

from looplab import shards
from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engines import DistributedDataParallelEngine
from looplab.fp16 import MixedPrecision
from looplab.files import read_checkpoint
from looplab.fsdp import FSDPEngine, bytes_per_rank, default_layers
from looplab.learner import Learner
from looplab.regularize import GradientAccumulation, GradientClipping


def adam_digits_learner(engine, cbs=None, n=720, model=None):
    "Adam on the first `n` digits, global batches of 60 (the last partial one dropped, so any of 1-4 ranks split evenly)."
    set_seed(0)
    x, y = load_digits()
    if model is None:
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
        learn = adam_digits_learner(engine, cbs=[GradientClipping(max_norm=0.5), *cbs])
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
    learn = adam_digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(ckpt, save_at), ItemLog(log)])
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
    learn = adam_digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(path, save_at, stop=False),
                                                          KillDuringSave(path, kill_at)])
    learn.fit(1)


def resume_and_save(path, save_at):
    "The killed run, loaded and continued to batch `save_at`, where it saves (and stops)."
    learn = adam_digits_learner(FSDPEngine(device="cpu"), cbs=[SaveAt(path, save_at), KillDuringSave(path, None)])
    load_checkpoint(learn, path)
    learn.fit(1)
    return learn.n_iter


def resumes_at(path):
    "Load `path` into a fresh FSDP learner: where it resumes, and the files beside it."
    learn = adam_digits_learner(FSDPEngine(device="cpu"))
    where = load_checkpoint(learn, path)["resumes_at"]
    return where, sorted(p.name for p in path.parent.iterdir())


def refused(case):
    "The message refusing `case`, and how many steps were taken (a fit that raises tears the group down: one a launch)."
    learn = adam_digits_learner(FSDPEngine(device="cpu"))
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
    learn = adam_digits_learner(FSDPEngine(device="cpu"))
    learn.fit(1)
    whole = full_weights(learn.model)
    learn.save(path)
    try:
        learn.save(path.with_name("both.pt"), with_opt=True)
        refusal = None
    except ValueError as e:
        refusal = str(e)
    fresh = adam_digits_learner(FSDPEngine(device="cpu"))
    fresh.fit(0)  # sharded, untrained
    fresh.load(path)
    return whole, full_weights(fresh.model), refusal


def _attempt(action):
    "None if `action()` returns, else (the exception's class name, its message): caught as any Exception."
    try:
        action()
    except Exception as e:
        return type(e).__name__, str(e)
    return None


def _on_rank0(learn, action):
    "`action()` on rank 0 (a file operation), then every rank waits for it."
    if learn.engine.is_master_process:
        action()
    learn.engine.barrier()


def _listing(learn, folder) -> list[str]:
    "The folder's names as every rank reads them at one moment: after every rank's last step, before any rank's next."
    learn.engine.barrier()
    names = sorted(p.name for p in folder.iterdir())
    learn.engine.barrier()
    return names


def _flip_byte(file):
    "Change one byte in the middle of `file`."
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x40
    file.write_bytes(bytes(data))


def broken_targets_and_shards(tmp):
    "Sharded saves to bad targets and on a full disk, a copied checkpoint, and damaged, partial or missing shards."
    learn = adam_digits_learner(FSDPEngine(device="cpu"), n=240)
    learn.fit(1)
    out = {}

    def make_targets():
        (tmp / "ro.pt").write_bytes(b"old")
        os.chmod(tmp / "ro.pt", 0o444)
        os.mkfifo(tmp / "pipe.pt")
    _on_rank0(learn, make_targets)
    out["read-only"] = _attempt(lambda: save_checkpoint(learn, tmp / "ro.pt"))
    out["pipe"] = _attempt(lambda: save_checkpoint(learn, tmp / "pipe.pt"))
    path = tmp / "run.pt"
    save_checkpoint(learn, path)
    out["saved"] = _listing(learn, tmp)
    write = dcp.FileSystemWriter.write_data
    if learn.engine.rank == 1:
        def full_disk(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        dcp.FileSystemWriter.write_data = full_disk
    out["full disk"] = _attempt(lambda: save_checkpoint(learn, path))
    dcp.FileSystemWriter.write_data = write
    out["after full disk"] = _listing(learn, tmp)
    for case, rank, name in (("rank 1's target", 1, "writable_path"), ("rank 0's commit", 0, "write_checkpoint")):
        kept = getattr(shards, name)
        if learn.engine.rank == rank:  # a failure on one rank only: its own disk, its own permissions
            def fails(*args, **kwargs):
                raise PermissionError(f"{case} fails here")
            setattr(shards, name, fails)
        out[case] = _attempt(lambda: save_checkpoint(learn, path))
        setattr(shards, name, kept)
        out[f"after {case}"] = _listing(learn, tmp)
    _on_rank0(learn, lambda: shutil.copy(path, tmp / "keep.pt"))
    save_checkpoint(learn, path)
    save_checkpoint(learn, path)
    out["the copy"] = _attempt(lambda: load_checkpoint(adam_digits_learner(FSDPEngine(device="cpu"), n=240), tmp / "keep.pt"))
    read = dcp.FileSystemReader.read_data
    if learn.engine.rank == 1:
        def unreadable(*args, **kwargs):
            raise OSError(errno.EIO, "Input/output error")
        dcp.FileSystemReader.read_data = unreadable
    out["read error"] = _attempt(lambda: load_checkpoint(adam_digits_learner(FSDPEngine(device="cpu"), n=240), path))
    dcp.FileSystemReader.read_data = read
    folder = tmp / read_checkpoint(path)["state"]["shards"]
    shard = sorted(folder.glob("*.distcp"))[0]
    for case, damage in (("damaged", lambda: _flip_byte(shard)), ("partial", shard.unlink),
                         ("no folder", lambda: shutil.rmtree(folder))):
        _on_rank0(learn, damage)
        out[case] = _attempt(lambda: load_checkpoint(adam_digits_learner(FSDPEngine(device="cpu"), n=240), path))
    return out, shard.name, folder.name


class Tied(nn.Module):
    "Two layers sharing one weight (tied weights), and a third between them."
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.mid = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.b.weight = self.a.weight
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.b(torch.relu(self.mid(self.a(x)))))


class NoReset(nn.Module):
    "A module with a parameter of its own and no reset_parameters."
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(10))

    def forward(self, x):
        return x * self.scale


def digits_model():
    return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 48), nn.ReLU(), nn.Linear(48, 10))


def seams(whole_opt_file):
    "The seams of FSDP with precision, learn.load, tied weights, meta models and inference: what each does."
    out = {}
    learn = adam_digits_learner(FSDPEngine(device="cpu"), n=240)
    learn.fit(1)
    x = load_digits()[0]
    out["get_preds"] = tuple(learn.get_preds()[0].shape)
    out["predict"] = tuple(learn.predict(x[0]).shape)
    out["with_opt"] = _attempt(lambda: learn.load(whole_opt_file, with_opt=True))
    steps = learn.n_steps
    learn.to_bf16()
    out["to_bf16"] = _attempt(lambda: learn.fit(1))
    out["to_bf16 steps"] = learn.n_steps - steps
    learn.engine = FSDPEngine(device="cpu")
    learn.fit(1)  # the engine it was sharded with: trains on, with the optimizer state it had
    out["fit after refusals"] = learn.n_steps - steps
    bf16 = adam_digits_learner(FSDPEngine(device="cpu", mp_dtype=torch.bfloat16), n=240)
    bf16.fit(1)
    bf16.engine = FSDPEngine(device="cpu")
    out["engine swap"] = _attempt(lambda: bf16.fit(1))
    out["float32"] = _attempt(lambda: FSDPEngine(device="cpu").with_precision(torch.float32))
    tied = adam_digits_learner(FSDPEngine(device="cpu"), n=240)
    tied.model = Tied()
    out["tied"] = _attempt(lambda: tied.fit(1))
    out["tied, layers="] = _attempt(lambda: adam_digits_learner(FSDPEngine(device="cpu", layers=lambda model: [
        m for m in default_layers(model) if m not in (model.get_submodule("a"), model.get_submodule("b"))]), n=240,
        model=Tied()).fit(1))
    set_seed(0)
    whole = digits_model().state_dict()
    set_seed(0)
    with torch.device("meta"):
        model = digits_model()
    meta = adam_digits_learner(FSDPEngine(device="cpu"), n=240, model=model)
    set_seed(0)  # the generators as they were when the whole model was built
    meta.fit(0)
    out["meta gap"] = max((full_weights(meta.model)[k] - whole[k]).abs().max().item() for k in whole)
    with torch.device("meta"):
        no_reset = nn.Sequential(nn.Linear(64, 10), NoReset())
        partly = digits_model()
    partly[0] = nn.Linear(64, 96)
    for case, model in (("meta without reset_parameters", no_reset), ("partly meta", partly)):
        out[case] = _attempt(lambda: adam_digits_learner(FSDPEngine(device="cpu"), n=240, model=model).fit(0))
    learn.engine.inference_wait_s = 1.0
    start = time.monotonic()
    if learn.engine.rank == 0:  # the mistake: inference on the master only
        out["get_preds on rank 0"] = _attempt(learn.get_preds)
    out["waited"] = time.monotonic() - start
    return out


def batchnorm_resume(ckpt, save_at):
    "A BatchNorm model under FSDP: the whole run, and the same run saved at `save_at`, stopped and resumed."
    def bn_learner(cbs):
        set_seed(0)
        model = nn.Sequential(nn.Linear(64, 48), nn.BatchNorm1d(48), nn.ReLU(), nn.Linear(48, 10))
        return adam_digits_learner(FSDPEngine(device="cpu"), cbs=cbs, n=240, model=model)
    whole = bn_learner([SaveAt(ckpt, None)])
    whole.fit(2)
    bn_learner([SaveAt(ckpt, save_at)]).fit(2)
    resumed = bn_learner([SaveAt(ckpt, None)])
    load_checkpoint(resumed, ckpt)
    resumed.fit(2)
    return full_weights(whole.model), full_weights(resumed.model)
