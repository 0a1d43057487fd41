"""Time per batch of the bare five-line loop against `Learner.fit` with its default callbacks and engine (and with
the live loss plot of looplab.loss_plot, with AMPEngine(bfloat16) against a bare loop that autocasts the same way, and
with a realistic stack — fit_one_cycle, GradientClipping and the Recorder — against a bare loop that sets the same
1cycle LR and momentum, clips and records by hand). One more row splits the default row's overhead in two: the
Learner against a bare loop that also does by hand what the default callbacks do (keeps every batch's loss, batch
size and LR, prints the epoch's row), so that its ratio is the cost of the loop's structure alone.

Both run in this process, in interleaved rounds (bare, learner, bare, learner, ...), on the same pre-batched
data, with one thread, so that the machine's noise hits both alike. Prints the median ratio Learner/bare per
workload, and the ratio of the two fastest runs (noise only ever slows a run down, so the fastest runs are the
least disturbed). On CUDA it then times the Learner's DeviceEngine against the five lines on the GPU, at a size where
the GPU is the bottleneck and a tiny one where the host is (benchmarks/amp_speedup.py's `compare_with_hand_written`,
which also has the mixed-precision rows); on the CPU that part is skipped with a message.
Run: python benchmarks/loop_overhead.py [--rounds N]
"""
import argparse
import copy
import gc
import io
import statistics
import time

import contextlib

import torch
from torch import nn

from looplab.data import DataLoaders
from looplab.engine import AMPEngine
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.regularize import GradientClipping
from looplab.schedule import fit_one_cycle, one_cycle_scheds

from amp_speedup import compare_with_hand_written  # a sibling script: benchmarks/ is on sys.path when run


def make_workload(n_in, hidden, n_out, bs, n_batches, seed=0):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(bs, n_in, generator=g), torch.randint(0, n_out, (bs,), generator=g))
               for _ in range(n_batches)]
    layers = []
    sizes = [n_in, *hidden]
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], n_out))
    return batches, nn.Sequential(*layers)


