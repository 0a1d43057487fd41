"""The live loss plot (looplab.loss_plot): it matches the Recorder, draws off-screen or writes a progress line,
syncs nothing between draws, survives NaNs, closed widgets and a failing display; and compare_runs."""
import io
import math
import re
import warnings

import pytest
import torch
from PIL import Image
from torch import nn

import looplab.widgets as widgets
from looplab.callback import Callback, CallbackError
from looplab.data import DataLoaders
from looplab.loss_plot import LossPlot, compare_runs
from looplab.metrics import Accuracy
from looplab.recorder import Recorder, smooth, smoothing_beta
from looplab.widgets import LivePlotWarning

from helpers import PNG, make_dls, make_learner


class Every(Callback):
    "Calls `fn(learn)` at every training batch's on_batch_begin, counting them."
    def __init__(self, fn):
        self.fn = fn
        self.n = 0

    def on_batch_begin(self):
        if self.learn.training:
            self.n += 1
            self.fn(self)


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class FakeShell:
    "Stands for an IPython shell, so that the widget code paths run; IPython's display prints outside a kernel."


@pytest.fixture
def notebook_like(monkeypatch):
    "Make looplab.widgets believe it runs in a notebook with a frontend (widgets are created, display prints)."
    monkeypatch.setattr(widgets, "ipython_shell", lambda: FakeShell())
    monkeypatch.setattr(widgets, "in_notebook", lambda: True)
    monkeypatch.delenv("IN_TEST", raising=False)


# --- LossPlot -------------------------------------------------------------------------------------------------

def test_loss_plot_smooths_as_the_recorder_does_at_every_draw_and_afresh_for_each_fit(always_due):
    learn = make_learner()
    learn.fit(1)
    plot = LossPlot(mode="widget", beta=0.9)
    checked = []
    fill = plot._fill

    def checking_fill(fig, artists, grow):
        n = len(plot.losses)
        checked.append(plot.smooth == learn.recorder.smooth_losses(0.9)[16:16 + n] and len(plot.smooth) == n)
        fill(fig, artists, grow)

    plot._fill = checking_fill
    learn.fit(1, cbs=plot)
    assert len(checked) > 5 and all(checked)
    assert plot.smooth == learn.recorder.smooth_losses(0.9)[16:] == smooth(learn.recorder.losses[16:], 0.9)
    assert plot.smooth[0] == plot.losses[0]  # the second fit starts at its own first loss, not the first fit's average


def test_the_second_fit_is_smoothed_afresh_with_its_own_beta():
    learn = make_learner()
    learn.fit(1)  # 16 batches: a window of 2, beta 0.5
    plot = LossPlot(mode="widget")
    learn.fit(30, cbs=plot)  # 480 batches: a window of 24, beta 0.96
    recorder = learn.recorder
    assert recorder.fits == [(0, 0.5), (16, 0.96)]
    smoothed = recorder.smooth_losses()
    assert smoothed[:16] == smooth(recorder.losses[:16], 0.5)
    assert smoothed[16] == recorder.losses[16] and smoothed[16:] == smooth(recorder.losses[16:], 0.96)
    assert plot._beta == 0.96 and plot.smooth == smoothed[16:]
    assert "train (smoothed, β=0.96)" in [line.get_label() for line in plot.plot().axes[0].lines]
    assert recorder.smooth_losses(0.9) == smooth(recorder.losses[:16], 0.9) + smooth(recorder.losses[16:], 0.9)


@pytest.mark.parametrize("n_batches, beta", [(None, 0.98), (1, 0.5), (40, 0.5), (60, 0.67), (200, 0.9), (500, 0.96),
                                             (1000, 0.98), (10**6, 0.98)])
def test_the_beta_rule_gives_a_window_of_a_twentieth_of_the_fit_from_2_to_50_batches(n_batches, beta):
    assert smoothing_beta(n_batches) == beta
    if n_batches is not None:
        window = 1 / (1 - beta)
        assert 2 <= window <= 50.01 and (window == 2 or window > 49 or abs(window - n_batches / 20) < 0.1 * window)


