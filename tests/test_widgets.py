"""Headless behaviour of looplab.widgets: text fallback, off-screen drawing, throttling, bad input.

The live loss plot and compare_runs, built on it, are tested in test_loss_plot.py."""
import io
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import looplab.widgets as widgets
from looplab.blit import BlitFigure
from looplab.widgets import LiveFigure, ProgressLine, Throttle, in_notebook

from helpers import PNG


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


# --- where are we ---------------------------------------------------------------------------------------------

def test_a_plain_script_is_text_mode_and_never_imports_ipython_or_ipywidgets(tmp_path):
    script = f"""
import io, sys, torch
from torch import nn
from looplab.data import DataLoaders
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.lr_plot import LRPlot
from looplab.widgets import in_notebook
x = torch.randn(64, 4); y = (x[:, 0] > 0).long()
batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8)]
learn = Learner(nn.Linear(4, 2), DataLoaders(batches, batches[:2]), lr=0.1)
loss_plot = LossPlot()
lr_plot = LRPlot(sched_fn=lambda pct: 0.1 * (1 - pct))
learn.fit(2, cbs=[loss_plot, lr_plot])
assert not in_notebook() and loss_plot.live is None and lr_plot.live is None
assert "ipywidgets" not in sys.modules and "IPython" not in sys.modules
loss_plot.save(r"{tmp_path / 'loss.png'}")
lr_plot.save(r"{tmp_path / 'lr.png'}")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "LossPlot: 16 training batches" in out.stdout
    assert "\r" not in out.stdout  # not a terminal: no line rewritten in place
    for name in ("loss.png", "lr.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG


def test_in_test_means_no_frontend(monkeypatch):
    monkeypatch.setattr(widgets, "ipython_shell", lambda: type("Kernelish", (), {"kernel": object()})())
    monkeypatch.delenv("IN_TEST", raising=False)
    assert in_notebook()
    monkeypatch.setenv("IN_TEST", "1")
    assert not in_notebook()


# --- throttle, progress line, helpers -------------------------------------------------------------------------

def test_throttle_spaces_work_by_every_ms_and_by_its_cost():
    # every piece is charged; the first two wait for the interval only, later ones also for the budget
    now = [10.0]
    throttle = Throttle(every_ms=100, max_overhead=0.1, clock=lambda: now[0])
    throttle.start()
    assert not throttle.due()
    now[0] = 10.1
    assert throttle.due()
    throttle.done(started=10.05)  # the first piece, 50 ms, charged: the next is one interval later all the same
    now[0] = 10.19
    assert not throttle.due()
    now[0] = 10.2
    assert throttle.due()
    now[0] = 10.25
    throttle.done(started=10.2)  # 50 ms more: 100 ms at 10 % is paid once 1 s has gone by since start()
    assert throttle.spent == pytest.approx(0.1) and throttle.next == pytest.approx(11.0)
    now[0] = 10.99
    assert not throttle.due()
    now[0] = 11.01
    assert throttle.due()


@pytest.mark.parametrize("kwargs, error, words", [({"every_ms": 0}, ValueError, ["every_ms", "0"]),
                                                  ({"every_ms": "fast"}, TypeError, ["'fast'"]),
                                                  ({"every_ms": True}, TypeError, ["True"]),
                                                  ({"max_overhead": 0}, ValueError, ["max_overhead"]),
                                                  ({"max_overhead": 1.5}, ValueError, ["1.5"])])
def test_throttle_refuses_bad_arguments(kwargs, error, words):
    with pytest.raises(error) as info:
        Throttle(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_progress_line_rewrites_in_place_on_a_terminal_only():
    term = FakeTerminal()
    line = ProgressLine(term)
    line.update("a long line")
    line.update("short")
    assert term.getvalue() == "\ra long line\rshort      "
    log = io.StringIO()
    line = ProgressLine(log)
    line.update("a long line")
    line.finish("end")
    assert log.getvalue() == "end\n"


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6), st.booleans())
def test_grown_limits_hold_the_range_and_are_stable(lo, extent, log):
    hi = lo + extent
    if log:
        lo = abs(lo) + 1e-6
        hi = lo + extent
    limits = widgets.grown_limits(None, lo, hi, log)
    assert limits[0] <= lo and hi <= limits[1]
    assert widgets.grown_limits(limits, lo, hi, log) == limits  # nothing new: the background is kept


# --- the live figure ------------------------------------------------------------------------------------------

def test_live_figure_blits_and_blitting_draws_what_a_full_draw_draws():
    live = LiveFigure(figsize=(3, 2))
    ax = live.fig.add_subplot()
    line, = ax.plot([], [])
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    live.animate(line)
    for n in range(1, 6):
        line.set_data(range(n), range(n))
        live.draw()
    assert (live.n_draws, live.n_full_draws) == (5, 1)
    assert live.handle is None  # no IPython here: nothing to show the picture in
    blitted = np.asarray(Image.open(io.BytesIO(live.png)))
    live.invalidate()
    full = np.asarray(Image.open(io.BytesIO(live.render())))
    assert (blitted == full).all()
    ax.set_xlim(0, 20)
    live.render()
    assert live.n_full_draws == 3


def test_an_animated_axes_is_drawn_whole_at_each_render_and_its_limits_keep_the_background():
    live = LiveFigure(figsize=(6, 2.5))
    still, moving = live.fig.subplots(1, 2)
    still.plot([0, 1], [0, 1])
    live.animate(moving)
    for n in range(1, 5):
        moving.clear()  # a panel drawn afresh at each draw, its limits autoscaled to new data
        moving.plot(range(n + 1), range(n + 1))
        moving.set_title(f"{n + 1} points")
        live.draw()
    assert (live.n_draws, live.n_full_draws) == (4, 1)
    blitted = np.asarray(Image.open(io.BytesIO(live.png)))
    live.invalidate()
    full = np.asarray(Image.open(io.BytesIO(live.render())))
    assert (blitted == full).all()  # the animated axes, ticks and title included, as a full draw draws them
    still.set_xlim(0, 2)  # the other axes' limits still redraw the background
    live.render()
    assert live.n_full_draws == 3


def test_live_titles_held_at_a_fixed_height_are_where_matplotlib_would_place_them():
    """A live figure's titles are built at a fixed height (no measuring of tick labels at each full draw, a tenth to a
    fifth of it: benchmarks/full_draw.py); no live plot puts ticks above its axes, so the picture is the same."""
    import matplotlib
    from torch import nn
    from looplab.activations import ActivationPlot
    from looplab.conv import conv_net, signal_dls
    from looplab.data import set_seed
    from looplab.learner import Learner
    from looplab.loss_plot import LossPlot
    from looplab.lr_plot import LRPlot
    from looplab.profiler import ProfilePlot
    from helpers import make_dls

    def picture(plot, fixed):
        with matplotlib.rc_context(widgets._FIXED_TITLES if fixed else {}):
            figure = BlitFigure(plot.figsize, plot.dpi)
            artists = plot._artists(figure.fig)
        figure.animate(*artists)
        plot._fill(figure.fig, artists, grow=False)
        return np.asarray(Image.open(io.BytesIO(figure.render())))

    set_seed(0)
    plots = [LossPlot(mode="widget"), LRPlot(sched_fn=lambda pct: 0.1 * (1 - pct), mode="widget"),
             ProfilePlot(mode="widget")]
    for plot in plots:
        Learner(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), make_dls(), progress=False).fit(
            2, cbs=plot)
    activations = ActivationPlot(mode="widget")
    Learner(conv_net(), signal_dls(n_train=80, bs=40, seed=0), progress=False).fit(1, cbs=activations)
    for plot in [*plots, activations]:
        assert plot.live.fig.axes[0].get_title()  # a title to place
        assert (picture(plot, fixed=True) == picture(plot, fixed=False)).all(), type(plot).__name__
        live = np.asarray(Image.open(io.BytesIO(plot.live.png)))  # the fit's last picture: the same again
        assert (live == picture(plot, fixed=True)).all(), type(plot).__name__
