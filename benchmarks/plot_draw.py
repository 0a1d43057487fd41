"""Time of one full draw of the live loss chart (looplab.loss_plot) against the length of the run it shows: every batch
loss drawn as a point, against `_per_column` (each pixel column's lowest and highest point), which the chart uses.

The same figure (`_loss_axes`, 7 x 3.5 in at 80 dpi), the same noisy losses; the best of `--repeats` draws of
each, interleaved. Prints milliseconds per draw and the ratio per-column / all points, per run length.
Run: python benchmarks/plot_draw.py [--repeats N]
"""
import argparse
import time

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from looplab.loss_plot import _loss_axes, _per_column


def draw_seconds(n: int, per_column: bool) -> float:
    "Seconds of one full draw of the chart holding `n` batch losses and their smoothed curve."
    fig = Figure(figsize=(7.0, 3.5), dpi=80)
    FigureCanvasAgg(fig)
    raw, smooth, _ = _loss_axes(fig, 0.98, False, n)
    steps = np.arange(1, n + 1)
    losses = 2.0 * np.exp(-steps / (n / 4)) + np.random.default_rng(0).normal(0, 0.2, n)
    smoothed = np.convolve(losses, np.ones(50) / 50, mode="same")
    columns = int(fig.axes[0].bbox.width)
    for line, values in ((raw, losses), (smooth, smoothed)):
        line.set_data(*(_per_column(steps, values, columns) if per_column else (steps, values)))
    fig.axes[0].set_ylim(losses.min(), losses.max())
    start = time.perf_counter()
    fig.canvas.draw()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'batches':>9}{'all points':>14}{'per column':>14}{'ratio':>9}")
    for n in (2_000, 20_000, 100_000):
        every, columns = [], []
        for _ in range(args.repeats):
            every.append(draw_seconds(n, per_column=False))
            columns.append(draw_seconds(n, per_column=True))
        print(f"{n:>9,}{min(every) * 1e3:>11.1f} ms{min(columns) * 1e3:>11.1f} ms{min(columns) / min(every):>9.2f}")


if __name__ == "__main__":
    main()