def test_the_fits_travel_with_the_recorder_state():
    learn = make_learner()
    learn.fit(1)
    learn.fit(2)
    state = learn.recorder.state_dict()
    restored = Recorder()
    restored.load_state_dict(state)
    assert restored.fits == learn.recorder.fits == [(0, 0.5), (16, 0.5)]
    assert restored.smooth_losses() == learn.recorder.smooth_losses()
    older = Recorder()  # a state saved before the Recorder kept its fits: its losses are one fit
    older.load_state_dict({k: v for k, v in state.items() if k != "fits"})
    assert older.fits == [] and older.smooth_losses() == smooth(older.losses, smoothing_beta(48))


def test_loss_plot_text_mode_matches_the_recorder_and_prints_one_summary_line():
    learn = make_learner(metrics=[Accuracy()])
    out = io.StringIO()
    plot = LossPlot(file=out)
    learn.fit(3, cbs=plot)
    assert plot.live is None
    assert plot.losses == learn.recorder.losses
    assert plot.smooth == learn.recorder.smooth_losses()
    assert plot.valid_steps == [16, 32, 48]
    assert plot.valid_losses == [row["valid_loss"] for row in learn.recorder.values]
    assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("LossPlot: 48 training batches")


def test_loss_plot_on_a_terminal_rewrites_a_progress_line_with_time_left(always_due):
    learn = make_learner()
    term = FakeTerminal()
    plot = LossPlot(file=term)
    learn.fit(2, cbs=plot)
    text = term.getvalue()
    lines = text.split("\r")
    assert re.fullmatch(r"epoch 1/2 · batch \d+/16 · loss \d\.\d{4} · 0:00 elapsed( · 0:\d\d left)?", lines[1])
    assert any(line.startswith("epoch 2/2 · batch ") for line in lines)  # the budget spaces them out
    assert lines[-2].strip() == "" and lines[-1].startswith("LossPlot: 32 training batches")  # blanked, then finished


def test_loss_plot_widget_mode_without_frontend_draws_off_screen_and_blits(always_due):
    learn = make_learner(dls=make_dls(n=1024))
    plot = LossPlot(mode="widget", log=True)
    learn.fit(2, cbs=plot)
    assert plot.bar is None and plot.live.handle is None  # nothing to show widgets in
    assert plot.live.n_draws > 20
    assert plot.live.n_full_draws < plot.live.n_draws / 4  # the background is rarely redrawn
    assert plot.losses == learn.recorder.losses
    assert Image.open(io.BytesIO(plot.live.png)).size == (560, 280)


def test_loss_plot_syncs_nothing_between_draws(monkeypatch):
    learn = make_learner()
    plot = LossPlot(mode="widget", every_ms=1e9)  # never due during training
    flushes = []
    original = learn.recorder.flush
    monkeypatch.setattr(learn.recorder, "flush", lambda: (flushes.append(learn.training), original())[1])
    learn.fit(2, cbs=plot)
    assert plot.live.n_draws == 1  # the final draw, always
    assert len(plot.losses) == 32
    assert flushes and not any(flushes)  # losses were converted only outside training batches


def test_loss_plot_second_fit_draws_only_its_own_batches():
    learn = make_learner()
    learn.fit(1)
    plot = LossPlot(mode="widget")
    learn.fit(1, cbs=plot)
    assert plot.losses == learn.recorder.losses[16:]


def test_loss_plot_survives_non_finite_losses(always_due):
    calls = [0]

    def sometimes_nan(preds, yb):
        calls[0] += 1
        loss = nn.functional.cross_entropy(preds, yb)
        if calls[0] % 5 == 0:
            return torch.full_like(loss, math.nan) + 0 * loss  # a NaN value whose gradient is 0
        return loss

    learn = make_learner(loss_func=sometimes_nan)
    plot = LossPlot(mode="widget")
    with pytest.warns(RuntimeWarning, match="the training loss is nan") as caught:  # the Recorder says so, each time
        with warnings.catch_warnings():
            warnings.simplefilter("error", LivePlotWarning)
            learn.fit(1, cbs=plot)
    assert [re.search(r"batch (\d+)", str(w.message)).group(1) for w in caught] == ["5", "10", "15"]
    assert {w.filename for w in caught} == {__file__}  # each names the line that trained: this test's, not the kit's
    assert sum(math.isnan(v) for v in plot.losses) == 3 and plot.live.n_draws > 1
    low, high = plot.live.fig.axes[0].get_ylim()
    assert math.isfinite(low) and math.isfinite(high)
    assert plot._repr_png_()[:8] == PNG


