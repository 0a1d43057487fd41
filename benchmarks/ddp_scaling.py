"""Items per second of the same Learner on 1 and on 2 gloo processes on the CPU (one thread each), and with --gpu,
DeviceEngine in float32 against AMPEngine in float16 on one CUDA device.

CPU: weak scaling, as DDP is used: each process keeps its batch of --bs items, so W processes train on global
batches of W * bs; the group's throughput is W * bs * batches / the slowest rank's time for the timed epochs
(after one warm-up epoch). Noise only ever slows a run down, so the ratio of the fastest runs is printed beside
the ratio of the medians; on a machine whose cores other work shares, neither measures scaling. The workload
is a compute-heavy MLP, so that the all-reduce of its gradients is small next to the matrix products. The goal on a 2-core machine is a
ratio of at least 1.7.

Run: python benchmarks/ddp_scaling.py [--rounds 3] [--gpu]
"""
import argparse
import statistics
import time
from functools import partial

import torch
from torch import nn

from looplab.data import DataLoaders, set_seed
from looplab.engine import AMPEngine, DeviceEngine
from looplab.engines import DistributedDataParallelEngine
from looplab.learner import Learner
from looplab.distributed import launch


def mlp(n_in, hidden, n_out, depth=2):
    layers = [nn.Linear(n_in, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, n_out))


def learner(engine, global_bs, n_batches, n_in=256, hidden=1024, n_out=10):
    set_seed(0)
    g = torch.Generator().manual_seed(0)
    n = global_bs * n_batches
    x = torch.randn(n, n_in, generator=g)
    y = torch.randint(0, n_out, (n,), generator=g)
    dls = DataLoaders.from_tensors(x, y, bs=global_bs, valid_pct=0.0)
    learn = Learner(mlp(n_in, hidden, n_out), dls, lr=0.01, opt_func=partial(torch.optim.SGD, momentum=0.9),
                    engine=engine)
    learn.remove_cbs(learn.progress)
    return learn


def cpu_worker(bs, n_batches, epochs):
    "One rank: warm up one epoch, then time `epochs` epochs; the group's items per second (slowest rank's time)."
    engine = DistributedDataParallelEngine(device="cpu")
    learn = learner(engine, bs * engine.world_size, n_batches)
    learn.fit(1)
    torch.distributed.barrier()
    start = time.perf_counter()
    learn.fit(epochs)
    elapsed = time.perf_counter() - start
    slowest = max(float(t) for t in engine.sync_tensor(torch.tensor(elapsed, dtype=torch.float64), "all_gather"))
    return engine.world_size * bs * n_batches * epochs / slowest


def cpu_scaling(rounds, bs, n_batches, epochs):
    results = {1: [], 2: []}
    for _ in range(rounds):
        for nprocs in (1, 2):  # interleaved, so that the machine's noise hits both alike
            results[nprocs].append(launch(cpu_worker, nprocs=nprocs, args=(bs, n_batches, epochs), threads=1)[0])
    one = statistics.median(results[1])
    two = statistics.median(results[2])
    print(f"CPU, gloo, 1 thread per process, MLP 256-1024-1024-10, {bs} items per process per batch")
    print(f"  1 process : {one:10.0f} items/s   (runs: {', '.join(f'{r:.0f}' for r in results[1])})")
    print(f"  2 processes: {two:10.0f} items/s   (runs: {', '.join(f'{r:.0f}' for r in results[2])})")
    fastest = max(results[2]) / max(results[1])
    print(f"  ratio 2/1 : {two / one:.2f}x of the medians, {fastest:.2f}x of the fastest runs "
          "(goal >= 1.7x on 2 otherwise idle cores)")


def gpu_items_per_s(engine, bs, n_batches, epochs):
    learn = learner(engine, bs, n_batches, n_in=1024, hidden=4096, n_out=1000)
    learn.fit(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    learn.fit(epochs)
    torch.cuda.synchronize()
    return bs * n_batches * epochs / (time.perf_counter() - start)


def gpu_precision(rounds, bs, n_batches, epochs):
    if not torch.cuda.is_available():
        raise SystemExit("--gpu: no CUDA device here")
    results = {"fp32": [], "fp16": []}
    for _ in range(rounds):
        results["fp32"].append(gpu_items_per_s(DeviceEngine("cuda"), bs, n_batches, epochs))
        results["fp16"].append(gpu_items_per_s(AMPEngine(torch.float16, device="cuda"), bs, n_batches, epochs))
    fp32 = statistics.median(results["fp32"])
    fp16 = statistics.median(results["fp16"])
    print(f"{torch.cuda.get_device_name()}, MLP 1024-4096-4096-1000, batch {bs}")
    print(f"  DeviceEngine fp32        : {fp32:12.0f} items/s")
    print(f"  AMPEngine float16 + scaler: {fp16:12.0f} items/s")
    print(f"  ratio fp16/fp32          : {fp16 / fp32:.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bs", type=int, default=1024, help="items per process per batch (CPU)")
    parser.add_argument("--batches", type=int, default=10, help="batches per epoch")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs")
    parser.add_argument("--gpu", action="store_true", help="also compare fp32 and float16 AMP on a CUDA device")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU scaling part")
    args = parser.parse_args()
    if not args.no_cpu:
        cpu_scaling(args.rounds, args.bs, args.batches, args.epochs)
    if args.gpu:
        gpu_precision(args.rounds, 1024, args.batches, args.epochs)


if __name__ == "__main__":
    main()
