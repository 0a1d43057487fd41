"""How the looplab shuffle scales: memory, time to the first index, seek time and throughput at N = 1e8 and 1e9.

The shuffle is given notebook 11c's never-stored `FeistelPermutation` (`permutation=FeistelPermutation`): the
default order, notebook 01's `shuffled_order` held as an array, is `torch.randperm` — the row it is compared with.

Beside it, in the same run: `torch.randperm(N)` at N = 1e8 (1e9 extrapolated by bytes: it stores N int64s), and
the cost of resuming by iterating through k skipped items, as a sampler that cannot seek must. Every case runs
in its own process, so that its peak memory (the kernel's ru_maxrss) is its own; "extra" is the peak minus the
peak after imports. One thread. Targets: < 64 MB extra at N = 1e9, seek < 1 ms whatever the position,
>= 5M indices/s on one core.

Run: python benchmarks/sampler_scale.py
"""
import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time


def peak_mb() -> float:
    "Peak resident memory of this process so far, in MB (Linux reports ru_maxrss in KB)."
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(call, repeats: int = 1) -> float:
    "Median seconds of `call()`."
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rate(step, per_step: int, seconds: float = 1.5) -> float:
    "Indices per second of calling `step()` (which yields `per_step` indices) for about `seconds`."
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += per_step
    return count / (time.perf_counter() - start)


def case_looplab(n: int) -> dict:
    import numpy as np
    import torch
    from looplab.permutation import FeistelPermutation
    from looplab.sampler_chain import SkipSampler, make_batch_sampler
    from looplab.samplers import ReproducibleShuffleSampler
    torch.set_num_threads(1)
    list(itertools.islice(ReproducibleShuffleSampler(range(1000), 0, FeistelPermutation), 500))  # loaded and warm
    base = peak_mb()
    start = time.perf_counter()
    sampler = ReproducibleShuffleSampler(range(n), seed=0, permutation=FeistelPermutation)
    first = next(iter(sampler))
    first_index = time.perf_counter() - start
    seek = {name: timed(lambda: next(iter(SkipSampler(sampler, position))), repeats=50)
            for name, position in (("0", 0), ("N/2", n // 2), ("N-1", n - 1))}
    assert next(iter(SkipSampler(sampler, n - 1))) == FeistelPermutation(n, 0)[n - 1]
    perm = FeistelPermutation(n, seed=0)
    chunk = 16384
    starts = itertools.count(n // 3, chunk)
    vectorised = rate(lambda: perm.take(np.arange(start := next(starts), start + chunk)), chunk)
    items = iter(SkipSampler(sampler, n // 3))
    iterated = rate(lambda: sum(1 for _ in itertools.islice(items, 100_000)), 100_000)
    batches = iter(make_batch_sampler(range(n), "training", 0, num_replicas=8, rank=3, batch_size=256, skip=10**6,
                                      permutation=FeistelPermutation))
    chained = rate(lambda: sum(1 for _ in itertools.islice(batches, 400)), 400 * 256)
    return {"first": first, "extra_mb": peak_mb() - base, "first_index_s": first_index, "seek_s": seek,
            "vectorised": vectorised, "iterated": iterated, "chained": chained}


def case_randperm(n: int) -> dict:
    import torch
    torch.set_num_threads(1)
    torch.randperm(1000)
    base = peak_mb()
    start = time.perf_counter()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    first_index = time.perf_counter() - start
    return {"first": int(perm[0]), "extra_mb": peak_mb() - base, "first_index_s": first_index}


def case_iterate(n: int, k: int) -> dict:
    import torch
    from looplab.permutation import FeistelPermutation
    from looplab.samplers import ReproducibleShuffleSampler
    torch.set_num_threads(1)
    sampler = ReproducibleShuffleSampler(range(n), seed=0, permutation=FeistelPermutation)
    start = time.perf_counter()
    items = iter(sampler)
    for _ in range(k):  # what a skip does when the chain below cannot seek
        next(items)
    item = next(items)
    return {"first": item, "resume_s": time.perf_counter() - start}


def run_case(*args) -> dict:
    "One case in a fresh process."
    command = [sys.executable, __file__, "--case", *map(str, args)]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    ms = lambda s: f"{s * 1e3:8.3f} ms"
    print(f"{'case':<34}{'N':>6}{'extra memory':>15}{'first index':>14}{'seek 0':>13}{'seek N/2':>13}{'seek N-1':>13}"
          f"{'indices/s (1 core)':>34}")
    looplab = {}
    for n in (10**8, 10**9):
        r = looplab[n] = run_case("looplab", n)
        print(f"{'looplab shuffle':<34}{f'1e{len(str(n)) - 1}':>6}{r['extra_mb']:>12.1f} MB{ms(r['first_index_s']):>14}"
              + "".join(f"{ms(r['seek_s'][p]):>13}" for p in ("0", "N/2", "N-1"))
              + f"   {r['vectorised'] / 1e6:5.1f}M numpy, {r['iterated'] / 1e6:4.1f}M iter, {r['chained'] / 1e6:4.1f}M chain")
    r = run_case("randperm", 10**8)
    print(f"{'torch.randperm':<34}{'1e8':>6}{r['extra_mb']:>12.1f} MB{ms(r['first_index_s']):>14}"
          f"{'(after the first index: O(1) lookups)':>39}")
    print(f"{'torch.randperm (extrapolated)':<34}{'1e9':>6}{r['extra_mb'] * 10:>12.1f} MB{ms(r['first_index_s'] * 10):>14}"
          f"{'(8 bytes per item, linear time)':>39}")
    for k in (10**6, 10**7):
        r = run_case("iterate", 10**9, k)
        print(f"{f'resume by iterating k=1e{len(str(k)) - 1} items':<34}{'1e9':>6}{'':>15}{ms(r['resume_s']):>14}"
              f"{'(vs seek: ' + ms(looplab[10**9]['seek_s']['N/2']).strip() + ')':>39}")
    big = looplab[10**9]
    print()
    print(f"targets at N=1e9: extra memory {big['extra_mb']:.1f} MB (< 64 MB: {big['extra_mb'] < 64}); "
          f"worst seek {max(big['seek_s'].values()) * 1e3:.3f} ms (< 1 ms: {max(big['seek_s'].values()) < 1e-3}); "
          f"{big['vectorised'] / 1e6:.1f}M indices/s vectorised, {big['iterated'] / 1e6:.1f}M iterated "
          f"(>= 5M: {min(big['vectorised'], big['iterated']) >= 5e6})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", help="run one case and print its JSON (used internally)")
    args = parser.parse_args()
    if args.case:
        name, *numbers = args.case
        cases = {"looplab": case_looplab, "randperm": case_randperm, "iterate": case_iterate}
        print(json.dumps(cases[name](*map(int, numbers))))
    else:
        main()
