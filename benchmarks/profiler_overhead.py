"""What the profiler of looplab.profiler costs: time per batch of `Learner.fit` with a `Profiler` (and with the live
`ProfilePlot` drawing as in a notebook, mode="widget") against the same fit without, on the tiny MLP of
benchmarks/loop_overhead.py and on the conv net of looplab.conv.

The profiler puts a stamp (a clock read and two list appends) before, between and after the callbacks of every
event; its ratio is what those stamps, and their reading at each flush, cost.

Runs are interleaved in one process (plain, profiled, plain, profiled, ...) on the same pre-batched data with one
thread, so the machine's noise hits both alike. Prints the median ratio profiled/plain and the ratio of the two
fastest runs (noise only ever slows a run down).
Run: python benchmarks/profiler_overhead.py [--rounds N]
"""
import argparse
import gc
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
    learn = Learner(model, DataLoaders(batches, None), lr=0.01, cbs=cbs, progress=False)
    start = time.perf_counter()
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
        a = fit_time(model, batches, [])
        cbs = make_cbs()
        gc.collect()
        b = fit_time(model, batches, cbs)
        plain.append(a / n_batches * 1e6)
        profiled.append(b / n_batches * 1e6)
        ratios.append(b / a)
    print(f"{name:48s} plain {statistics.median(plain):8.1f} µs/batch  with {statistics.median(profiled):8.1f} µs/batch"
          f"  median ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f});"
          f" fastest/fastest {min(profiled) / min(plain):.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, {args.rounds} interleaved rounds")
    for name, workload, n_batches in (("tiny MLP 64-64-10, bs 64", tiny_mlp, 2000),
                                      ("conv net on signals, bs 64", signals_conv, 200)):
        measure(f"{name}, Profiler", workload, n_batches, args.rounds, lambda: [Profiler()])
        # The live chart drawing as in a notebook: off-screen PNGs, at most every 250 ms and 10 % of the time, and
        # always the final picture: a fixed part per fit, so it weighs most on short fits like these (~0.3 s).
        measure(f"{name}, ProfilePlot (widget)", workload, n_batches, args.rounds,
                lambda: [ProfilePlot(mode="widget")])
    # The fixed part shrinks with the fit's length; and the kit's loss plot, for scale, on the same fit.
    measure("tiny MLP, ProfilePlot (widget), 3x", tiny_mlp, 6000, args.rounds, lambda: [ProfilePlot(mode="widget")])
    measure("tiny MLP, LossPlot (widget), for scale", tiny_mlp, 2000, args.rounds, lambda: [LossPlot(mode="widget")])


if __name__ == "__main__":
    main()
