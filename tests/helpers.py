"""Helpers shared by the tests and by the worker scripts they run in new processes."""
import argparse
import io

import torch
from torch import nn

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders
from looplab.learner import Learner, set_seed

PNG = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file


def make_dls(n=256, bs=16, valid=True, seed=0):
    "A small two-class problem on 8 features, in batches of `bs` (the first 4 batches again as validation)."
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long()
    batches = [(x[i:i + bs], y[i:i + bs]) for i in range(0, n, bs)]
    return DataLoaders(batches, batches[:4] if valid else None)


def make_learner(dls=None, opt_func=torch.optim.SGD, lr=0.1, **kwargs):
    "A seeded 8-16-2 MLP learner on `make_dls()`, printing its progress into a buffer."
    set_seed(0)
    learn = Learner(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), dls or make_dls(), lr=lr,
                    opt_func=opt_func, **kwargs)
    learn.progress.file = io.StringIO()
    return learn


def find_cb(learn, cls):
    "The learner's first callback of class `cls`."
    return next(cb for cb in learn.cbs if type(cb) is cls)


class StopAt(Callback):
    "Saves a checkpoint to `path` after training batch `n_iter`, then stops the run (never, with `n_iter` None)."
    order = 200

    def __init__(self, n_iter, path):
        self.n_iter = n_iter
        self.path = path

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            save_checkpoint(self.learn, self.path)
            raise CancelFitException()


def run_worker(description: str, build_learner, results) -> None:
    "A worker's command line: build the learner (stopping after --stop-at), --resume from a file, fit, save `results`."
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--stop-at", type=int, help="save --ckpt after this training batch and stop")
    parser.add_argument("--ckpt")
    parser.add_argument("--resume", help="load this checkpoint first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.stop_at, args.ckpt)
    if args.resume:
        load_checkpoint(learn, args.resume)
    learn.fit(args.epochs)
    torch.save(results(learn), args.out)
