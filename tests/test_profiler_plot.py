"""ProfilePlot while it trains: the y axis holds the typical batch from the first frame, the peaks (its own draws among
them) are cut and marked, its drawing has a phase of its own apart from the user's callbacks, and in a terminal its
progress line fits 80 columns while its summary wraps there, nothing cut. Times come from a fake clock: exact on any
machine, however loaded."""
import io
import math

import numpy as np
import pytest

from looplab.checks import FakeClock
from looplab.profiler import Profiler, ProfilePlot, _largest_shares
from looplab.widgets import Throttle

from helpers import make_learner
from test_profiler import sleeping_learner

DRAW = 0.05  # seconds a frame takes on the fake clock: 25 typical batches


@pytest.fixture
def frames(monkeypatch):
    "Draw at every 5th training batch's end, each draw moving the fake clock by DRAW; record what each frame showed."
    clock = FakeClock()
    shown = []
    calls = []
    fill = ProfilePlot._fill

    def due(self):
        calls.append(1)
        return len(calls) % 5 == 0

    def timed_fill(self, fig, artists, grow):
        fill(self, fig, artists, grow)
        if grow:  # a frame while training; the final one comes after the last batch
            shown.append({"n": self.n_batches, "ylim": fig.axes[0].get_ylim(), "marked": list(artists[-1].get_xdata()),
                          "median_ms": float(np.median(self.batch_times())) * 1e3})
            clock.sleep(DRAW)
    monkeypatch.setattr(Throttle, "due", due)
    monkeypatch.setattr(ProfilePlot, "_fill", timed_fill)
    return clock, shown


