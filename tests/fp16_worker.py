"""A by-hand mixed-precision run (looplab.fp16.MixedPrecision) in its own process, for tests/test_fp16.py.

With --stop-at N it saves a checkpoint after training batch N and stops; with --resume it loads one first. At the
end it saves its parameters, losses, skipped steps and loss scale to OUT (a plain torch.save of tensors and numbers)."""
import torch
from torch import nn

from looplab.callback import Callback
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.fp16 import MixedPrecision
from looplab.learner import Learner

from helpers import StopAt, find_cb, worker_main
from looplab.metrics import Accuracy

OVERFLOW_AT = 7  # the training batch whose gradients are made inf, so the scale halves once


class Overflow(Callback):
    "Turns one gradient to inf after backward of training batch OVERFLOW_AT."
    def on_backward_end(self):
        if self.learn.training and self.learn.n_iter == OVERFLOW_AT:
            next(self.learn.model.parameters()).grad[0, 0] = float("inf")


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


def results(learn) -> dict:
    "Parameters, losses, skipped steps and the loss scale: what the tests compare."
    mp = find_cb(learn, MixedPrecision)
    return {"params": [p.detach().clone() for p in learn.model.state_dict().values()],
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "valid": torch.tensor([r["valid_loss"] for r in learn.recorder.values], dtype=torch.float64),
            "n_skipped": learn.recorder.n_skipped, "n_steps": learn.n_steps, "scale": mp.scaler.state_dict()}


if __name__ == "__main__":
    worker_main(__doc__, build_learner, results)
