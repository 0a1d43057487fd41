"""What a live plot costs as a student pays it: the whole `fit`, in a fresh Jupyter kernel, with and without the plot.

Each workload gets a kernel of its own (tools/kernel.py: as JupyterLab starts one, so the plots draw as widgets and
send their pictures). One untimed fit without and one with the plots pay torch's and matplotlib's first-time costs;
then `--rounds` interleaved rounds (without, with, without, with, ...) time the whole `fit` call: setup, every
picture (the first one included), the per-batch collection, the final frame. Prints per workload the median ratio
with/without, a 95 % interval of that median (a bootstrap over the rounds: on this noisy machine, read a target
against the interval, not the median alone) and each round's ratio, the ratio of the fastest fits (the least
disturbed by other work on the machine), the same ratio in the kernel's CPU time (all its threads: where it follows
the wall clock round by round, a slow round was the machine running slower, not other processes taking the CPU),
the seconds the plot adds to the fit (a median with its interval: a fixed cost reads the same whether the round's
fits ran fast or slow), then per plot the frames sent while training (final one aside) and the time from `fit`'s
start to the first placeholder and to the first frame (medians over the rounds).

`--before REV` measures the package of git revision REV too (`git archive` into a temporary folder, imported from
there by a kernel of its own), round by round with the working tree's, so that both see the same machine.
`--matplotlib-from DIR` adds a kernel of the working tree's package that imports matplotlib from DIR (made by
`pip install --target DIR --no-deps matplotlib==X`): the same plots under another matplotlib. Each kernel's torch
and matplotlib versions are printed first: matplotlib's text drawing is most of a first frame's time, and 3.11 draws
text about four times slower than 3.10 (settings.ini leaves 3.11 out).
`--threads N` sets torch's threads in the digits workloads (default: torch's own; the conv net uses 1, as 07c).

Workloads: the digits MLP of notebook 05b for about `--seconds` (LossPlot; LossPlot and LRPlot together), and the
conv net of notebook 07c, `--conv-epochs` epochs (5 by default: about a second; ActivationStats alone, then
ActivationPlot).
Run: python benchmarks/fit_cost.py [--rounds 5] [--seconds 3] [--conv-epochs 5] [--before HEAD] [--threads 1]
     [--matplotlib-from DIR] [--only NAME ...]
"""
import argparse
import random
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel import fresh_kernel, results, run_cell  # noqa: E402

SETUP = """
import gc, json, math, time
import torch
from torch import nn
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.widgets import LiveFigure

shown, drawn = [], []  # (plot, clock) of each placeholder shown and each picture sent
_show, _draw = LiveFigure.show, LiveFigure.draw
def show(self, *args, **kwargs):
    _show(self, *args, **kwargs)
    shown.append((id(self), time.perf_counter()))
def draw(self, *args, **kwargs):
    _draw(self, *args, **kwargs)
    drawn.append((id(self), time.perf_counter()))
LiveFigure.show, LiveFigure.draw = show, draw

def timed(make_learner, epochs, make_cbs):
    "Seconds of one whole fit; per live figure: frames while training, first placeholder and first frame after start."
    learn = make_learner()
    cbs = make_cbs()
    shown.clear(); drawn.clear()
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    learn.fit(epochs, cbs=cbs)
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    plots = []
    for key in dict.fromkeys(k for k, _ in shown):
        times = [t for k, t in drawn if k == key]
        plots.append(dict(frames=max(len(times) - 1, 0), shown=min(t for k, t in shown if k == key) - start,
                          first=times[0] - start if times else None))
    return dict(seconds=took, cpu=cpu, plots=plots, names=[type(cb).__name__ for cb in cbs])
"""

DIGITS = """
def make_learner():
    set_seed(0)
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    return Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)
{threads}
make_learner().fit(1)  # torch's first-time costs
epoch_seconds = []
for _ in range(3):  # the fastest of three: a burst of other work on the machine does not shorten the fits
    start = time.perf_counter()
    make_learner().fit(10)  # ten epochs: a fit's own setup, which one epoch would count as training, is a small part
    epoch_seconds.append((time.perf_counter() - start) / 10)
EPOCHS = max(2, round({seconds} / min(epoch_seconds)))
"""

CONV = """
from looplab.conv import conv_net, signal_dls
from looplab.metrics import Accuracy
torch.set_num_threads(1)  # as notebook 07c
conv_dls = signal_dls(n_train=1000, bs=40, seed=0)
def make_learner():
    set_seed(0)
    return Learner(conv_net(), conv_dls, metrics=[Accuracy()], progress=False)
make_learner().fit(1)
EPOCHS = {conv_epochs}
"""

WORKLOADS = {
    "LossPlot, digits": (DIGITS, "from looplab.loss_plot import LossPlot", "[LossPlot()]"),
    "LossPlot + LRPlot, digits": (DIGITS, "from looplab.loss_plot import LossPlot\nfrom looplab.lr_plot import LRPlot",
                                  "[LossPlot(), LRPlot(sched_fn=lambda pct: 0.2 * (1 - pct))]"),
    "ActivationStats, conv net": (CONV, "from looplab.activations import ActivationStats", "[ActivationStats()]"),
    "ActivationPlot, conv net": (CONV, "from looplab.activations import ActivationPlot", "[ActivationPlot()]"),
}


