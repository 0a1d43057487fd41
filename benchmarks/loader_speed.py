"""Items per second of `looplab.datasets.from_datasets` (looplab's order, every item seeded from (seed, epoch, position))
against a plain `DataLoader(shuffle=True)` over the same dataset, whose items cost about 50 µs each (a busy wait,
as decoding and augmenting a small image would) plus a random augmentation, with 0 and 2 worker processes.

The two loaders run in this process in interleaved rounds (plain, seeded, plain, seeded, ...) so that the
machine's noise hits both alike; with workers, both keep their workers between epochs (persistent_workers=True)
and one warm-up epoch is left out, so that starting processes is not what is measured. Prints the median
items/s of each and the ratio seeded/plain, median and of the two fastest runs (noise only ever slows a run down),
seeding all three global generators (the default) and PyTorch's only (`seed_generators=("torch",)`).
Run: python benchmarks/loader_speed.py [--rounds N] [--items N] [--cost-us US]
"""
import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader

from looplab.datasets import ItemKey, SeededDataset, from_datasets, item_seeds


class CostlyItems:
    "`n` items of 64 floats, each costing `cost_us` µs of busy work and a random augmentation from torch."
    def __init__(self, n: int, cost_us: float):
        self.x = torch.rand(n, 64)
        self.y = torch.randint(0, 10, (n,))
        self.cost = cost_us * 1e-6

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        end = time.perf_counter() + self.cost
        while time.perf_counter() < end:
            pass
        return self.x[i] + 0.1 * torch.randn(64), self.y[i]


def items_per_second(loader, n_items: int) -> float:
    "One pass over `loader`, in items per second."
    start = time.perf_counter()
    for xb, yb in loader:
        pass
    return n_items / (time.perf_counter() - start)


def measure(num_workers: int, rounds: int, n_items: int, cost_us: float, bs: int,
            generators: tuple) -> tuple[list, list]:
    ds = CostlyItems(n_items, cost_us)
    persistent = num_workers > 0
    plain = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=num_workers, persistent_workers=persistent)
    seeded = from_datasets(ds, bs=bs, num_workers=num_workers, persistent_workers=persistent,
                                       seed_generators=generators).train
    items_per_second(plain, n_items)  # warm-up: start the workers, fill the caches
    items_per_second(seeded, n_items)
    plain_rates = []
    seeded_rates = []
    for _ in range(rounds):
        plain_rates.append(items_per_second(plain, n_items))
        seeded_rates.append(items_per_second(seeded, n_items))
    return plain_rates, seeded_rates


def fetch_cost(n_items: int, cost_us: float, generators: tuple, repeats: int = 15) -> tuple[float, float]:
    "µs per item in this process: a plain fetch of an item costing `cost_us`, and what seeding adds to a fetch."
    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) / n_items * 1e6  # the fastest run: the least disturbed by other processes

    costly = CostlyItems(n_items, cost_us)
    free = CostlyItems(n_items, 0.0)  # the same augmentation, no busy wait: the overhead stands out of the noise
    seeded = SeededDataset(free, generators)
    keys = [ItemKey(i, 0, i, s) for i, s in enumerate(item_seeds(0, 0, range(n_items)))]
    plain_us = best(lambda: [costly[i] for i in range(n_items)])
    overhead_us = best(lambda: seeded.__getitems__(keys)) - best(lambda: [free[i] for i in range(n_items)])
    return plain_us, overhead_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--cost-us", type=float, default=50.0)
    parser.add_argument("--bs", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.items} items of ~{args.cost_us:g} µs, batches of {args.bs}, {args.rounds} interleaved rounds")
    print(f"{'workers':>7} | {'seeded generators':>20} | {'plain items/s':>13} | {'seeded items/s':>14} | "
          f"{'ratio (median)':>14} | {'ratio (fastest)':>15}")
    for num_workers in (0, 2):
        for generators in (("torch", "random", "numpy"), ("torch",)):
            plain, seeded = measure(num_workers, args.rounds, args.items, args.cost_us, args.bs, generators)
            ratio = statistics.median(plain) / statistics.median(seeded)
            fastest = max(plain) / max(seeded)
            print(f"{num_workers:>7} | {','.join(generators):>20} | {statistics.median(plain):>13,.0f} | "
                  f"{statistics.median(seeded):>14,.0f} | {ratio:>14.3f} | {fastest:>15.3f}")
    print("ratio = time per item of from_datasets / time per item of the plain DataLoader (1.05 = 5% slower)")
    print("\nThe fetch alone, in this process (fastest of 15 runs; the overhead measured on items without the wait):")
    for generators in (("torch", "random", "numpy"), ("torch",)):
        plain_us, overhead_us = fetch_cost(args.items, args.cost_us, generators)
        print(f"  seeding {','.join(generators):>18}: {plain_us:6.2f} µs/item plain, +{overhead_us:5.2f} µs/item "
              f"seeded: ratio {(plain_us + overhead_us) / plain_us:.3f}")


if __name__ == "__main__":
    main()
