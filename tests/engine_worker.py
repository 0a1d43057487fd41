"""A run in its own process, for tests/test_engine.py: two optimizers switched by a callback, optionally under
AMPEngine(float16) with a gradient overflow injected so that the loss scaler skips steps and changes its scale.

It trains, optionally saving a checkpoint after training batch N and stopping there, or resuming from a
checkpoint first, and saves its final parameters and history to OUT (loads with `weights_only=True`)."""
import argparse
import math

import torch
from torch import nn

from looplab.callback import Callback
from looplab.checkpoint import load_checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engine import AMPEngine, DeviceEngine
from looplab.learner import Learner
from looplab.metrics import Accuracy

from helpers import StopAt


class Alternate(Callback):
    "Steps optimizer 'body' on two batches out of three and 'head' on the third, counting batches as state."
    def __init__(self):
        self.count = 0

    def on_batch_begin(self):
        if self.learn.training:
            self.learn.opt = self.learn.opts["head" if self.count % 3 == 2 else "body"]
            self.count += 1

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class Overflow(Callback):
    "Puts an inf into a gradient on every training batch whose n_iter is a multiple of `every`."
    def __init__(self, every):
        self.every = every

    def on_backward_end(self):
        if self.every and self.learn.n_iter % self.every == 0:
            next(self.learn.model.parameters()).grad.view(-1)[0] = math.inf


def build_learner(amp: bool, overflow_every: int, path=None, stop_at=None) -> Learner:
    "The same learner in every process: dropout, two optimizers (Adam on all, SGD on the head), the callbacks."
    set_seed(5)
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Dropout(0.2), nn.Linear(48, 10))
    engine = AMPEngine(torch.float16, device="cpu", init_scale=2.0**12) if amp else DeviceEngine("cpu")
    cbs = [Alternate(), Overflow(overflow_every), StopAt(stop_at, path)]
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=32, seed=7), metrics=[Accuracy()],
                    cbs=cbs, engine=engine)
    learn.opts = {"body": torch.optim.Adam(model.parameters(), lr=1e-3),
                  "head": torch.optim.SGD(model[3].parameters(), lr=0.05, momentum=0.9)}
    learn.remove_cbs(learn.progress)
    return learn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--amp", action="store_true", help="AMPEngine(float16) with a GradScaler")
    parser.add_argument("--overflow-every", type=int, default=0, help="inject an inf gradient every N batches")
    parser.add_argument("--ckpt")
    parser.add_argument("--stop-at", type=int, help="save a checkpoint after this training batch and stop")
    parser.add_argument("--resume", action="store_true", help="load --ckpt first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.amp, args.overflow_every, args.ckpt, args.stop_at)
    if args.resume:
        load_checkpoint(learn, args.ckpt)
    learn.fit(2)
    engine_state = learn.engine.state_dict()
    torch.save({"params": [p.detach().clone() for p in learn.model.parameters()],
                "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
                "valid": torch.tensor([r["valid_loss"] for r in learn.recorder.values], dtype=torch.float64),
                "n_iter": learn.n_iter, "n_steps": learn.n_steps, "n_skipped": learn.recorder.n_skipped,
                "scale": engine_state["scaler"]["scale"] if "scaler" in engine_state else None,
                "opt_states": {name: opt.state_dict() for name, opt in learn.opts.items()}}, args.out)


if __name__ == "__main__":
    main()
