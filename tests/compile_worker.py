"""A compiled run (learn.compile with the aot_eager backend) in its own process, for tests/test_compile.py.

With --stop-at N it saves a checkpoint after training batch N and stops; with --resume it loads one first. At the
end it saves its parameters, losses and validation losses to OUT (a plain torch.save of tensors)."""
import torch
from torch import nn

from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy

from helpers import StopAt, worker_main


def build_learner(stop_at=None, ckpt=None) -> Learner:
    "The same compiled learner in every process: an MLP with batch norm and dropout, Adam, a short last batch."
    set_seed(7)
    model = nn.Sequential(nn.Linear(64, 96), nn.BatchNorm1d(96), nn.ReLU(), nn.Dropout(0.1), nn.Linear(96, 10))
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=64, seed=3), lr=1e-3, opt_func=torch.optim.Adam,
                    metrics=[Accuracy()], cbs=[StopAt(stop_at, ckpt)], progress=False)
    return learn.compile(backend="aot_eager")


def results(learn) -> dict:
    "Parameters, every batch's loss and every epoch's validation loss: what the test compares."
    return {"params": [p.detach().clone() for p in learn.model.state_dict().values()],
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "valid": torch.tensor([r["valid_loss"] for r in learn.recorder.values], dtype=torch.float64)}


if __name__ == "__main__":
    worker_main(__doc__, build_learner, results)
