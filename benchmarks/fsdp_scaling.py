"""Per-step time and bytes held per rank of the same Learner under DDP and under FSDP (`looplab.fsdp.FSDPEngine`), on
1, 2 and 4 gloo processes on the CPU (one thread each); with --gpu, on the CUDA devices there are (NCCL).

The model is an MLP of --hidden units and --depth hidden layers (the default: 8.9 M parameters, 36 MB in float32),
trained with Adam, so that each rank's parameters, gradients and Adam's two moments are 4 copies of the model
under DDP. Strong scaling: the global batch (--bs) is fixed and the ranks share it. Each rank measures its own
bytes (`bytes_per_rank`: a DTensor counts its own shard) and the wall time of each of --steps steps after one
warm-up step; the step time printed is the median over steps of the slowest rank. Every ratio is against the
baseline measured in the same run: DDP on 1 process. With more processes than cores (4 on a 2-core machine) the
times measure contention as much as communication; the bytes do not depend on the machine.

Run: python benchmarks/fsdp_scaling.py [--steps 6] [--hidden 2048] [--depth 2] [--bs 64] [--gpu]
"""
import argparse
import statistics
import time

import torch
from torch import nn

from looplab.callback import Callback
from looplab.data import DataLoaders, set_seed
from looplab.distributed import launch
from looplab.engines import DistributedDataParallelEngine
from looplab.fsdp import FSDPEngine, bytes_per_rank
from looplab.learner import Learner


class StepTimes(Callback):
    "The wall time of each training batch (forward, backward, step), and the bytes held just before zero_grad."
    def __init__(self):
        self.times, self.held, self.start = [], None, None

    def on_batch_begin(self):
        self.start = time.perf_counter()

    def on_step_end(self):
        if self.learn.engine.device.type == "cuda":
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self.start)
        self.held = bytes_per_rank(self.learn.model, list(self.learn.opts.values()))


def mlp(n_in, hidden, n_out, depth):
    layers = [nn.Linear(n_in, hidden), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, n_out))


def one_rank(kind, steps, hidden, depth, bs, device):
    "One rank: `steps` + 1 steps under `kind`; its step times (the warm-up dropped) and the bytes it holds."
    set_seed(0)
    g = torch.Generator().manual_seed(0)
    n = bs * (steps + 1)
    x, y = torch.randn(n, 256, generator=g), torch.randint(0, 10, (n,), generator=g)
    engine = (FSDPEngine if kind == "FSDP" else DistributedDataParallelEngine)(device=device)
    timer = StepTimes()
    dls = DataLoaders.from_tensors(x, y, bs=bs, valid_pct=0.0, shuffle=False)
    learn = Learner(mlp(256, hidden, 10, depth), dls, opt_func=torch.optim.Adam, lr=1e-4, engine=engine,
                    cbs=[timer], progress=False)
    learn.fit(1)
    return timer.times[1:], timer.held


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--bs", type=int, default=64)
    parser.add_argument("--gpu", action="store_true", help="NCCL on the CUDA devices there are (1, 2, 4 of them)")
    args = parser.parse_args()
    backend, device = ("nccl", None) if args.gpu else ("gloo", "cpu")
    worlds = [n for n in (1, 2, 4) if not args.gpu or n <= torch.cuda.device_count()]
    rows = {}
    for n in worlds:
        for kind in ("DDP", "FSDP"):
            ranks = launch(one_rank, nprocs=n, backend=backend, args=(kind, args.steps, args.hidden, args.depth,
                                                                     args.bs, device))
            step = statistics.median(max(r[0][i] for r in ranks) for i in range(args.steps))
            held = {part: max(r[1][part] for r in ranks) for part in ranks[0][1]}
            rows[n, kind] = step, held
    base_step, base_held = rows[1, "DDP"]
    base_total = sum(base_held.values())
    n_params = base_held["params"] // 4
    print(f"MLP 256 -> {args.depth + 1} x {args.hidden} -> 10: {n_params / 1e6:.1f} M parameters; Adam; global batch "
          f"{args.bs}; {'NCCL' if args.gpu else 'gloo, CPU, 1 thread a rank'}; baseline: DDP on 1 process")
    print(f"{'ranks':>5} {'engine':>6} {'params MB':>10} {'grads MB':>9} {'Adam MB':>8} {'total MB':>9} "
          f"{'x base':>7} {'step ms':>8} {'x base':>7}")
    for (n, kind), (step, held) in rows.items():
        total = sum(held.values())
        print(f"{n:>5} {kind:>6} {held['params'] / 1e6:>10.1f} {held['grads'] / 1e6:>9.1f} "
              f"{held['optimizer'] / 1e6:>8.1f} {total / 1e6:>9.1f} {total / base_total:>7.2f} "
              f"{step * 1e3:>8.1f} {step / base_step:>7.2f}")


if __name__ == "__main__":
    main()
