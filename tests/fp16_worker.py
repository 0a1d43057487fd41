"""A by-hand mixed-precision run (looplab.fp16.MixedPrecision) in its own process, for tests/test_fp16.py.

With --stop-at N it saves a checkpoint after training batch N and stops; with --resume it loads one first. At the
end it saves its parameters, losses, skipped steps and loss scale to OUT (a plain torch.save of tensors and numbers)."""
import argparse

import torch
from torch import nn

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, load_digits
from looplab.fp16 import MixedPrecision
from looplab.learner import Learner, set_seed
from looplab.metrics import Accuracy

OVERFLOW_AT = 7  # the training batch whose gradients are made inf, so the scale halves once


class Overflow(Callback):
    "Turns one gradient to inf after backward of training batch OVERFLOW_AT."
    def on_backward_end(self):
        if self.learn.training and self.learn.n_iter == OVERFLOW_AT:
            next(self.learn.model.parameters()).grad[0, 0] = float("inf")


class StopAt(Callback):
    "Saves a checkpoint to `path` after training batch `n_iter`, then stops the run."
    order = 200

    def __init__(self, n_iter, path):
        self.n_iter = n_iter
        self.path = path

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            save_checkpoint(self.learn, self.path)
            raise CancelFitException()


def build_learner(stop_at=None, ckpt=None) -> Learner:
    "The same learner in every process: an MLP with batch norm, SGD with momentum, float16 masters and scaling."
    set_seed(5)
    model = nn.Sequential(nn.Linear(64, 96), nn.BatchNorm1d(96), nn.ReLU(), nn.Linear(96, 10))
    mp = MixedPrecision(torch.float16, growth_interval=5)
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=64, seed=3), lr=0.05,
                    opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
                    metrics=[Accuracy()], cbs=[mp, Overflow(), StopAt(stop_at, ckpt)])
    learn.remove_cbs(learn.progress)
    return learn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--stop-at", type=int)
    parser.add_argument("--ckpt")
    parser.add_argument("--resume")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.stop_at, args.ckpt)
    if args.resume:
        load_checkpoint(learn, args.resume)
    learn.fit(args.epochs)
    mp = learn.cbs[[type(c) for c in learn.cbs].index(MixedPrecision)]
    torch.save({"params": [p.detach().clone() for p in learn.model.state_dict().values()],
                "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
                "valid": torch.tensor([r["valid_loss"] for r in learn.recorder.values], dtype=torch.float64),
                "n_skipped": learn.recorder.n_skipped, "n_steps": learn.n_steps,
                "scale": mp.scaler.state_dict()}, args.out)


if __name__ == "__main__":
    main()