def measure(name: str, rounds: int, seconds: float, threads: int | None, versions: dict[str, Path],
            conv_epochs: int = 5, envs: dict[str, dict] | None = None) -> None:
    """Time the workload `name` in one kernel per version (label -> folder it imports looplab from), rounds interleaved;
    `envs`: label -> variables set in that kernel (PYTHONPATH, for another matplotlib)."""
    workload, imports, cbs = WORKLOADS[name]
    setup = SETUP + workload.format(seconds=seconds, conv_epochs=conv_epochs,
                                    threads="" if threads is None else f"torch.set_num_threads({threads})")
    with ExitStack() as stack:
        kernels = {label: stack.enter_context(fresh_kernel(cwd, prefix="looplab-cost-", env=(envs or {}).get(label)))[1]
                   for label, cwd in versions.items()}
        epochs = None
        for label, kc in kernels.items():
            run_cell(kc, setup + imports, silence=600)
            where, = results(run_cell(kc, "import looplab, matplotlib; print('RESULT', json.dumps("
                                          "[looplab.__file__, EPOCHS, torch.__version__, matplotlib.__version__]))"))
            assert Path(where[0]).parent.parent == versions[label], f"{label} imported looplab from {where[0]}"
            # the versions that set the figures (matplotlib's text drawing is most of a first frame's time)
            print(f"{name}, {label}: torch {where[2]}, matplotlib {where[3]}", flush=True)
            epochs = epochs or where[1]  # the first kernel's measure, for all: the same fits
            run_cell(kc, f"EPOCHS = {epochs}")
            run_cell(kc, f"timed(make_learner, 1, lambda: {cbs})")  # the plots' first-time costs (fonts, imports)
        pairs = {label: [] for label in kernels}
        for _ in range(rounds):
            for label, kc in kernels.items():
                plain, = results(run_cell(kc, "print('RESULT', json.dumps(timed(make_learner, EPOCHS, lambda: [])))"))
                plotted, = results(run_cell(kc, f"print('RESULT', json.dumps(timed(make_learner, EPOCHS, lambda: {cbs})))"))
                pairs[label].append((plain, plotted))
    for label, rows in pairs.items():
        report(f"{name}, {label}" if len(pairs) > 1 else name, epochs, rows)


def median_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    "A 95 % interval of the median of `values` (percentile bootstrap over the rounds): how far noise moves it."
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def report(name: str, epochs: int, pairs: list) -> None:
    "Print one workload's rows: the ratios, then each plot's frames and first times."
    ratios = [b["seconds"] / a["seconds"] for a, b in pairs]
    cpu_ratios = [b["cpu"] / a["cpu"] for a, b in pairs]
    plain_s = statistics.median(a["seconds"] for a, _ in pairs)
    fastest = min(b["seconds"] for _, b in pairs) / min(a["seconds"] for a, _ in pairs)
    lo, hi = median_interval(ratios)
    print(f"{name:<36} {epochs:>3} epochs, fit {plain_s:5.2f} s  median ratio {statistics.median(ratios):.3f} "
          f"(95 % interval {lo:.3f}-{hi:.3f})  fastest {fastest:.3f}  rounds " + " ".join(f"{r:.3f}" for r in ratios),
          flush=True)
    extra = [b["seconds"] - a["seconds"] for a, b in pairs]  # what the plot adds, whatever the fit's own speed
    lo, hi = median_interval(extra)
    print(f"    seconds added: median {statistics.median(extra):.3f} s (95 % interval {lo:.3f}-{hi:.3f})", flush=True)
    print(f"    the kernel's CPU time: median ratio {statistics.median(cpu_ratios):.3f}  rounds "
          + " ".join(f"{r:.3f}" for r in cpu_ratios), flush=True)
    for i, plot in enumerate(pairs[0][1]["plots"]):
        frames = [b["plots"][i]["frames"] for _, b in pairs]
        shown = [b["plots"][i]["shown"] for _, b in pairs]
        first = [b["plots"][i]["first"] for _, b in pairs if b["plots"][i]["first"] is not None]
        first_text = f"{statistics.median(first):.2f} s" if first else "none"
        print(f"    {pairs[0][1]['names'][i]:<16} frames {statistics.median(frames):4.0f} (rounds {min(frames)}-{max(frames)})"
              f"  placeholder after {statistics.median(shown):.2f} s  first frame after {first_text}", flush=True)


def package_at(rev: str, into: Path) -> Path:
    "The looplab package of git revision `rev`, unpacked into `into`; returns `into`."
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "looplab"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the digits fits, about")
    parser.add_argument("--conv-epochs", type=int, default=5, help="epochs of the conv net's fits (5: about 1 s)")
    parser.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--before", metavar="REV", help="also measure the package of this git revision (e.g. HEAD)")
    parser.add_argument("--threads", type=int, help="torch threads in the digits workloads (default: torch's own)")
    parser.add_argument("--matplotlib-from", metavar="DIR", type=Path,
                        help="also measure the working tree's package with the matplotlib installed in DIR")
    args = parser.parse_args()
    if args.matplotlib_from is not None and not (args.matplotlib_from / "matplotlib").is_dir():
        parser.error(f"--matplotlib-from {args.matplotlib_from}: no matplotlib there; make it with "
                     f"pip install --target {args.matplotlib_from} --no-deps matplotlib==3.11.2")
    print(f"whole fit in a fresh kernel, with/without, {args.rounds} interleaved rounds; torch threads "
          f"{args.threads or 'default'}; on a machine shared with other work, the rounds spread")
    with tempfile.TemporaryDirectory(prefix="looplab-before-") as tmp:
        versions = {"now": ROOT} if args.before is None else {f"before ({args.before})": package_at(args.before, Path(tmp)),
                                                               "now": ROOT}
        envs = {}
        if args.matplotlib_from is not None:
            label = f"now, matplotlib from {args.matplotlib_from}"
            versions[label] = ROOT
            envs[label] = {"PYTHONPATH": str(args.matplotlib_from.resolve())}
        for name in args.only:
            measure(name, args.rounds, args.seconds, args.threads, versions, args.conv_epochs, envs)


if __name__ == "__main__":
    main()
