"""When live plots draw: the throttle's rule with an injected clock, and the output a fit leaves behind.

The frames a real Jupyter kernel sends during a fit are counted in test_live_kernel.py."""
import warnings

import pytest

import looplab.widgets as widgets
from looplab.checks import FakeClock
from looplab.loss_plot import LossPlot
from looplab.widgets import LivePlotWarning, Throttle

from helpers import make_learner


def frames(throttle: Throttle, clock: FakeClock, seconds: float, batch: float, cost) -> list[float]:
    "Run a fit of `seconds` in batches of `batch` s, drawing whenever due; `cost(i)` is the i-th draw's seconds."
    throttle.start()
    return frames_from_now(throttle, clock, seconds, batch, cost)


def frames_from_now(throttle: Throttle, clock: FakeClock, seconds: float, batch: float, cost) -> list[float]:
    "`frames` on a throttle already started."
    drawn = []
    end = clock.now + seconds
    while clock.now < end:
        clock.now += batch
        if throttle.due():
            started = clock.now
            clock.now += cost(len(drawn))
            throttle.done(started)
            drawn.append(started)
    return drawn


# --- the throttle ---------------------------------------------------------------------------------------------

def test_the_first_frame_comes_one_interval_after_start_or_at_the_first_batch_after():
    clock = FakeClock(100.0)
    throttle = Throttle(every_ms=250, max_overhead=0.1, clock=clock)
    throttle.start()
    clock.now = 100.249
    assert not throttle.due()
    clock.now = 100.25
    assert throttle.due()
    slow = FakeClock(0.0)
    drawn = frames(Throttle(clock=slow), slow, seconds=2.0, batch=0.7, cost=lambda i: 0.01)
    assert drawn[0] == pytest.approx(0.7)  # a first batch slower than the interval: drawn right after it


@pytest.mark.parametrize("cold", [0.05, 1.0, 3.0])
def test_a_cold_first_draw_is_charged_but_the_second_frame_comes_on_time(cold):
    clock = FakeClock()
    throttle = Throttle(every_ms=250, max_overhead=0.1, clock=clock)
    drawn = frames(throttle, clock, seconds=cold / 0.1 + 3.0, batch=0.01, cost=lambda i: cold if i == 0 else 0.01)
    # the second frame comes one interval after the first one ended, however long that took
    assert drawn[1] - (drawn[0] + cold) == pytest.approx(0.25, abs=0.011)
    # the third waits until a tenth of the time since start() has paid for both
    assert drawn[2] >= (cold + 0.01) / 0.1 - 0.011
    assert throttle.spent == pytest.approx(cold + 0.01 * (len(drawn) - 1))
    assert len(drawn) >= 6


@pytest.mark.parametrize("seconds, at_least", [(1.0, 2), (3.0, 6)])
@pytest.mark.parametrize("max_overhead", [0.1, 0.15])  # the default budget, or a larger one
def test_a_fit_shows_frames_while_it_trains_with_everything_charged(seconds, at_least, max_overhead):
    clock = FakeClock()
    throttle = Throttle(every_ms=250, max_overhead=max_overhead, clock=clock)
    throttle.start()
    throttle.charge(0.05)  # opening the figure
    clock.now += 0.05
    drawn = frames_from_now(throttle, clock, seconds - 0.05, batch=0.005, cost=lambda i: 0.1 if i == 0 else 0.012)
    assert len(drawn) >= at_least
    assert drawn[0] <= 0.5
    assert throttle.spent == pytest.approx(0.05 + 0.1 + 0.012 * (len(drawn) - 1))


@pytest.mark.parametrize("cost", [0.005, 0.03, 0.1, 0.4])
@pytest.mark.parametrize("max_overhead", [0.05, 0.1, 0.15])
def test_drawing_stays_within_the_share(cost, max_overhead):
    clock = FakeClock()
    throttle = Throttle(every_ms=100, max_overhead=max_overhead, clock=clock)
    drawn = frames(throttle, clock, seconds=60.0, batch=0.003, cost=lambda i: cost)
    assert throttle.spent == pytest.approx(len(drawn) * cost)  # every frame, the first ones too
    assert throttle.spent <= max_overhead * clock.now + cost  # over the share by one draw at most
    assert len(drawn) >= 0.5 * min(60 / (0.1 + cost), max_overhead * 60 / cost)  # and the budget is used


