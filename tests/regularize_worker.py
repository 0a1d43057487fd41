"""A run that combines a 1cycle schedule, gradient clipping, gradient accumulation, mixup, SWA, early stopping and
save-best, for tests/test_regularize.py. It can checkpoint after a given training batch and die there (os._exit, as a
killed process: no on_train_end), or resume from such a checkpoint; at the end it saves what the test compares."""
import argparse

import torch
from torch import nn

from looplab.checkpoint import load_checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy
from looplab.monitor import SWA, EarlyStopping, SaveBestModel
from looplab.regularize import GradientAccumulation, GradientClipping, MixUp
from looplab.schedule import fit_one_cycle

from helpers import StopAt

N_EPOCHS = 4


def build(die_after=None, ckpt=None) -> Learner:
    "The same learner and callbacks in every process (a resumed run must attach the same callbacks)."
    set_seed(5)
    model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))
    cbs = [GradientClipping(1.0), GradientAccumulation(3), MixUp(0.4, seed=1), SWA(start_epoch=1),
           EarlyStopping(patience=2), SaveBestModel("accuracy"), StopAt(die_after, ckpt, die=True)]
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=64, seed=3), metrics=[Accuracy()], cbs=cbs,
                    opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9))
    learn.remove_cbs(learn.progress)
    return learn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--die-after", type=int, help="checkpoint to --ckpt after this training batch, then die")
    parser.add_argument("--ckpt", help="the checkpoint file")
    parser.add_argument("--resume", action="store_true", help="load --ckpt first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build(args.die_after, args.ckpt)
    if args.resume:
        load_checkpoint(learn, args.ckpt)
    fit_one_cycle(learn, N_EPOCHS, lr_max=0.3)
    by_type = {type(cb).__name__: cb for cb in learn.cbs}
    torch.save({"params": [p.detach().clone() for p in learn.model.state_dict().values()],
                "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
                "lrs": torch.tensor(learn.recorder.lrs, dtype=torch.float64),
                "valid": torch.tensor([r["valid_loss"] for r in learn.recorder.values], dtype=torch.float64),
                "n_steps": learn.n_steps, "n_averaged": by_type["SWA"].n_averaged,
                "best_epoch": by_type["SaveBestModel"].best_epoch}, args.out)


if __name__ == "__main__":
    main()
