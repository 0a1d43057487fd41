"""A GAN run on the ring of 8 Gaussians in its own process, for tests/test_gan.py: AMPEngine(float16) with its
GradScaler, two Adam optimizers, a FixedGANSwitcher(3, 2).

With --stop-at N it saves a checkpoint after training batch N and stops; with --resume it loads one first. At the
end it saves parameters, both loss histories, the switcher's counters and the scaler's state to OUT."""
import argparse

import torch
from torch import nn

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, make_rings
from looplab.engine import AMPEngine
from looplab.gan import FixedGANSwitcher, GANTrainer, gan_learner
from looplab.learner import Learner, set_seed


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


def mlp(n_in, n_out, hidden=64):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def build_learner(stop_at=None, ckpt=None) -> Learner:
    "The same GAN learner in every process."
    set_seed(3)
    real, _ = make_rings(1024, std=0.1, seed=3)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0)
    learn = gan_learner(mlp(2, 2), mlp(2, 1), dls, switcher=FixedGANSwitcher(3, 2), cbs=[StopAt(stop_at, ckpt)],
                        engine=AMPEngine(torch.float16, device="cpu", init_scale=2.0**10))
    learn.engine.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)  # so the scale moves
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
    trainer = learn.cbs[[type(c) for c in learn.cbs].index(GANTrainer)]
    switcher = learn.cbs[[type(c) for c in learn.cbs].index(FixedGANSwitcher)]
    torch.save({"params": [p.detach().clone() for p in learn.model.parameters()],
                "opts": {name: [s["exp_avg"].clone() for s in opt.state.values()] for name, opt in learn.opts.items()},
                "gen_losses": torch.tensor(trainer.gen_losses, dtype=torch.float64),
                "crit_losses": torch.tensor(trainer.crit_losses, dtype=torch.float64),
                "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
                "switcher": switcher.state_dict(), "scaler": learn.engine.scaler.state_dict(),
                "n_skipped": learn.recorder.n_skipped, "gen_mode": learn.model.gen_mode}, args.out)


if __name__ == "__main__":
    main()
