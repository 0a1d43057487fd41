"""How long each exercise's check takes: the whole check of the reference (every check runs, as for any answer), and
of its first known mistake (every check on the answer, plus, the first time, each known mistake's fingerprint).

Each is printed in seconds and as a ratio against a baseline measured in the same run, one epoch of the five-line
loop over the 1,797 digits (an MLP 64-64-10, batches of 64, SGD), so that the figures compare across machines: a
check is meant to take about a second or two, a few epochs of that loop. Each time is the median of `--repeats` runs,
with one torch thread (as the tour runs), the exercises' keys imported before the clock starts.
Run: python benchmarks/exercise_checks.py [--repeats N] [NAME ...]
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from looplab.data import load_digits
from looplab.practice import exercise, exercises


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_epoch_of_the_bare_loop() -> None:
    x, y = load_digits()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=64):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("names", nargs="*", help="exercises to time (default: all of them)")
    args = parser.parse_args()
    os.environ["LOOPLAB_PROGRESS"] = "off"
    torch.set_num_threads(1)
    names = args.names or exercises()
    baseline = median_seconds(one_epoch_of_the_bare_loop, args.repeats)
    print(f"baseline: one epoch of the five-line loop over the digits, {baseline * 1e3:.1f} ms (median of {args.repeats})")
    print(f"{'exercise':<22} {'notebook':<18} {'reference':>10} {'ratio':>7} {'a mistake':>10} {'ratio':>7}")
    for name in names:
        ex = exercise(name)
        ex._fingerprints = None  # the first failure works out the known mistakes' fingerprints: time it too
        mistake = median_seconds(lambda: ex.check(ex.mistakes[0].answer), 1) if ex.mistakes else float("nan")
        reference = median_seconds(lambda: ex.check(ex.reference), args.repeats)
        print(f"{name:<22} {ex.notebook:<18} {reference:>9.2f}s {reference / baseline:>6.1f}x "
              f"{mistake:>9.2f}s {mistake / baseline:>6.1f}x")


if __name__ == "__main__":
    main()
