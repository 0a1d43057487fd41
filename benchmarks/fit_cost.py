"""What a live plot costs as a student pays it: the whole `fit`, in a fresh Jupyter kernel, with and without the plot.

Each workload gets a kernel of its own (tools/kernel.py: as JupyterLab starts one, so the plots draw as widgets and
send their pictures). One untimed fit without and one with the plots pay torch's and matplotlib's first-time costs;
then `--rounds` interleaved rounds (without, with, without, with, ...) time the whole `fit` call: setup, every
picture (the first one included), the per-batch collection, the final frame. Prints per workload the median ratio
with/without and each round's, then per plot the frames sent while training (final one aside) and the time from
`fit`'s start to the first placeholder and to the first frame (medians over the rounds).

Workloads: the digits MLP of notebook 05b for about `--seconds` (LossPlot; LossPlot and LRPlot together), and the
conv net of notebook 07c, five epochs (ActivationStats alone, then ActivationPlot).
Run: python benchmarks/fit_cost.py [--rounds 5] [--seconds 3]
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel import fresh_kernel  # noqa: E402

SETUP = """
import gc, json, math, time
import torch
from torch import nn
from looplab.data import DataLoaders, load_digits
from looplab.learner import Learner, set_seed
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
    start = time.perf_counter()
    learn.fit(epochs, cbs=cbs)
    took = time.perf_counter() - start
    plots = []
    for key in dict.fromkeys(k for k, _ in shown):
        times = [t for k, t in drawn if k == key]
        plots.append(dict(frames=max(len(times) - 1, 0), shown=min(t for k, t in shown if k == key) - start,
                          first=times[0] - start if times else None))
    return dict(seconds=took, plots=plots, names=[type(cb).__name__ for cb in cbs])
"""

DIGITS = """
def make_learner():
    set_seed(0)
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    return Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)
make_learner().fit(1)  # torch's first-time costs
start = time.perf_counter()
make_learner().fit(2)
EPOCHS = max(2, round({seconds} * 2 / (time.perf_counter() - start)))
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
EPOCHS = 5
"""

WORKLOADS = {
    "LossPlot, digits": (DIGITS, "from looplab.loss_plot import LossPlot", "[LossPlot()]"),
    "LossPlot + LRPlot, digits": (DIGITS, "from looplab.loss_plot import LossPlot\nfrom looplab.lr_plot import LRPlot",
                                  "[LossPlot(), LRPlot(sched_fn=lambda pct: 0.2 * (1 - pct))]"),
    "ActivationStats, conv net": (CONV, "from looplab.activations import ActivationStats", "[ActivationStats()]"),
    "ActivationPlot, conv net": (CONV, "from looplab.activations import ActivationPlot", "[ActivationPlot()]"),
}


def run_cell(kc, code: str, timeout: float = 600) -> list[dict]:
    "Execute `code`; return what it printed as RESULT lines; raise on an error."
    msg_id = kc.execute(code)
    results, errors = [], []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            results += [json.loads(line[7:]) for line in content["text"].splitlines() if line.startswith("RESULT ")]
        elif kind == "error":
            errors.append("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    if errors:
        raise RuntimeError(errors[0])
    return results


def measure(name: str, rounds: int, seconds: float) -> None:
    workload, imports, cbs = WORKLOADS[name]
    with fresh_kernel(ROOT, prefix="looplab-cost-") as (km, kc):
        run_cell(kc, SETUP + workload.format(seconds=seconds) + imports)
        run_cell(kc, f"timed(make_learner, 1, lambda: {cbs})")  # the plots' first-time costs (fonts, imports)
        pairs = []
        for _ in range(rounds):
            plain, = run_cell(kc, "print('RESULT', json.dumps(timed(make_learner, EPOCHS, lambda: [])))")
            plotted, = run_cell(kc, f"print('RESULT', json.dumps(timed(make_learner, EPOCHS, lambda: {cbs})))")
            pairs.append((plain, plotted))
    ratios = [b["seconds"] / a["seconds"] for a, b in pairs]
    plain_s = statistics.median(a["seconds"] for a, _ in pairs)
    print(f"{name:<28} fit {plain_s:5.2f} s  median ratio {statistics.median(ratios):.3f}  rounds "
          + " ".join(f"{r:.3f}" for r in ratios), flush=True)
    for i, plot in enumerate(pairs[0][1]["plots"]):
        frames = [b["plots"][i]["frames"] for _, b in pairs]
        shown = [b["plots"][i]["shown"] for _, b in pairs]
        first = [b["plots"][i]["first"] for _, b in pairs if b["plots"][i]["first"] is not None]
        first_text = f"{statistics.median(first):.2f} s" if first else "none"
        print(f"    {pairs[0][1]['names'][i]:<16} frames {statistics.median(frames):4.0f} (rounds {min(frames)}-{max(frames)})"
              f"  placeholder after {statistics.median(shown):.2f} s  first frame after {first_text}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of the digits fits, about")
    parser.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    args = parser.parse_args()
    print(f"whole fit in a fresh kernel, with/without, {args.rounds} interleaved rounds")
    for name in args.only:
        measure(name, args.rounds, args.seconds)


if __name__ == "__main__":
    main()
