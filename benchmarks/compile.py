"""What `learn.compile()` costs and buys: the same Learner eager and compiled, and a hand-written compiled loop on the
same model and batches, with the compile time apart.

For each model and each compile setting it builds a Learner, times its first fit over `--warm` batches (the
compile happens there: the time beyond the eager learner's first fit is the compile time), then times `--rounds`
interleaved rounds of `--steps` batches for every variant, and prints steps per second, the ratio to eager, and the
Learner against the five-line loop around `torch.compile(model)` with the same arguments (a ratio near 1: the
Learner adds nothing to a compiled step but its callbacks). Batches are pre-made on the device; CUDA is
synchronized before every clock reading.

CPU (the default without CUDA): the digits-sized 64-64-10 MLP (host-bound: the loop's Python is most of a step) and
an MLP of 4 x Linear(512) at batch 256, eager against `aot_eager` (torch's own kernels: the cost of dynamo and
AOTAutograd alone) and inductor (C++ kernels of its own).
CUDA: 4 x Linear(8192, 8192) at batch 8192 and a transformer encoder layer (d_model 1024, 16 heads, 256 tokens,
batch 32), eager against inductor's default mode, "max-autotune" and "reduce-overhead" (CUDA graphs); then
"reduce-overhead" with the callbacks that may break its CUDA graphs (ActivationStats, whose hooks run in the
forward; the Profiler, which stamps every event): steps per second and inductor's count of CUDA-graph skips.

Run: python benchmarks/compile.py [--device cpu|cuda] [--rounds N] [--steps N] [--warm N]
"""
import argparse
import statistics
import time
import warnings

import torch
import torch._dynamo
from torch import nn

from looplab.activations import ActivationStats
from looplab.data import DataLoaders
from looplab.engine import DeviceEngine
from looplab.learner import Learner
from looplab.profiler import Profiler


def mlp(width: int, n_layers: int, n_in: int | None = None, n_out: int = 10) -> nn.Module:
    "`n_layers` Linear(width, width)+ReLU blocks (the first from `n_in` features) and a classifier head."
    layers, features = [], n_in or width
    for _ in range(n_layers):
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    return nn.Sequential(*layers, nn.Linear(features, n_out))


class EncoderClassifier(nn.Module):
    "A transformer encoder layer over `tokens` vectors of `d_model`, then a linear head on their mean."
    def __init__(self, d_model: int = 1024, heads: int = 16):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, batch_first=True, dropout=0.0)
        self.head = nn.Linear(d_model, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(dim=1))


def models(device: torch.device) -> dict:
    "name -> (model factory, one input's shape, batch size)."
    if device.type == "cuda":
        return {"4 x Linear(8192), batch 8192": (lambda: mlp(8192, 4), (8192,), 8192),
                "encoder layer d1024, 256 tokens, batch 32": (EncoderClassifier, (256, 1024), 32)}
    return {"64-64-10 MLP, batch 64": (lambda: mlp(64, 1), (64,), 64),
            "4 x Linear(512), batch 256": (lambda: mlp(512, 4), (512,), 256)}


def settings(device: torch.device) -> dict:
    "name -> learn.compile's arguments (None: eager)."
    if device.type == "cuda":
        return {"eager": None, "inductor": {}, "max-autotune": {"mode": "max-autotune"},
                "reduce-overhead": {"mode": "reduce-overhead"}}
    return {"eager": None, "aot_eager": {"backend": "aot_eager"}, "inductor": {}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_batches(shape, bs: int, n: int, device: torch.device) -> list:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(bs, *shape, generator=g).to(device), torch.randint(0, 10, (bs,), generator=g).to(device))
            for _ in range(n)]


def make_learner(factory, batches, device, options, cbs=()) -> Learner:
    torch.manual_seed(0)
    learn = Learner(factory(), DataLoaders(batches, None), lr=1e-3, engine=DeviceEngine(device), cbs=list(cbs),
                    progress=False)
    if options is not None:
        learn.compile(**options)
    return learn


