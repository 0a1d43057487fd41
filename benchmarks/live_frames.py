"""Frames a live plot sends while it trains, in a real Jupyter kernel: how many, how soon, and at what cost.

Each measurement starts a fresh kernel (a new process, as a student's first run is: nothing drawn yet), trains the
digits MLP once without a plot (torch's own first-time costs are then paid), then fits with the plot twice: the
first fit is *cold* (the plot's first figure in this process: fonts, figure building, a new canvas), the second
*warm*. A fit asks for the epochs that an untimed epoch says fill `--seconds` three times over, and a callback
cancels it after `--seconds`, so that its length does not depend on this machine's speed (nor on its load). The client counts the kernel's picture messages (display data carrying image/png) sent during the
fit, the final one aside; the kernel times each draw (collecting, drawing, encoding and sending the picture).

Prints, per plot, fit length and cold/warm: frames during the fit, frames per second, the first frame's delay after
the first batch ended, the longest wait between pictures while training (from the first batch's end), the cold first
frame's cost, and the drawing time as a share of the fit (the first frame with and without).
Run: python benchmarks/live_frames.py [--seconds 1 3] [--plots LossPlot LRPlot GANPlot] [--max-overhead 0.1]
"""
import argparse
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel import fresh_kernel, png_displays, results, run_cell  # noqa: E402

SETUP = """
import json, math, time
import torch
from torch import nn
from looplab.callback import Callback, CancelFitException
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.lr_plot import LRPlot
from looplab import widgets

class StopAfter(Callback):
    "Cancels the fit `seconds` after it began; notes when the first training batch ended (before any plot draws)."
    order = 50  # before the plots: its clock starts before theirs, and it sees a batch's end before they draw
    def __init__(self, seconds):
        self.seconds = seconds
    def on_train_begin(self):
        self.began = time.perf_counter()
        self.first_batch_end = None
    def on_batch_end(self):
        if self.learn.training and self.first_batch_end is None:
            self.first_batch_end = time.perf_counter()
        if time.perf_counter() - self.began >= self.seconds:
            raise CancelFitException()

draws = []  # (start, end, final) of each update of a live plot
_update = widgets._update
def timed_update(plot, final=False):
    start = time.perf_counter()
    _update(plot, final)
    draws.append((start, time.perf_counter(), final))
widgets._update = timed_update

def digits_learner():
    set_seed(0)
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    return Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)

learn = digits_learner()
learn.fit(1)  # torch's first-time costs (the optimizer's first import of torch._dynamo, kernels), paid before timing
epoch_start = time.perf_counter()
learn.fit(1)
epoch_seconds = time.perf_counter() - epoch_start
def epochs_for(seconds):
    "Epochs enough for `seconds` and some (StopAfter ends the fit): the plots' axes then span about the fit."
    return max(2, math.ceil(3 * seconds / epoch_seconds))
"""

GAN_SETUP = """
from looplab.gan import ring_learner
from looplab.gan_images import GANPlot
def ring_scatter(ax, fakes):
    ax.scatter(fakes[:, 0], fakes[:, 1], s=2)
gan = ring_learner(n=4096)  # notebook 10's GAN on the ring, seeded, without a progress table
gan.fit(1)
epoch_start = time.perf_counter()
gan.fit(1)
epoch_seconds = time.perf_counter() - epoch_start
"""

MAKE = {"LossPlot": "LossPlot(mode='widget'{budget})",
        "LRPlot": "LRPlot(sched_fn=lambda pct: 0.2 * (1 - pct), mode='widget'{budget})",
        "GANPlot": "GANPlot(ring_scatter, n_samples=256, mode='widget'{budget})"}

FIT = """
draws.clear()
plot = {make}
stop = StopAfter({seconds})
fit_start = time.perf_counter()
{learner}.fit(epochs_for({seconds}), cbs=[plot, stop])
fit_end = time.perf_counter()
print("RESULT", json.dumps(dict(fit_start=fit_start, fit_end=fit_end, first_batch_end=stop.first_batch_end,
                               draws=draws, max_overhead=plot.max_overhead, every_ms=plot.every_ms)))
"""


def fit_in_kernel(kc, code: str) -> tuple[int, dict]:
    "Run the fit `code`; the picture messages it sent and the RESULT it printed."
    messages = run_cell(kc, code)
    return png_displays(messages), results(messages)[-1]


def measure(plot: str, seconds: float, max_overhead: float | None = None) -> list[dict]:
    "A fresh kernel: a cold fit with `plot`, then a warm one; the figures of each."
    rows = []
    with fresh_kernel(ROOT, prefix="looplab-frames-") as (km, kc):
        run_cell(kc, SETUP)
        learner = "learn"
        if plot == "GANPlot":
            run_cell(kc, GAN_SETUP)
            learner = "gan"
        for state in ("cold", "warm"):
            images, r = fit_in_kernel(kc, FIT.format(make=MAKE[plot].format(budget="" if max_overhead is None else f", max_overhead={max_overhead}"),
                                                seconds=seconds, learner=learner))
            rows.append(figures(plot, state, seconds, images, r))
    return rows


def figures(plot: str, state: str, seconds: float, images: int, r: dict) -> dict:
    "What one fit's record says: frames during training, their rate, delays, costs."
    fit = r["fit_end"] - r["fit_start"]
    during = [(s, e) for s, e, final in r["draws"] if not final]
    first_batch = r["first_batch_end"]
    cost = sum(e - s for s, e in during)
    first_cost = during[0][1] - during[0][0] if during else 0.0
    ends = [first_batch] + [e for s, e in during] + [r["fit_end"]]
    return dict(plot=plot, state=state, seconds=seconds, fit=fit, messages=images - 1, frames=len(during),
                fps=len(during) / (r["fit_end"] - first_batch), first_delay=during[0][1] - first_batch if during else None,
                longest_gap=max(b - a for a, b in zip(ends, ends[1:])), first_cost=first_cost, share=cost / fit,
                share_after_first=(cost - first_cost) / fit, max_overhead=r["max_overhead"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--plots", nargs="+", default=["LossPlot", "LRPlot"], choices=sorted(MAKE))
    parser.add_argument("--max-overhead", type=float, help="passed to LossPlot and LRPlot (default: theirs)")
    args = parser.parse_args()
    print(f"{'plot':<9}{'fit':>6}{'':>5}{'frames':>7}{'msgs':>5}{'fps':>6}{'1st after':>10}{'longest':>8}"
          f"{'1st cost':>9}{'drawing':>8}{'w/o 1st':>8}{'budget':>7}")
    print(f"{'':<9}{'s':>6}{'':>5}{'':>7}{'':>5}{'':>6}{'batch, s':>10}{'gap, s':>8}{'s':>9}{'share':>8}"
          f"{'share':>8}{'':>7}")
    for plot in args.plots:
        for seconds in args.seconds:
            for row in measure(plot, seconds, args.max_overhead):
                first = "-" if row["first_delay"] is None else f"{row['first_delay']:.2f}"
                print(f"{row['plot']:<9}{row['fit']:>6.2f}{row['state']:>5}{row['frames']:>7}{row['messages']:>5}"
                      f"{row['fps']:>6.1f}{first:>10}{row['longest_gap']:>8.2f}{row['first_cost']:>9.3f}"
                      f"{row['share']:>8.1%}{row['share_after_first']:>8.1%}{row['max_overhead']:>7.0%}", flush=True)


if __name__ == "__main__":
    main()
