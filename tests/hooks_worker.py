"""Functions that run inside the gloo worker processes of tests/test_hooks.py (a module, so that `launch` can start
them with spawn too)."""
import copy

import torch
from torch import nn

from looplab.callback import Callback
from looplab.conv import conv_net, signal_dls
from looplab.engines import DistributedDataParallelEngine
from looplab.activations import ActivationStats, _sample_index
from looplab.data import set_seed
from looplab.learner import Learner

CHANNELS = (8, 16)  # conv_net's layers: 1 Conv1d, 3 Conv1d, 8 Linear


class SeeBatches(Callback):
    "Keeps each training batch this rank saw and the weights it went through, and what `learn.model.modules()` finds."
    def __init__(self):
        self.batches = []
        self.convs_in_wrapper = None
        self.wrapper = None

    def on_train_begin(self):
        self.wrapper = type(self.learn.model).__name__
        self.convs_in_wrapper = [m for m in self.learn.model.modules() if isinstance(m, nn.Conv1d)]

    def on_batch_begin(self):
        if self.learn.training:
            model = self.learn.engine.unwrap_model(self.learn.model)
            self.batches.append((self.learn.xb.clone(), copy.deepcopy(model.state_dict())))


def hand_rows(model: nn.Sequential, xb: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    "Each named layer's output on `xb`, by slicing the Sequential, and its statistics on the same sample, with torch."
    ends = {"1": 2, "3": 4, "8": len(model)}  # a layer's output: the Sequential up to and with it
    rows = {}
    with torch.no_grad():
        for name in names:
            a = model[:ends[name]](xb).flatten()
            if a.numel() > 1024:
                a = a[_sample_index(a.numel(), 1024)]
            size = a.abs()
            index = (size.clamp(max=10) * 4).floor().long().clamp(max=39)  # 40 bins of width 0.25 over [0, 10]
            hist = torch.bincount(index, minlength=40).float() / a.numel()
            near_zero = (size < 0.05).sum(dtype=torch.float32) / a.numel()
            rows[name] = torch.cat([torch.stack([a.mean(), torch.std(a, correction=0), near_zero]), hist])
    return rows


def ddp_rank_stats(by_class: bool) -> dict:
    "Fit one epoch under DDP with ActivationStats; return its rows and the hand computation on this rank's shard."
    set_seed(0)
    dls = signal_dls(n_train=160, n_valid=40, bs=40, seed=1)  # 4 global batches of 40: 20 items per rank
    stats = ActivationStats(nn.Conv1d if by_class else None)
    seen = SeeBatches()
    learn = Learner(conv_net(channels=CHANNELS), dls, engine=DistributedDataParallelEngine(device="cpu"),
                    cbs=[stats, seen], progress=False)
    learn.fit(1)
    reference = copy.deepcopy(learn.model)
    hand = {name: [] for name in stats.names}
    for xb, weights in seen.batches:
        reference.load_state_dict(weights)
        for name, row in hand_rows(reference, xb, stats.names).items():
            hand[name].append(row)
    rows = stats.state_dict()["rows"]  # (batches, layers, 3 + bins)
    return {"names": stats.names, "rows": [rows[:, i].clone() for i in range(len(stats.names))],
            "hand": [torch.stack(hand[name]) for name in stats.names], "batch_sizes": [len(x) for x, _ in seen.batches],
            "wrapper": seen.wrapper, "same_layers": seen.convs_in_wrapper == [m for m in stats.layers if isinstance(m, nn.Conv1d)],
            "hooks_left": sum(len(m._forward_hooks) for m in learn.model.modules())}
