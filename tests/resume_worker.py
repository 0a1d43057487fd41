"""A training run in its own process, for tests/test_checkpoint.py: it checkpoints, stops or resumes on request.

It prints `fit` when training starts and the run's `n_iter` after every training batch, and at the end saves
its final parameters and history to OUT (a plain `torch.save` that loads with `weights_only=True`)."""
import argparse
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders, load_digits
from looplab.learner import Learner, set_seed
from looplab.metrics import Accuracy


class Noise(Callback):
    "Draws from Python's, NumPy's and PyTorch's generators on every training batch."
    def __init__(self):
        self.draws = 0

    def on_batch_begin(self):
        if self.learn.training:
            scale = 0.01 * (1 + random.random()) * (1 + float(np.random.rand()))
            self.learn.xb = self.learn.xb + scale * torch.randn_like(self.learn.xb)
            self.draws += 1

    def state_dict(self):
        return {"draws": self.draws}

    def load_state_dict(self, state):
        self.draws = state["draws"]


class StopAfter(Callback):
    "Stops the run after training batch `n_iter`, or at the end of epoch `epoch` (after the Checkpoint saved)."
    order = 200

    def __init__(self, n_iter=None, epoch=None):
        self.n_iter = n_iter
        self.epoch = epoch

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            raise CancelFitException()

    def on_epoch_end(self):
        if self.learn.epoch == self.epoch:
            raise CancelFitException()


class SaveAt(Callback):
    "Saves a checkpoint to `{base}-batch{n_iter}.pt` after the given training batches, `{base}-epoch{e}.pt` after epochs."
    order = 100

    def __init__(self, base=None, n_iters=(), epochs=()):
        self.base = base
        self.n_iters = set(n_iters)
        self.epochs = set(epochs)

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter in self.n_iters:
            save_checkpoint(self.learn, f"{self.base}-batch{self.learn.n_iter}.pt")

    def on_epoch_end(self):
        if self.learn.epoch in self.epochs:
            save_checkpoint(self.learn, f"{self.base}-epoch{self.learn.epoch}.pt")


class PrintProgress(Callback):
    "Prints `n_iter` after every training batch, so that a test can kill the process at a chosen moment."
    order = 300  # after the Checkpoint and StopAfter

    def on_train_begin(self):
        print("fit", flush=True)

    def on_batch_end(self):
        if self.learn.training:
            print(self.learn.n_iter, flush=True)


def build_learner(ckpt=None, every=None, at_epoch_end=False, stop_after_batch=None, stop_after_epoch=None,
                  save_at=(), save_at_epoch=(), ballast_mb=0) -> Learner:
    "A learner with dropout, Adam and the Noise callback, identical in every process that builds it."
    set_seed(11)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
    if ballast_mb:
        model.register_buffer("ballast", torch.zeros(ballast_mb * 2**18))  # makes every checkpoint slow to write
    cbs = [Noise(), StopAfter(stop_after_batch, stop_after_epoch), SaveAt(ckpt, save_at, save_at_epoch),
           PrintProgress()]
    if every or at_epoch_end:
        cbs.append(Checkpoint(ckpt, every_n_batches=every, at_epoch_end=at_epoch_end))
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=32, seed=3), lr=0.01,
                    opt_func=torch.optim.Adam, metrics=[Accuracy()], cbs=cbs)
    learn.remove_cbs(learn.progress)
    return learn


def results(learn: Learner, resumed_from: dict, fit_seconds: float) -> dict:
    "What the tests compare: parameters, every recorded number but times, and where the run resumed from."
    rows = learn.recorder.values
    return {"params": [p.detach().clone() for p in learn.model.parameters()],
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "values": {key: torch.tensor([r[key] for r in rows], dtype=torch.float64)
                       for key in ("epoch", "train_loss", "valid_loss", "accuracy")},
            "draws": learn.cbs[[type(c) for c in learn.cbs].index(Noise)].draws, "n_iter": learn.n_iter,
            "resumed_from": resumed_from, "fit_seconds": fit_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ckpt", help="the checkpoint file")
    parser.add_argument("--every", type=int, help="checkpoint every this many training batches")
    parser.add_argument("--at-epoch-end", action="store_true", help="checkpoint at the end of every epoch")
    parser.add_argument("--save-at", type=int, nargs="*", default=[], help="save {ckpt}-batch{n}.pt after these batches")
    parser.add_argument("--save-at-epoch", type=int, nargs="*", default=[], help="save {ckpt}-epoch{e}.pt after these")
    parser.add_argument("--stop-after-batch", type=int)
    parser.add_argument("--stop-after-epoch", type=int)
    parser.add_argument("--resume", help="load this checkpoint first, if it exists")
    parser.add_argument("--ballast-mb", type=int, default=0, help="MiB of zeros in the model, to slow writes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.ckpt, args.every, args.at_epoch_end, args.stop_after_batch, args.stop_after_epoch,
                          args.save_at, args.save_at_epoch, args.ballast_mb)
    resumed_from = {}
    if args.resume and Path(args.resume).exists():
        load_checkpoint(learn, args.resume)
        resumed_from = read_checkpoint(args.resume)["state"]["loop"]
    start = time.perf_counter()
    learn.fit(args.epochs)
    torch.save(results(learn, resumed_from, time.perf_counter() - start), args.out)


if __name__ == "__main__":
    main()
