"""Steps per second of the same Learner in fp32, in AMP float16 (with GradScaler) and in AMP bfloat16, on a
matmul-heavy model: an MLP of 4096-wide linear layers. The three run side by side in one process, in interleaved
rounds, on the same pre-batched data already on the device; CUDA is synchronized before every clock reading.

On CUDA it then compares each Learner with the loop a user writes without looplab on the same model and batches:
the five lines in fp32, with torch.autocast in bfloat16, with torch.autocast and a GradScaler in float16 — at a size
where the GPU is the bottleneck (4 x Linear(8192, 8192), batch 8192) and at a tiny one where the host is (64-64-10,
batch 64). On the CPU those rows are skipped with a message (benchmarks/loop_overhead.py has the CPU rows). The
host-bound float16 row is where a host sync per step shows: AMPEngine's step reads nothing from the GPU beyond
GradScaler's own read (tests/test_engine.py counts them on the CPU), so it should match the hand-written loop.

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


HAND_SIZES = {"GPU-bound, 4 x Linear(8192, 8192), batch 8192": (8192, 4, 8192, 20),
              "host-bound, 64-64-10, batch 64": (64, 1, 64, 1000)}  # width, layers (make_model), batch size, steps


def hand_written_loop(kind: str, model: nn.Module, batches, device: torch.device, lr: float) -> float:
    "Seconds for the loop a user writes by hand: the five lines, under torch.autocast (and a GradScaler for fp16)."
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(kind)
    scaler = torch.amp.GradScaler(device.type) if kind == "fp16" else None
    loss_func = nn.functional.cross_entropy
    sync(device)
    start = time.perf_counter()
    for xb, yb in batches:
        if dtype is None:
            loss = loss_func(model(xb), yb)
        else:
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_func(model(xb), yb)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
    sync(device)
    return time.perf_counter() - start


def learner_seconds(learn: Learner, device: torch.device) -> float:
    "Seconds of one `fit(1)`."
    sync(device)
    start = time.perf_counter()
    learn.fit(1)
    sync(device)
    return time.perf_counter() - start


def compare_with_hand_written(device: torch.device, kinds=("fp32", "fp16", "bf16"), rounds: int = 7) -> None:
    "Learner (DeviceEngine or AMPEngine) against `hand_written_loop`, interleaved, at the sizes of `HAND_SIZES`."
    if device.type != "cuda":
        print("hand-written rows skipped: they compare CUDA engines and there is no CUDA device here "
              "(torch.cuda.is_available() is False); benchmarks/loop_overhead.py measures the CPU")
        return
    for size, (width, n_layers, bs, n_steps) in HAND_SIZES.items():
        print(f"{size}, {n_steps} steps per round, {rounds} interleaved rounds:")
        compare_at(device, width, n_layers, bs, n_steps, kinds, rounds)


def compare_at(device: torch.device, width: int, n_layers: int, bs: int, n_steps: int, kinds, rounds: int) -> None:
    "One size of `compare_with_hand_written`: a line per kind."
    engines = {"fp32": lambda: DeviceEngine(device), "fp16": lambda: AMPEngine(torch.float16, device=device),
               "bf16": lambda: AMPEngine(torch.bfloat16, device=device)}
    labels = {"fp32": "DeviceEngine vs the five lines", "fp16": "AMPEngine(float16) vs autocast + GradScaler",
              "bf16": "AMPEngine(bfloat16) vs autocast"}
    g = torch.Generator().manual_seed(0)
    distinct = min(n_steps, 8)  # a few distinct batches, repeated: the big size's data stays a few GB
    batches = [(torch.randn(bs, width, generator=g).to(device), torch.randint(0, 10, (bs,), generator=g).to(device))
               for _ in range(distinct)] * (n_steps // distinct)
    for kind in kinds:
        torch.manual_seed(0)
        model = make_model(width, n_layers).to(device)
        learn = Learner(model, DataLoaders(batches, None), lr=1e-3, engine=engines[kind](), progress=False)
        learn.fit(1)  # warm-up of both: kernels chosen, memory allocated
        hand_written_loop(kind, model, batches, device, 1e-3)
        hand, mine = [], []
        for _ in range(rounds):
            hand.append(hand_written_loop(kind, model, batches, device, 1e-3))
            mine.append(learner_seconds(learn, device))
        ratios = [m / h for m, h in zip(mine, hand)]
        print(f"  {labels[kind]:<44} hand {statistics.median(hand) / len(batches) * 1e3:8.3f} ms/step  "
              f"looplab {statistics.median(mine) / len(batches) * 1e3:8.3f} ms/step  median ratio "
              f"{statistics.median(ratios):.3f}; fastest/fastest {min(mine) / min(hand):.3f}")
        del learn, model
        if device.type == "cuda":
            torch.cuda.empty_cache()


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
    del learners
    compare_with_hand_written(device, rounds=max(rounds, 7))


if __name__ == "__main__":
    main()