def timed(fn, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def hand_loop(model: nn.Module, options, batches) -> callable:
    "The five lines around `torch.compile(model, **options)` (the model itself for None): one call runs `batches`."
    run = model if options is None else torch.compile(model, **options)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def loop():
        for xb, yb in batches:
            loss = nn.functional.cross_entropy(run(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
    return loop


def compare(device, name, factory, shape, bs, args) -> None:
    "One model: every setting's compile time, steps per second, ratio to eager, and Learner / hand-written loop."
    warm, steps = make_batches(shape, bs, args.warm, device), make_batches(shape, bs, args.steps, device)
    print(f"\n{name}: {args.warm} warm-up batches, then {args.rounds} interleaved rounds of {args.steps} batches")
    learners, loops, first = {}, {}, {}
    for setting, options in settings(device).items():
        learn = make_learner(factory, warm, device, options)
        first[setting] = timed(lambda: learn.fit(1), device)
        learn.dls.train = steps
        learners[setting] = learn
        torch.manual_seed(0)
        loops[setting] = hand_loop(factory().to(device), options, steps)
        loops[setting]()  # the hand-written loop's own compile, before the clock
    seconds = {key: [] for key in [*learners, *(f"hand {s}" for s in loops)]}
    for _ in range(args.rounds):
        for setting in learners:
            seconds[setting].append(timed(lambda: learners[setting].fit(1), device))
            seconds[f"hand {setting}"].append(timed(loops[setting], device))
    eager = statistics.median(seconds["eager"])
    for setting in learners:
        median = statistics.median(seconds[setting])
        hand = statistics.median(seconds[f"hand {setting}"])
        compile_s = first[setting] - first["eager"]
        print(f"  {setting:16} {args.steps / median:9.1f} steps/s  x{eager / median:5.2f} vs eager   "
              f"Learner / hand-written loop {median / hand:5.3f}   first fit {first[setting]:7.2f} s "
              f"(compile about {max(compile_s, 0.0):6.2f} s)")


def reduce_overhead_callbacks(device, name, factory, shape, bs, args) -> None:
    "mode='reduce-overhead' alone and with each callback: steps per second and CUDA-graph skips inductor counts."
    from torch._dynamo.utils import counters
    warm, steps = make_batches(shape, bs, args.warm, device), make_batches(shape, bs, args.steps, device)
    print(f"\n{name}, mode='reduce-overhead' with callbacks:")
    for label, cbs in (("no callback", []), ("ActivationStats", [ActivationStats()]), ("Profiler", [Profiler()])):
        skips_before = sum(counters["inductor"].get(k, 0) for k in counters["inductor"] if "cudagraph_skip" in k)
        learn = make_learner(factory, warm, device, {"mode": "reduce-overhead"}, cbs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            learn.fit(1)
            learn.dls.train = steps
            median = statistics.median(timed(lambda: learn.fit(1), device) for _ in range(args.rounds))
        skips = sum(counters["inductor"].get(k, 0) for k in counters["inductor"] if "cudagraph_skip" in k)
        said = sorted({str(w.message).splitlines()[0][:100] for w in caught if "graph" in str(w.message)})
        print(f"  {label:16} {args.steps / median:9.1f} steps/s   CUDA-graph skips {skips - skips_before}  {said}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="batches per timed round (CPU 100, CUDA 50)")
    parser.add_argument("--warm", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    args.steps = args.steps or (50 if device.type == "cuda" else 100)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {name}")
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 32)  # many models in one process
    for model_name, (factory, shape, bs) in models(device).items():
        compare(device, model_name, factory, shape, bs, args)
    if device.type == "cuda":
        for model_name, (factory, shape, bs) in models(device).items():
            reduce_overhead_callbacks(device, model_name, factory, shape, bs, args)


if __name__ == "__main__":
    main()