def test_loss_plot_with_a_loader_without_length(always_due):
    batches = make_dls().train

    class Stream:
        def __iter__(self):
            return iter(batches)

    learn = make_learner(dls=DataLoaders(Stream(), None))
    plot = LossPlot(mode="widget")
    learn.fit(2, cbs=plot)
    assert plot._total is None and len(plot.losses) == 32
    assert plot.live.fig.axes[0].get_xlim()[1] >= 32


def test_loss_plot_fit_zero_epochs_and_plot_before_training():
    learn = make_learner()
    out = io.StringIO()
    plot = LossPlot(file=out)
    learn.fit(0, cbs=plot)
    assert out.getvalue() == "LossPlot: no training batch\n"
    with pytest.raises(ValueError, match="nothing to plot yet"):
        plot.save("never.png")
    assert plot._repr_png_() is None
    widget = LossPlot(mode="widget")
    learn.fit(0, cbs=widget)
    assert widget.live.n_draws == 0


def test_loss_plot_without_recorder_says_so_and_does_not_hide_it():
    learn = make_learner()
    learn.remove_cbs(learn.recorder)
    with pytest.raises(CallbackError, match="Recorder is not attached"):
        learn.fit(1, cbs=LossPlot())


@pytest.mark.parametrize("kwargs, words", [({"beta": 1}, ["beta"]), ({"beta": -0.1}, ["beta"]),
                                           ({"mode": "gui"}, ["mode", "'gui'"]), ({"every_ms": 0}, ["every_ms"])])