@pytest.mark.parametrize("columns", [100, 8], ids=["a batch a window", "few windows"])
def test_the_y_axis_holds_the_typical_batch_from_the_first_frame_and_marks_the_draws(frames, columns):
    clock, shown = frames
    learn = sleeping_learner(forward=0.001, data=0.001, n=40, sleep=clock.sleep)  # 2 ms a batch, but for the draws
    plot = ProfilePlot(mode="widget", columns=columns, clock=clock)
    learn.fit(1, cbs=plot)
    drawn = [5 * k for k in range(1, 9)]  # the 1-based batches at whose end a frame was drawn
    assert [frame["n"] for frame in shown] == [b - 1 for b in drawn]  # each frame shows the batches closed before it
    for frame in shown:
        assert frame["median_ms"] == pytest.approx(2.0)
        assert frame["ylim"] == pytest.approx((0.0, 4.0)), frame  # twice the median batch, from the first frame on
    for frame in shown[1:]:  # every frame after the first shows at least one draw: cut at the top, and marked
        n = frame["n"]
        width = max(1, -(-n // columns))
        windows = {(b - 1) // width for b in drawn if b <= n}  # the windows that hold a batch with a draw
        edges = np.append(np.arange(0, n, width), n)
        assert frame["marked"] == pytest.approx([(edges[w] + edges[w + 1]) / 2 for w in sorted(windows)]), frame
    drawing = np.asarray(plot.times["plot drawing"])
    assert np.flatnonzero(drawing).tolist() == [b - 1 for b in drawn] and np.allclose(drawing[drawing > 0], DRAW)


def test_on_a_loaded_machine_the_y_axis_holds_the_windows_and_cuts_only_the_draws(frames):
    "Another program takes the core 10 ms at every 4th batch: each window of 4 batches or more pays it, and is typical."
    clock, shown = frames
    loads = []

    def loaded(seconds):
        if seconds == 0.0015:  # the loader's part of a batch
            loads.append(seconds)
            seconds += 0.010 if len(loads) % 4 == 0 else 0.0
        clock.sleep(seconds)
    learn = sleeping_learner(forward=0.0005, data=0.0015, n=40, sleep=loaded)  # 2 ms a batch, 12 ms at every 4th
    plot = ProfilePlot(mode="widget", columns=5, clock=clock)
    learn.fit(1, cbs=plot)
    drawn = [5 * k for k in range(1, 9)]
    late = [frame for frame in shown if math.ceil(frame["n"] / 5) >= 4]  # windows of 4 batches or more
    assert [frame["n"] for frame in late] == [19, 24, 29, 34, 39]
    for frame in late:
        assert frame["median_ms"] == pytest.approx(2.0)
        assert frame["ylim"][1] > 4.5, frame  # above twice the median batch, which would cut every window
        n = frame["n"]
        width = math.ceil(n / 5)  # as the chart's windows: 5 columns
        windows = {(b - 1) // width for b in drawn if b <= n}
        edges = np.append(np.arange(0, n, width), n)
        assert frame["marked"] == pytest.approx([(edges[w] + edges[w + 1]) / 2 for w in sorted(windows)]), frame


def test_the_plots_own_drawing_is_a_phase_apart_from_the_callbacks(frames):
    clock, shown = frames
    learn = sleeping_learner(forward=0.001, data=0.001, step_end=0.002, n=40, sleep=clock.sleep)
    plot = ProfilePlot(mode="widget", clock=clock)
    learn.fit(1, cbs=plot)
    assert np.allclose(plot.times["callbacks"], 0.002)  # the user's callback alone, at every batch
    assert sum(plot.times["plot drawing"]) == pytest.approx(8 * DRAW)
    assert plot.callback_times[("on_batch_end", "ProfilePlot")][0] == pytest.approx(8 * DRAW)  # the table's own row
    table = plot.table()
    assert "plot drawing" in table and "plot drawing" not in plain_profiler_table()
    legend = [text.get_text() for text in plot.plot().axes[0].get_legend().get_texts()]
    assert "plot drawing" in legend and "callbacks" in legend


def plain_profiler_table() -> str:
    "A plain Profiler's table: it draws nothing, so it has no plot drawing row."
    prof = Profiler()
    make_learner().fit(1, cbs=prof)
    return prof.table()


class Terminal(io.StringIO):
    "A file that says it is a terminal, so that the progress line is written and rewritten in place."
    def isatty(self):
        return True


def test_in_a_terminal_the_progress_line_fits_80_columns_and_the_summary_wraps(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    tty = Terminal()
    plot = ProfilePlot(mode="text", file=tty)
    make_learner().fit(2, cbs=plot)
    written = tty.getvalue()
    progress = [part.strip() for part in written.split("\r") if part.strip().startswith("batch")]
    progress = [part.split("\n")[0] for part in progress]
    assert progress and all(len(line) <= 79 and "…" not in line for line in progress)  # made to fit, never cut
    summary_lines = written[written.index("ProfilePlot:"):].rstrip("\n").split("\n")
    assert all(len(line) <= 80 for line in summary_lines)
    summary = " ".join(line.strip() for line in summary_lines)
    assert "…" not in summary and all(part in summary for part in _largest_shares(plot.shares()))  # every phase, nothing cut


def test_in_a_notebook_it_shows_the_progress_bar_that_ends_full(monkeypatch, capsys):
    import looplab.widgets as widgets
    monkeypatch.setattr(widgets, "ipython_shell", lambda: object())  # an IPython shell, for the widget code paths
    monkeypatch.setattr(widgets, "in_notebook", lambda: True)
    monkeypatch.delenv("IN_TEST", raising=False)
    from looplab.loss_plot import _ProgressBar
    monkeypatch.setattr(ProfilePlot, "tick_ms", 0)  # the label at every batch, the first one too (no timings yet)
    shown = []
    show = _ProgressBar.show
    monkeypatch.setattr(_ProgressBar, "show", lambda bar, *args: show(bar, *args) or shown.append(bar._html()))
    plot = ProfilePlot()
    make_learner().fit(2, cbs=plot)
    assert plot.live is not None and plot.bar is not None  # the bar above the chart, as LossPlot's
    assert plot.bar.max == 32 and plot.bar.value == 32 and plot.bar.bar_style == "success"
    assert plot.bar.text == plot._summary() and plot.bar.text.startswith("32 batches, ")
    assert len(shown) > 2 and all("looplab-progress" in page for page in shown)  # each label as the kernel sends it
