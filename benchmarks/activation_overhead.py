"""What watching the activations costs, as a student pays it: the whole `fit` of notebook 07c (its conv net on the
signals, 1,000 training signals in batches of 40, five epochs, accuracy, one thread) alone, with `ActivationStats`
(looplab.activations: a forward hook on each of the 4 layers with weights, each describing a fixed sample of 1,024
of the layer's activations on the device) and with the live `ActivationPlot` (mode="widget": the pictures drawn
off-screen as in a notebook, the first one and the setup included; no frontend receives them here).

Rounds are interleaved (alone, stats, plot, alone, ...) in one process, after one untimed fit of each. Prints each
round's seconds, then per row the median ratio to the fit alone over the rounds, in wall-clock time and in this
process's CPU time (which a machine loaded by other processes inflates less). `benchmarks/fit_cost.py` measures the
same fit in a fresh Jupyter kernel, pictures sent to the frontend.
Run: python benchmarks/activation_overhead.py [--rounds 5] [--sample 1024]
"""
import argparse
import gc
import statistics
import time

import torch

from looplab.activations import ActivationPlot, ActivationStats
from looplab.conv import conv_net, signal_dls
from looplab.data import set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy


def fit_seconds(dls, cbs) -> tuple[float, float]:
    "Wall-clock and CPU seconds of one whole `fit(5)` of notebook 07c's conv net with `cbs`."
    set_seed(0)
    learn = Learner(conv_net(), dls, metrics=[Accuracy()], progress=False)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    learn.fit(5, cbs=cbs)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample", type=int, default=1024, help="activations described per layer and batch (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as notebook 07c
    sample = args.sample or None
    dls = signal_dls(n_train=1000, bs=40, seed=0)
    rows = {"fit alone": lambda: [], "with ActivationStats": lambda: [ActivationStats(sample=sample)],
            "with ActivationPlot": lambda: [ActivationPlot(sample=sample, mode="widget")]}
    for make in rows.values():
        fit_seconds(dls, make())  # torch's and matplotlib's first-time costs
    times = {name: [] for name in rows}
    print(f"torch {torch.__version__}, 1 thread, sample {sample}, {args.rounds} interleaved rounds")
    for i in range(args.rounds):
        for name, make in rows.items():
            times[name].append(fit_seconds(dls, make()))
        print(f"round {i + 1}: " + ", ".join(f"{name} {t[-1][0]:.2f} s ({t[-1][1]:.2f} s CPU)"
                                             for name, t in times.items()), flush=True)
    alone = times["fit alone"]
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ratios = [w / a[0] for (w, _), a in zip(runs, alone)]
        cpu_ratios = [c / a[1] for (_, c), a in zip(runs, alone)]
        print(f"{name:<22} {wall:5.2f} s  median ratio {statistics.median(ratios):.3f} (rounds "
              + " ".join(f"{r:.2f}" for r in ratios) + f");  CPU {cpu:5.2f} s  median ratio "
              f"{statistics.median(cpu_ratios):.3f}")


if __name__ == "__main__":
    main()
