"""A training run in its own process, for tests/test_checkpoint.py: it checkpoints, stops or resumes on request.

It prints `fit` when training starts and the run's `n_iter` after every training batch, and at the end saves
its final parameters and history to OUT (a plain `torch.save` that loads with `weights_only=True`)."""
import random
import time

import numpy as np
import torch
from torch import nn

from looplab.callback import Callback
from looplab.checkpoint import save_checkpoint
from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy
from helpers import PrintProgress, StopAfter, kill_and_resume_parser, resume_if_saved, run_results


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
    return run_results(learn, ("epoch", "train_loss", "valid_loss", "accuracy"), resumed_from,
                       draws=learn.cbs[[type(c) for c in learn.cbs].index(Noise)].draws, fit_seconds=fit_seconds)


def main() -> None:
    parser = kill_and_resume_parser(__doc__)
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
    resumed_from = resume_if_saved(learn, args.resume)
    start = time.perf_counter()
    learn.fit(args.epochs)
    torch.save(results(learn, resumed_from, time.perf_counter() - start), args.out)


if __name__ == "__main__":
    main()