def test_work_without_start_budgets_from_the_first_work():
    clock = FakeClock(5.0)
    throttle = Throttle(every_ms=100, max_overhead=0.1, clock=clock)
    assert throttle.due()
    clock.now = 5.2
    throttle.done(started=5.0)  # charged; the first piece sets no wait beyond the interval
    assert (throttle.began, throttle.spent, throttle.next) == (5.0, pytest.approx(0.2), pytest.approx(5.3))


def test_charges_of_plots_that_share_a_budget_add_up():
    clock = FakeClock()
    first = Throttle(every_ms=250, max_overhead=0.1, clock=clock)
    second = Throttle(every_ms=250, max_overhead=0.1, clock=clock)
    first.start()
    second.start(shared=first)
    first.charge(0.03)
    second.charge(0.02)  # each plot's figure goes to the one budget
    assert first.spent == pytest.approx(0.05) and second.budget is first


# --- what a fit leaves in the output: a picture or a true line, never the placeholder -------------------------

class FakeHandle:
    "Stands for IPython's display handle: records what the output shows."
    def __init__(self, obj):
        self.shown = [obj]

    def update(self, obj):
        self.shown.append(obj)

    def last(self) -> str:
        obj = self.shown[-1]
        return "<picture>" if type(obj).__name__ == "Image" else obj.data


@pytest.fixture
def shown(monkeypatch):
    "Widget mode in a fake notebook: LiveFigure.show opens a FakeHandle; yields the handles opened."
    handles = []
    import IPython.display
    monkeypatch.setattr(widgets, "ipython_shell", lambda: object())
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, display_id=None: handles.append(FakeHandle(obj)) or handles[-1])
    monkeypatch.setattr(LossPlot, "_open_controls", lambda self: None)
    return handles


def test_a_fit_with_pictures_ends_with_the_picture(shown):
    plot = LossPlot(mode="widget")
    make_learner().fit(1, cbs=plot)
    assert "waiting" in shown[0].shown[0].data
    assert shown[0].last() == "<picture>" and plot.live.noted is None


def test_a_fit_with_no_training_batch_says_so(shown):
    plot = LossPlot(mode="widget")
    make_learner().fit(0, cbs=plot)
    assert shown[0].last() == "<em>LossPlot has nothing to draw: the fit ended before its first training batch</em>"


def test_a_plot_closed_before_its_first_picture_says_so_at_once(shown):
    plot = LossPlot(mode="widget", every_ms=1e9)
    learn = make_learner()

    class CloseAt2(widgets.Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.iter == 1:
                plot.close()
                assert "was closed before its first picture" in shown[0].last()

    learn.fit(1, cbs=[plot, CloseAt2()])
    assert shown[0].last() == ("<em>LossPlot was closed before its first picture: plot() draws what it "
                               "collected</em>")
    assert plot.live.n_draws == 0 and len(plot.losses) == 16


def test_a_broken_draw_says_why_in_the_output(shown, monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)

    def broken(self, fig, lines, grow):
        raise RuntimeError("a bug in the plot")

    monkeypatch.setattr(LossPlot, "_fill", broken)
    plot = LossPlot(mode="widget")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_learner().fit(1, cbs=plot)
    assert [w.category for w in caught] == [LivePlotWarning]
    assert shown[0].last() == f"<em>{caught[0].message}</em>"
    assert len(shown[0].shown) == 2  # the placeholder, then at once the line that replaced it


def test_a_fit_ended_by_an_error_before_any_picture_leaves_no_placeholder(shown):
    plot = LossPlot(mode="widget", every_ms=1e9)
    learn = make_learner()

    class Boom(widgets.Callback):
        def on_batch_begin(self):
            raise ValueError("boom")

    with pytest.raises(Exception, match="boom"):
        learn.fit(1, cbs=[plot, Boom()])
    assert "waiting" not in shown[0].last()
