"""What the profiler of looplab.profiler costs a whole fit: `Learner.fit` with a `Profiler`, and with the live
`ProfilePlot` drawing as in a notebook (mode="widget"), against the same fit without, on the tiny MLP of
benchmarks/loop_overhead.py and on the conv net of looplab.conv.

The profiler puts a stamp (a clock read and two list appends) before, between and after the callbacks of every
event; the live chart adds its figure's setup, its first picture and the throttled frames. Each ratio is the whole
`fit` call, setup and last picture included, over the same fit without the profiler: what a user pays.

Runs are interleaved in one process (plain, profiled, plain, profiled, ...) on the same pre-batched data with one
thread, so the machine's noise hits both alike. Prints, per row, the median of the rounds' ratios, the rounds
themselves, and the ratio of the two fastest runs (noise only ever slows a run down).
Run: python benchmarks/profiler_overhead.py [--rounds N]
"""
import argparse
import gc
import os
import statistics
import time

import torch
from torch import nn

from looplab.conv import conv_net, make_signals
from looplab.data import DataLoaders
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.profiler import Profiler, ProfilePlot


def tiny_mlp(n_batches, seed=0):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(n_batches)]
    return batches, nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def signals_conv(n_batches, seed=0):
    x, y = make_signals(64 * n_batches, seed=seed)
    batches = [(x[i:i + 64], y[i:i + 64]) for i in range(0, len(x), 64)]
    return batches, conv_net()


def fit_time(model, batches, cbs):
    "Seconds of one whole `fit(1)` call, from the Learner's creation to the return of fit."
    start = time.perf_counter()
    learn = Learner(model, DataLoaders(batches, None), lr=0.01, cbs=cbs, progress=False)
    learn.fit(1)
    took = time.perf_counter() - start
    assert len(learn.recorder.losses) == len(batches)
    return took


def measure(name, workload, n_batches, rounds, make_cbs):
    batches, model = workload(n_batches)
    fit_time(model, batches[:50], [])  # warm up allocator and kernels
    fit_time(model, batches[:50], make_cbs())
    plain, profiled, ratios = [], [], []
    for _ in range(rounds):
        gc.collect()
        plain.append(fit_time(model, batches, []))
        cbs = make_cbs()
        gc.collect()
        profiled.append(fit_time(model, batches, cbs))
        ratios.append(profiled[-1] / plain[-1])
    rounds_text = " ".join(f"{r:.2f}" for r in ratios)
    print(f"{name:44s} fit {statistics.median(plain):6.2f} s plain, {statistics.median(profiled):6.2f} s with;"
          f"  ratio median {statistics.median(ratios):.2f}x (rounds {rounds_text}); fastest/fastest "
          f"{min(profiled) / min(plain):.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, {os.cpu_count()} cores, load average "
          f"{load:.1f} at the start, {args.rounds} interleaved rounds; whole fit with / the same fit without")
    for name, workload, n_batches in (("tiny MLP 64-64-10, bs 64, 2000 batches", tiny_mlp, 2000),
                                      ("conv net on signals, bs 64, 200 batches", signals_conv, 200)):
        measure(f"{name}: Profiler", workload, n_batches, args.rounds, lambda: [Profiler()])
        measure(f"{name}: ProfilePlot", workload, n_batches, args.rounds, lambda: [ProfilePlot(mode="widget")])
    # The chart's fixed part (setup, first and last picture) shrinks with the fit's length; the kit's loss plot, for
    # scale, on the same fit.
    measure("tiny MLP, 6000 batches: ProfilePlot", tiny_mlp, 6000, args.rounds, lambda: [ProfilePlot(mode="widget")])
    measure("tiny MLP, 2000 batches: LossPlot, for scale", tiny_mlp, 2000, args.rounds,
            lambda: [LossPlot(mode="widget")])


if __name__ == "__main__":
    main()
