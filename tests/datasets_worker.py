"""A training run on a Dataset with random augmentations, in its own process, for tests/test_datasets.py.

    python datasets_worker.py OUT NUM_WORKERS PERSISTENT full            # train 2 epochs, save the results to OUT
    python datasets_worker.py OUT NUM_WORKERS PERSISTENT stop CKPT K     # checkpoint after training batch K, stop
    python datasets_worker.py OUT NUM_WORKERS PERSISTENT resume CKPT     # load CKPT, finish the 2 epochs, save

The results (a plain `torch.save` that loads with `weights_only=True`): the final parameters, the recorded batch
losses and the first item of every batch the model saw, so that a test can say which augmentation differed."""
import random
import sys

import numpy as np
import torch
from torch import nn

from looplab.callback import Callback
from looplab.checkpoint import load_checkpoint
from looplab.checkpoint_callback import Checkpoint
from looplab.data import load_digits, set_seed
from looplab.datasets import from_datasets
from looplab.learner import Learner

from helpers import StopAfter

N_EPOCHS = 2


class AugmentedDigits:
    "8×8 digits with a random shift (torch), a random flip (Python's random) and random contrast (NumPy)."
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        img = self.x[i].reshape(8, 8)
        shift = torch.randint(-1, 2, (2,))
        img = torch.roll(img, shifts=(int(shift[0]), int(shift[1])), dims=(0, 1))
        if random.random() < 0.5:
            img = img.flip(1)
        img = img * float(np.random.uniform(0.8, 1.2)) + 0.05 * torch.randn(8, 8)
        return img.reshape(64), self.y[i]


class FirstItems(Callback):
    "Keeps the first input of every training batch: the augmentation a resumed run must replay."
    def __init__(self):
        self.items = []

    def on_batch_begin(self):
        if self.learn.training:
            self.items.append(self.learn.xb[0].clone())

    def state_dict(self):
        return {"items": list(self.items)}

    def load_state_dict(self, state):
        self.items = list(state["items"])


def build_learner(num_workers: int, persistent: bool, cbs=()) -> Learner:
    "The same learner every time: augmented digits through from_datasets, dropout, momentum."
    set_seed(5)
    x, y = load_digits()
    dls = from_datasets(AugmentedDigits(x[:640], y[:640]), AugmentedDigits(x[640:800], y[640:800]),
                                    bs=64, seed=9, num_workers=num_workers, persistent_workers=persistent)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10))
    lrn = Learner(model, dls, lr=0.1, opt_func=lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9),
                  cbs=[FirstItems(), *cbs])
    lrn.remove_cbs(lrn.progress)
    return lrn


def results(lrn: Learner) -> dict:
    items = [cb for cb in lrn.cbs if isinstance(cb, FirstItems)][0].items
    return {"params": [p.detach().clone() for p in lrn.model.parameters()],
            "losses": torch.tensor(lrn.recorder.losses), "items": torch.stack(items), "n_iter": lrn.n_iter}


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    out, num_workers, persistent, mode = argv[0], int(argv[1]), argv[2] == "1", argv[3]
    if mode == "full":
        lrn = build_learner(num_workers, persistent)
        lrn.fit(N_EPOCHS)
    elif mode == "stop":
        ckpt, k = argv[4], int(argv[5])
        lrn = build_learner(num_workers, persistent, [Checkpoint(ckpt, every_n_batches=k, at_epoch_end=False),
                                                      StopAfter(k)])
        lrn.fit(N_EPOCHS)
    else:
        ckpt = argv[4]
        set_seed(12345)  # a new process's generators are elsewhere: the checkpoint must restore them
        lrn = build_learner(num_workers, persistent, [Checkpoint(ckpt, every_n_batches=10**9, at_epoch_end=False),
                                                      StopAfter()])
        load_checkpoint(lrn, ckpt)
        lrn.fit(N_EPOCHS)
    torch.save(results(lrn), out)


if __name__ == "__main__":
    main(sys.argv[1:])
