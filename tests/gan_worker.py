"""A GAN run on the ring of 8 Gaussians in its own process, for tests/test_gan.py: AMPEngine(float16) with its
GradScaler, two Adam optimizers, a FixedGANSwitcher(3, 2).

With --stop-at N it saves a checkpoint after training batch N and stops; with --resume it loads one first. At the
end it saves parameters, both loss histories, the switcher's counters and the scaler's state to OUT. With GAN_MODE=dcgan
in the environment it trains with looplab.gan_images' DCGANTrainer instead (DCGAN mode, no switcher)."""
import os

import torch
from torch import nn

from looplab.data import DataLoaders, make_rings, set_seed
from looplab.engine import AMPEngine
from looplab.gan import FixedGANSwitcher, GANTrainer, gan_learner
from looplab.gan_images import GAN_COLUMNS, DCGANTrainer, GANColumns
from looplab.learner import Learner

from helpers import StopAt, worker_main


def mlp(n_in, n_out, hidden=64):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def build_learner(stop_at=None, ckpt=None) -> Learner:
    "The same GAN learner in every process."
    set_seed(3)
    real, _ = make_rings(1024, std=0.1, seed=3)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0)
    trainer_cls = DCGANTrainer if os.environ.get("GAN_MODE") == "dcgan" else GANTrainer
    switcher = FixedGANSwitcher(3, 2) if trainer_cls.alternates else None
    learn = gan_learner(mlp(2, 2), mlp(2, 1), dls, switcher=switcher, cbs=[GANColumns(), StopAt(stop_at, ckpt)],
                        trainer_cls=trainer_cls, engine=AMPEngine(torch.float16, device="cpu", init_scale=2.0**10))
    learn.engine.amp.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)  # so the scale moves
    learn.remove_cbs(learn.progress)
    return learn


def results(learn) -> dict:
    "Parameters, both optimizers' moments, both losses, the epoch rows' GAN columns, the switcher, the scaler."
    trainer = next(cb for cb in learn.cbs if isinstance(cb, GANTrainer))
    switchers = [cb for cb in learn.cbs if type(cb) is FixedGANSwitcher]
    return {"params": [p.detach().clone() for p in learn.model.parameters()],
            "opts": {name: [s["exp_avg"].clone() for s in opt.state.values()] for name, opt in learn.opts.items()},
            "gen_losses": torch.tensor(trainer.gen_losses, dtype=torch.float64),
            "crit_losses": torch.tensor(trainer.crit_losses, dtype=torch.float64),
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "switcher": switchers[0].state_dict() if switchers else {"total_gen": len(trainer.gen_losses)},
            "columns": torch.tensor([[row[name] for name in GAN_COLUMNS] for row in learn.recorder.values],
                                    dtype=torch.float64),
            "scaler": learn.engine.scaler.state_dict(),
            "n_skipped": learn.recorder.n_skipped, "gen_mode": learn.model.gen_mode}


if __name__ == "__main__":
    worker_main(__doc__, build_learner, results)
