"""Steps per second of the same Learner in fp32, in AMP float16 (with GradScaler) and in AMP bfloat16, on a
matmul-heavy model: an MLP of 4096-wide linear layers. The three run side by side in one process, in interleaved
rounds, on the same pre-batched data already on the device; CUDA is synchronized before every clock reading.

Run: python benchmarks/amp_speedup.py [--device cpu|cuda] [--rounds N] [--steps N] [--bs N] [--layers N]
(default device: cuda if available). On the CPU the defaults are small so that the run takes well under a minute: torch's CPU float16 matmul
is not optimized (about 20x slower than fp32 here), so float16 dominates the CPU run.
"""
import argparse
import statistics
import time

import torch
from torch import nn

from looplab.data import DataLoaders
from looplab.engine import AMPEngine, DeviceEngine
from looplab.learner import Learner


def make_model(width: int, n_layers: int, n_out: int = 10) -> nn.Module:
    "`n_layers` Linear(width, width)+ReLU blocks and a classifier head: almost all the time is in matmuls."
    layers = []
    for _ in range(n_layers):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def make_learner(kind: str, device: torch.device, batches, width: int, n_layers: int) -> Learner:
    "A Learner on `batches` whose engine is fp32 ('fp32'), AMP float16 ('fp16') or AMP bfloat16 ('bf16')."
    torch.manual_seed(0)
    engines = {"fp32": lambda: DeviceEngine(device),
               "fp16": lambda: AMPEngine(torch.float16, device=device),
               "bf16": lambda: AMPEngine(torch.bfloat16, device=device)}
    learn = Learner(make_model(width, n_layers), DataLoaders(batches, None), lr=1e-3, engine=engines[kind]())
    learn.remove_cbs(learn.progress)
    return learn


def sync(device: torch.device) -> None:
    "Wait for the device's queued work, so that the clock reads finished steps."
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def steps_per_second(learn: Learner, device: torch.device) -> float:
    "Time one `fit(1)` over the batches; return optimizer steps per second."
    steps_before = learn.n_steps
    sync(device)
    start = time.perf_counter()
    learn.fit(1)
    sync(device)
    elapsed = time.perf_counter() - start
    return (learn.n_steps - steps_before) / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved timed rounds (default: 5 cuda, 2 cpu)")
    parser.add_argument("--steps", type=int, default=None, help="steps per round (default: 50 cuda, 2 cpu)")
    parser.add_argument("--bs", type=int, default=None, help="batch size (default: 1024 cuda, 64 cpu)")
    parser.add_argument("--layers", type=int, default=None, help="4096x4096 layers (default: 8 cuda, 1 cpu)")
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False on this machine; use --device cpu")
    device = torch.device(args.device)
    rounds = args.rounds or (5 if cuda else 2)
    n_steps = args.steps or (50 if cuda else 2)
    bs = args.bs or (1024 if cuda else 64)
    n_layers = args.layers or (8 if cuda else 1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(bs, args.width, generator=g).to(device)
    y = torch.randint(0, 10, (bs,), generator=g).to(device)
    batches = [(x, y)] * n_steps
    kinds = ["fp32", "fp16", "bf16"]
    learners = {k: make_learner(k, device, batches, args.width, n_layers) for k in kinds}
    name = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}; MLP {n_layers}x Linear({args.width}, {args.width}), "
          f"batch {bs}, {n_steps} steps per round, {rounds} rounds")
    for learn in learners.values():
        learn.fit(1)  # warm-up: kernels chosen, memory allocated, optimizer state created
    results = {k: [] for k in kinds}
    for _ in range(rounds):
        for k in kinds:
            results[k].append(steps_per_second(learners[k], device))
    base = statistics.median(results["fp32"])
    print(f"{'precision':<22}{'steps/s (median)':>18}{'best':>10}{'ratio vs fp32':>16}")
    labels = {"fp32": "fp32", "fp16": "AMP float16 + scaler", "bf16": "AMP bfloat16"}
    for k in kinds:
        med = statistics.median(results[k])
        print(f"{labels[k]:<22}{med:>18.2f}{max(results[k]):>10.2f}{med / base:>15.2f}x")
    for k in kinds:
        loss = learners[k].recorder.losses[-1]
        print(f"last loss {labels[k]}: {loss:.4f}")


if __name__ == "__main__":
    main()