def bare_loop(model, batches, lr, autocast=contextlib.nullcontext):
    "The five lines; `autocast()` is the context around forward and loss (torch.autocast for mixed precision)."
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_func = nn.functional.cross_entropy
    start = time.perf_counter()
    for xb, yb in batches:
        with autocast():
            loss = loss_func(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return time.perf_counter() - start


def learner_loop(model, batches, lr, extra_cbs=(), engine=None):
    learn = Learner(model, DataLoaders(batches, None), lr=lr, cbs=list(extra_cbs), engine=engine)
    learn.progress.file = io.StringIO()  # the progress table is printed, into a buffer
    start = time.perf_counter()
    learn.fit(1)
    took = time.perf_counter() - start
    assert len(learn.recorder.losses) == len(batches)
    return took


def bare_one_cycle_loop(model, batches, lr, autocast=contextlib.nullcontext):
    "The five lines, plus by hand what the stack does: 1cycle LR and momentum per step, clipping, recording."
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    params = [p for group in opt.param_groups for p in group["params"]]
    scheds = one_cycle_scheds(lr, len(batches))
    loss_func = nn.functional.cross_entropy
    losses, hypers = [], []
    start = time.perf_counter()
    for i, (xb, yb) in enumerate(batches):
        pct = i / len(batches)
        for group in opt.param_groups:
            group["lr"] = scheds["lr"](pct)
            group["momentum"] = scheds["mom"](pct)
        loss = loss_func(model(xb), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
        hypers.append(((opt.param_groups[0]["lr"],), (opt.param_groups[0]["momentum"],)))
    losses = torch.stack(losses).tolist()
    return time.perf_counter() - start


def bare_recording_loop(model, batches, lr, autocast=contextlib.nullcontext, kept=None):
    "The five lines, plus by hand the default callbacks' work: each batch's loss, size and LR kept; the epoch row."
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_func = nn.functional.cross_entropy
    losses, sizes, hypers = [], [], []
    table = io.StringIO()
    start = time.perf_counter()
    for xb, yb in batches:
        loss = loss_func(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
        sizes.append(yb.shape[0])
        hypers.append(((opt.param_groups[0]["lr"],), (opt.param_groups[0]["momentum"],)))
    values = torch.stack(losses).tolist()
    print(f"train_loss {sum(v * n for v, n in zip(values, sizes)) / sum(sizes):.4f}", file=table)
    took = time.perf_counter() - start
    if kept is not None:
        kept.update(losses=values, hypers=hypers)
    return took


def check_same_records(n_batches=50):
    "The by-hand loop keeps what the Learner's Recorder keeps, from the same start: the row compares like with like."
    batches, model = make_workload(64, [64], 10, 64, n_batches)
    kept = {}
    bare_recording_loop(copy.deepcopy(model), batches, 0.01, kept=kept)
    learn = Learner(copy.deepcopy(model), DataLoaders(batches, None), lr=0.01, progress=False)
    learn.fit(1)
    assert kept["losses"] == learn.recorder.losses and kept["hypers"] == learn.recorder.hypers


def learner_one_cycle_loop(model, batches, lr, extra_cbs=(), engine=None):
    learn = Learner(model, DataLoaders(batches, None), lr=lr, cbs=list(extra_cbs), engine=engine,
                    opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9))
    learn.progress.file = io.StringIO()
    start = time.perf_counter()
    fit_one_cycle(learn, 1, lr_max=lr, cbs=GradientClipping(1.0))
    took = time.perf_counter() - start
    assert len(learn.recorder.losses) == len(batches)
    return took


NAME_WIDTH = 38  # the table's first column: as wide as the longest workload name in main()


def measure(name, n_in, hidden, n_out, bs, n_batches, rounds, lr=0.01, make_cbs=list, make_engine=lambda: None,
            autocast=contextlib.nullcontext, bare_fn=bare_loop, learner_fn=learner_loop):
    "`make_cbs()` gives the extra callbacks of each Learner run (fresh ones each time), `make_engine()` its engine."
    batches, model = make_workload(n_in, hidden, n_out, bs, n_batches)
    bare_fn(model, batches[:50], lr, autocast)  # warm up allocator and kernels
    learner_fn(model, batches[:50], lr, make_cbs(), make_engine())
    bare, learner, ratios = [], [], []
    for _ in range(rounds):
        gc.collect()  # garbage of the previous round (figures are full of reference cycles) is not timed
        b = bare_fn(model, batches, lr, autocast)
        cbs = make_cbs()
        engine = make_engine()
        gc.collect()
        l = learner_fn(model, batches, lr, cbs, engine)
        bare.append(b / n_batches * 1e6)
        learner.append(l / n_batches * 1e6)
        ratios.append(l / b)
    print(f"{name:{NAME_WIDTH}s} bare {statistics.median(bare):8.1f} µs/batch"
          f"  learner {statistics.median(learner):8.1f} µs/batch"
          f"  median ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f});"
          f" fastest/fastest {min(learner) / min(bare):.3f}")
    return statistics.median(ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, {args.rounds} interleaved rounds")
    measure("tiny MLP 64-64-10, bs 64", 64, [64], 10, 64, 2000, args.rounds)
    # The same Learner against a loop doing by hand what its default callbacks do (the Recorder and the progress
    # table): the ratio is what the loop's structure costs (methods, events, checked calls), the work left out.
    check_same_records()
    measure("tiny MLP vs callbacks' work by hand", 64, [64], 10, 64, 2000, args.rounds, bare_fn=bare_recording_loop)
    measure("medium MLP 784-512-512-10, bs 128", 784, [512, 512], 10, 128, 200, args.rounds)
    # The live loss plot drawing as in a notebook: mode="widget" renders PNGs off-screen (no frontend here to show
    # them), at most every 250 ms and at most 5 % of the time, and always the final picture at the end of the fit.
    # Its cost is a fixed part per fit (building the figure, one full draw of axes and text) and a bounded part per
    # second, so it is measured on the tiny workload as it is (~0.5 s) and three times as long (fit(3)'s length).
    live_plot = lambda: [LossPlot(mode="widget")]
    measure("tiny MLP + live LossPlot", 64, [64], 10, 64, 2000, args.rounds, make_cbs=live_plot)
    measure("tiny MLP + live LossPlot, 3x", 64, [64], 10, 64, 6000, args.rounds, make_cbs=live_plot)
    # Mixed precision: the Learner with AMPEngine(bfloat16) against the five lines with torch.autocast around forward
    # and loss, as the engine does (bfloat16 needs no loss scaler).
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    measure("tiny MLP, AMPEngine(bfloat16)", 64, [64], 10, 64, 2000, args.rounds,
            make_engine=lambda: AMPEngine(torch.bfloat16, device="cpu"), autocast=bf16)
    # A realistic stack: fit_one_cycle (ParamScheduler sets LR and momentum before every step), GradientClipping
    # (its clip function called by the engine) and the Recorder, against the same three things written by hand.
    measure("tiny MLP, 1cycle + clipping + Recorder", 64, [64], 10, 64, 2000, args.rounds, lr=0.1,
            bare_fn=bare_one_cycle_loop, learner_fn=learner_one_cycle_loop)
    cuda = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    compare_with_hand_written(cuda, kinds=("fp32",), rounds=args.rounds)


if __name__ == "__main__":
    main()
