"""What a live plot's figure costs before its first picture and at each full draw: the setup (`_artists`), the first
full draw and a second one, for each live plot, with its titles placed by matplotlib (measured against the tick labels
at every draw) and held at a fixed height (as `LivePlot` builds them), interleaved.

Each plot is filled from a short fit of its own (the digits MLP; 07c's conv net for ActivationPlot), then its figure
is built afresh and drawn off-screen `--repeats` times each way; the best time of each is printed (noise only ever
slows a draw down), with the ratio fixed / placed by matplotlib and whether the two pictures are equal pixel for
pixel. torch runs on one thread.
Run: python benchmarks/full_draw.py [--repeats 7]
"""
import argparse
import time
import warnings

import matplotlib
import numpy as np
import torch
from torch import nn

from looplab.activations import ActivationPlot
from looplab.blit import BlitFigure
from looplab.conv import conv_net, signal_dls
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.lr_plot import LRPlot
from looplab.profiler import ProfilePlot
from looplab.widgets import _FIXED_TITLES


def filled_plots() -> dict:
    "Each live plot after a short fit in widget mode (no notebook: nothing is shown), ready to be drawn again."
    def digits():
        set_seed(0)
        dls = DataLoaders.from_tensors(*load_digits(), bs=64)
        return Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)
    plots = {"LossPlot": LossPlot(mode="widget"), "ProfilePlot": ProfilePlot(mode="widget"),
             "LRPlot": LRPlot(sched_fn=lambda pct: 0.2 * (1 - pct), mode="widget")}
    for plot in plots.values():
        digits().fit(2, cbs=plot)
    set_seed(0)
    plots["ActivationPlot"] = ActivationPlot(mode="widget")
    Learner(conv_net(), signal_dls(n_train=1000, bs=40, seed=0), progress=False).fit(2, cbs=plots["ActivationPlot"])
    return plots


def build_and_draw(plot, fixed: bool) -> tuple[float, float, float, bytes]:
    "Seconds of the setup, the first full draw and a second one; the picture's pixels."
    start = time.perf_counter()
    with matplotlib.rc_context(_FIXED_TITLES if fixed else {}):
        figure = BlitFigure(plot.figsize, plot.dpi)
        artists = plot._artists(figure.fig)
    figure.animate(*artists)
    plot._fill(figure.fig, artists, grow=False)
    built = time.perf_counter()
    figure.render()
    first = time.perf_counter()
    figure.invalidate()
    figure.render()
    again = time.perf_counter()
    return built - start, first - built, again - first, bytes(figure.fig.canvas.buffer_rgba())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plots = filled_plots()
    print(f"matplotlib {matplotlib.__version__}; best of {args.repeats}, in ms: titles placed by matplotlib -> "
          "held at a fixed height (ratio)")
    print(f"{'plot':<16}{'setup':>24}{'first full draw':>28}{'next full draw':>28}  same pixels")
    for name, plot in plots.items():
        runs = {False: [], True: []}
        for _ in range(args.repeats):
            for fixed in (False, True):
                runs[fixed].append(build_and_draw(plot, fixed))
        cells = []
        for k in range(3):
            auto, fixed = (min(r[k] for r in runs[f]) * 1e3 for f in (False, True))
            cells.append(f"{auto:7.1f} -> {fixed:6.1f} ({fixed / auto:.2f})")
        same = runs[False][-1][3] == runs[True][-1][3]
        print(f"{name:<16}{cells[0]:>24}{cells[1]:>28}{cells[2]:>28}  {same}")


if __name__ == "__main__":
    main()