def test_loss_plot_refuses_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as info:
        LossPlot(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_loss_plot_in_a_notebook_shows_a_progress_bar_that_ends_full(notebook_like, capsys):
    learn = make_learner()
    plot = LossPlot()
    learn.fit(2, cbs=plot)
    assert plot.live is not None and plot.bar is not None
    assert plot.bar.max == 32 and plot.bar.value == 32 and plot.bar.bar_style == "success"
    assert plot.bar.text.startswith("32 training batches in ")


def test_closing_the_widgets_during_training_does_not_stop_it(notebook_like, capsys, always_due):
    import ipywidgets
    learn = make_learner()
    plot = LossPlot()
    closer = Every(lambda cb: plot.close() if cb.n == 3 else None)
    learn.fit(1, cbs=[plot, closer])
    assert len(plot.losses) == 16 and closer.n == 16
    plot2 = LossPlot()
    closer = Every(lambda cb: ipywidgets.Widget.close_all() if cb.n == 3 else None)  # a frontend gone
    with warnings.catch_warnings():
        warnings.simplefilter("error", LivePlotWarning)
        learn.fit(1, cbs=[plot2, closer])
    assert len(plot2.losses) == 16 and plot2.live.n_draws > 3


def test_a_failing_display_warns_once_and_training_goes_on(notebook_like, capsys, always_due):
    learn = make_learner()
    plot = LossPlot()

    class GoneHandle:
        def update(self, obj):
            raise ConnectionError("the frontend went away")

    breaker = Every(lambda cb: setattr(plot.live, "handle", GoneHandle()) if cb.n == 2 else None)
    with pytest.warns(LivePlotWarning, match="the frontend went away") as record:
        learn.fit(2, cbs=[plot, breaker])
    assert len([w for w in record if issubclass(w.category, LivePlotWarning)]) == 1  # others are the libraries'
    assert breaker.n == 32 and len(plot.losses) == 32
    assert plot.plot().axes[0].lines[0].get_xdata().size == 32  # the data are all there


# --- compare_runs ---------------------------------------------------------------------------------------------

def test_compare_runs_takes_learners_recorders_and_state_dicts(tmp_path):
    runs = {}
    for lr in (0.05, 0.5):
        learn = make_learner(lr=lr, metrics=[Accuracy()])
        learn.fit(2)
        runs[f"lr={lr}"] = learn
    runs["recorder"] = runs["lr=0.05"].recorder
    runs["state"] = {"losses": torch.tensor(runs["lr=0.5"].recorder.losses), "values": runs["lr=0.5"].recorder.values}
    fig = compare_runs(runs, log=True)
    assert [ax.get_title() for ax in fig.axes] == ["train loss (smoothed, β=0.5)", "valid loss", "accuracy"]
    assert all(len(ax.lines) == 4 for ax in fig.axes)
    assert fig.axes[0].lines[3].get_ydata()[0] == runs["lr=0.5"].recorder.losses[0]  # a bare history: one fit, afresh
    legend = fig.axes[0].get_legend()  # the runs, named above the first panel: off the curves
    assert [t.get_text() for t in legend.get_texts()] == list(runs)
    assert legend.get_window_extent().y0 >= fig.axes[0].bbox.y1
    assert all(ax.get_legend() is None for ax in fig.axes[1:])
    assert fig.axes[0].get_yscale() == "log"
    fig.savefig(tmp_path / "compare.png")
    assert (tmp_path / "compare.png").read_bytes()[:8] == PNG


def test_compare_runs_names_each_runs_beta_when_they_differ():
    short, long = make_learner(), make_learner()
    short.fit(1)
    long.fit(30)
    fig = compare_runs({"short": short, "long": long})
    assert fig.axes[0].get_title() == "train loss (smoothed)"
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["short (β=0.5)", "long (β=0.96)"]
    assert compare_runs({"short": short, "long": long}, beta=0.9).axes[0].get_title() == "train loss (smoothed, β=0.9)"


def test_compare_runs_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        compare_runs({})
    with pytest.raises(TypeError, match="'x'"):
        compare_runs({"x": [1.0, 2.0]})
    with pytest.raises(ValueError, match="'fresh' has no training batch"):
        compare_runs({"fresh": make_learner()})


# --- text mode: a line each plot, 80 columns; in a log; and after Stop ------------------------------------------

def terminal_parts(text: str) -> tuple[list[str], list[str]]:
    "What a terminal got: the progress lines (each rewrite of the line, blanks aside) and the finished lines."
    progress, finished = [], []
    for line in text.split("\n"):
        *rewrites, last = line.split("\r")
        progress += [r.rstrip() for r in rewrites if r.strip()]
        if last.strip():
            finished.append(last)
    return progress, finished


def test_lr_plot_on_a_terminal_writes_a_progress_line_and_a_summary(always_due):
    from looplab.lr_plot import LRPlot
    from looplab.schedule import ParamScheduler
    term = FakeTerminal()
    sched = lambda pct: 0.1 * (1 - pct)
    make_learner().fit(2, cbs=[ParamScheduler({"lr": sched}), LRPlot(sched_fn=sched, mode="text", file=term)])
    progress, finished = terminal_parts(term.getvalue())
    assert progress and all(re.fullmatch(r"step \d+/32 · lr \d\.\d+(e-\d+)?", line) for line in progress), progress
    assert finished == ["LRPlot: 32 steps, lr 0.1 → 0.00313 (between 0.00313 and 0.1)"]


class Screen:
    "A terminal's screen: \\r, \\n and ESC[nA (up n lines) move the cursor, text overwrites what is there."
    def __init__(self):
        self.rows, self.row, self.col, self.widest = [""], 0, 0, 0
        self.seen: list[list[str]] = []  # the screen after each write

    def write(self, text: str) -> None:
        for token in re.split(r"(\r|\n|\x1b\[\d+A)", text):
            if token == "\r":
                self.col = 0
            elif token == "\n":
                self.row, self.col = self.row + 1, 0
                self.rows += [""] * (self.row + 1 - len(self.rows))
            elif token.startswith("\x1b["):
                self.row -= int(token[2:-1])
            elif token:
                line = self.rows[self.row].ljust(self.col)
                self.rows[self.row] = line[:self.col] + token + line[self.col + len(token):]
                self.col += len(token)
                self.widest = max(self.widest, self.col)
        self.seen.append([row.rstrip() for row in self.rows])


class ScreenTerminal(FakeTerminal):
    def __init__(self):
        super().__init__()
        self.screen = Screen()

    def write(self, text):
        self.screen.write(text)
        return super().write(text)


def test_two_plots_have_a_line_each_and_finish_on_lines_of_their_own(always_due):
    from looplab.lr_plot import LRPlot
    term = ScreenTerminal()
    loss_plot = LossPlot(mode="text", file=term)
    lr_plot = LRPlot(sched_fn=lambda pct: 0.1 * (1 - pct), mode="text", file=term)
    make_learner().fit(2, cbs=[loss_plot, lr_plot])
    screen = term.screen
    both = [rows for rows in screen.seen if len(rows) >= 2 and rows[0].startswith("epoch ")
            and rows[1].startswith("step ")]
    assert both, screen.seen[-5:]  # the loss plot's line, and under it the LR plot's, each whole
    assert all(re.search(r"· loss \d\.\d{4}", rows[0]) and re.search(r"· lr \d", rows[1]) for rows in both)
    assert screen.widest <= 79  # the last column would wrap
    finished = [row for row in screen.seen[-1] if row]
    assert [row.split(":")[0] for row in finished] == ["LossPlot", "LRPlot"], finished  # nothing left over


def test_in_a_log_a_fit_of_plots_writes_a_line_every_five_seconds(monkeypatch):
    from looplab.lr_plot import LRPlot
    from looplab.progress import ProgressLine
    seconds = iter(range(0, 10_000, 2))  # each read of the clock: two seconds later
    monkeypatch.setattr(ProgressLine, "__init__", lambda self, file=None, clock=None, init=ProgressLine.__init__:
                        init(self, file, lambda: next(seconds)))
    log = io.StringIO()
    learn = make_learner(progress=False)
    learn.fit(2, cbs=[LossPlot(mode="text", file=log, every_ms=1), LRPlot(sched_fn=lambda pct: 0.1, mode="text",
                                                                          file=log, every_ms=1)])
    lines = log.getvalue().splitlines()
    progress = [line for line in lines if "training batches in" not in line and not line.startswith("LRPlot: 32")]
    assert progress and all(re.match(r"(LossPlot: epoch \d/2 · batch \d+/16|LRPlot: step \d+/32) · ", line)
                            for line in progress), lines
    assert {line.split(":")[0] for line in progress} == {"LossPlot", "LRPlot"}
    assert lines[-2].startswith("LossPlot: 32 training batches in") and lines[-1].startswith("LRPlot: 32 steps")


def test_a_long_summary_wraps_at_80_columns_and_loses_nothing():
    from looplab.progress import ProgressLine
    out = io.StringIO()
    text = "LossPlot: " + " · ".join(f"part {i} of a long summary" for i in range(8))
    ProgressLine(out).finish(text)
    lines = out.getvalue().splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert " ".join(line.strip() for line in lines) == text


class PressStop(Callback):
    "Sends SIGINT to this process, as Jupyter's Stop button does, after training batch `at`."
    order = 200

    def __init__(self, at: int):
        self.at = at

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.at:
            import os
            import signal
            os.kill(os.getpid(), signal.SIGINT)


class SlowLastDraw(LossPlot):
    "A LossPlot whose last draw gets a second Stop press while it draws, as a slow final frame does 0.5 s later."
    def _fill(self, fig, lines, grow):
        if not grow:
            import os
            import signal
            os.kill(os.getpid(), signal.SIGINT)
        super()._fill(fig, lines, grow)


@pytest.mark.parametrize("second_press", [False, True])
def test_after_stop_the_axes_fit_what_was_done_and_a_second_press_keeps_the_reason(second_press):
    learn = make_learner(dls=make_dls(n=1024))
    plot = (SlowLastDraw if second_press else LossPlot)(mode="widget")
    with pytest.raises(KeyboardInterrupt) as info:
        learn.fit(5, cbs=[plot, PressStop(at=20)])
    message = str(info.value)
    assert message.startswith("fit stopped by KeyboardInterrupt at epoch 1/5, after batch 20/64") and "\n" not in message
    assert plot.live.n_draws >= 1 and len(plot.losses) == 20
    assert plot.live.fig.axes[0].get_xlim() == (0, 20)  # the 20 batches done, not the 320 planned


def test_save_gives_savefig_its_keywords_and_plot_its_own(tmp_path):
    learn = make_learner()
    plot = LossPlot(mode="text", file=io.StringIO())
    learn.fit(1, cbs=plot)
    assert Image.open(plot.save(tmp_path / "loss.png", dpi=60)).size == (7 * 60, round(3.5 * 60))
    assert Image.open(plot.save(tmp_path / "loss80.png")).size == (7 * 80, 3.5 * 80)  # the plot's own dpi
    with pytest.raises(TypeError, match=r"dpii=60.*did you mean 'dpi'"):
        plot.save(tmp_path / "bad.png", dpii=60)
    assert not (tmp_path / "bad.png").exists()


def test_a_bar_says_while_training_that_it_is_a_moment_and_one_plot_says_waiting(notebook_like, monkeypatch):
    "A notebook saved mid-fit keeps the bar's last HTML: it must read as a snapshot; two plots show one waiting line."
    from looplab.lr_plot import LRPlot
    from looplab.loss_plot import _ProgressBar
    monkeypatch.setattr(LossPlot, "tick_ms", 0)
    pages, placeholders = [], []
    bar_show = _ProgressBar.show
    monkeypatch.setattr(_ProgressBar, "show", lambda self, *args: bar_show(self, *args) or pages.append(self._html()))
    show = widgets.LiveFigure.show
    monkeypatch.setattr(widgets.LiveFigure, "show", lambda self, text="waiting for the first batch":
                        placeholders.append(text) or show(self, text))
    make_learner().fit(1, cbs=[LossPlot(), LRPlot(sched_fn=lambda pct: 0.1)])
    running, final = pages[:-1], pages[-1]
    assert running and all(re.search(r"as of \d\d:\d\d:\d\d, while training</span>", page) for page in running)
    assert "while training" not in final and "16 training batches in" in final
    assert placeholders == ["waiting for the first batch", ""]  # the second plot's output stays empty until it draws


def test_summaries_write_small_losses_as_the_epoch_table_does():
    from looplab.progress import table_number
    plot = LossPlot(mode="text", file=io.StringIO())
    make_learner().fit(1, cbs=plot)
    plot.smooth[-1] = 3.866e-05
    plot.valid_losses[-1] = 0.25
    assert "loss 3.866e-05 · valid loss 0.2500" in plot._summary() and table_number(3.866e-05) == "3.866e-05"
    assert plot._figures() == ["loss 3.866e-05"]


def test_the_first_time_left_is_within_twice_the_truth_when_the_first_second_is_slow():
    "A fit whose first second pays for first-time costs and the plot's first pictures (4x the steady batch time)."
    from looplab.loss_plot import FitTime
    now = [0.0]
    total, steady = 2000, 0.005  # 10 s of steady batches
    timer = FitTime(total=total, clock=lambda: now[0])
    first_left = None
    for position in range(total):
        now[0] += 0.3 if position == 0 else (4 * steady if now[0] < 1.3 else steady)
        timer.begin_at(position)
        shown = timer.text(position + 1)
        if first_left is None and "left" in shown:
            minutes, seconds = shown.split(" · ")[1].split()[0].split(":")
            first_left = (int(minutes) * 60 + int(seconds), steady * (total - position - 1))
    estimate, truth = first_left
    assert truth / 2 <= estimate <= 2 * truth, first_left
