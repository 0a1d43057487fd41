"""The live pictures are as clean as the static ones (looplab.loss_plot, lr_plot, gan_images): in the frames drawn
during training and in `plot()`, no curve is drawn over a legend, the labels and titles lie inside the figure, and
each axis fits its curves."""
import math

import pytest
import torch
from torch import nn

from looplab.callback import Callback
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.gan import gan_learner
from looplab.gan_images import GANPlot, digit_grid
from looplab.learner import Learner
from looplab.loss_plot import LossPlot
from looplab.lr_plot import LRPlot
from looplab.schedule import fit_one_cycle, one_cycle_scheds

from helpers import make_learner


class AtBatch(Callback):
    "Calls `fn()` after training batch `n_iter`, once the plots (lower order) have drawn it."
    order = 200

    def __init__(self, n_iter, fn):
        self.n_iter = n_iter
        self.fn = fn

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            self.fn()


def extents(fig):
    "Draw `fig` (as a full draw of the live figure does) and return its renderer."
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def check_clean(fig, animated=()) -> list[str]:
    "What is wrong with `fig`'s frame: legends that a curve may cross, labels or titles outside the figure."
    renderer = extents(fig)
    problems = []
    inside = fig.bbox
    for i, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            if box.overlaps(ax.bbox):  # the animated curves are clipped to the data area: outside it, none reaches
                problems.append(f"axes {i}: the legend overlaps the data area ({box} vs {ax.bbox})")
            if legend.get_animated() or legend in animated:
                problems.append(f"axes {i}: the legend is animated")
            if box.overlaps(ax.title.get_window_extent(renderer)) and ax.get_title():
                problems.append(f"axes {i}: the legend overlaps the title")
        for name, text in (("y label", ax.yaxis.label), ("x label", ax.xaxis.label), ("title", ax.title)):
            if not text.get_text():
                continue
            box = text.get_window_extent(renderer)
            if not (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1):
                problems.append(f"axes {i}: the {name} {text.get_text()!r} is outside the figure ({box})")
    for artist in animated:  # every animated artist is clipped to its axes' data area
        if artist.get_clip_on() is False or artist.get_clip_box() is None:
            problems.append(f"{artist} is not clipped to its axes")
    return problems


def wide_digits_learner(**kwargs):
    set_seed(0)
    dls = DataLoaders.from_tensors(*load_digits(), bs=64)
    return Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, progress=False,
                   opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9), **kwargs)


# --- LossPlot -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("log", [False, True])
def test_loss_plot_frames_keep_the_legend_off_the_curves_and_the_labels_inside(always_due, log):
    learn = make_learner()  # its losses span less than a decade: matplotlib would label the log axis 6×10⁻¹
    plot = LossPlot(mode="widget", log=log)
    seen = []
    learn.fit(2, cbs=[plot, AtBatch(20, lambda: seen.append(check_clean(plot.live.fig, plot.live.animated)))])
    assert seen == [[]]  # the live frame mid-fit
    assert check_clean(plot.live.fig, plot.live.animated) == []  # the last frame
    assert check_clean(plot.plot()) == []  # the static picture
    if log:
        low, high = plot.live.fig.axes[0].get_ylim()
        assert math.log10(high / low) < 1.5  # a short log axis, the case that pushed the label out
        assert all("×" not in t.get_text() for t in plot.live.fig.axes[0].get_yticklabels(minor=True))


def test_loss_plot_y_axis_holds_the_smoothed_curve_of_a_second_fit(always_due):
    learn = make_learner(dls=None)
    learn.fit(3)
    plot = LossPlot(mode="widget")
    learn.fit(1, cbs=plot)  # its smoothed curve starts where the first fit's ended, above its batch losses
    low, high = plot.live.fig.axes[0].get_ylim()
    assert low <= min(plot.smooth) and max(plot.smooth) <= high
    assert low <= min(plot.losses) and max(plot.losses) <= high


# --- LRPlot ---------------------------------------------------------------------------------------------------

def test_lr_plot_frames_are_clean_and_the_momentum_axis_fits_its_band(always_due):
    learn = wide_digits_learner(lr=0.1)
    n_epochs = 2
    n_steps = n_epochs * len(learn.dls.train)
    plan = one_cycle_scheds(0.4, n_steps)  # momentum between 0.85 and 0.95
    plot = LRPlot(sched_fn=plan["lr"], mom_fn=plan["mom"], n_steps=n_steps, mode="widget", log=True)
    seen = []
    fit_one_cycle(learn, n_epochs, lr_max=0.4,
                  cbs=[plot, AtBatch(n_steps // 2, lambda: seen.append(check_clean(plot.live.fig, plot.live.animated)))])
    assert seen == [[]]
    for fig in (plot.live.fig, plot.plot()):
        assert check_clean(fig) == []
        low, high = fig.axes[1].get_ylim()
        values = plot.moms[0]
        assert low <= min(values) and max(values) <= high
        assert (high - low) < 1.5 * (max(values) - min(values))  # the band fills the panel: no axis from 0
        assert fig.axes[0].get_ylim()[0] > 0  # the log LR axis


def test_lr_plot_legends_of_several_groups_fit_above_their_panels():
    learn = make_learner(opt_func=lambda params, lr: torch.optim.Adam(
        [{"params": list(params)[:2], "lr": lr}, {"params": list(params)[2:], "lr": lr / 10}]), lr=0.01)
    learn.create_opt()
    step_lr = lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    plot = LRPlot(scheduler=step_lr, mom_fn=lambda pct: 0.9, n_steps=48, opt=learn.opt)
    learn.fit(1, cbs=plot)
    fig = plot.plot()
    assert check_clean(fig) == []
    renderer = extents(fig)
    titles = [ax.title.get_window_extent(renderer).y0 for ax in fig.axes]
    assert titles[0] == titles[1]  # side by side, the titles line up
    for ax in fig.axes:
        assert ax.get_legend().get_window_extent(renderer).width <= ax.bbox.width
        assert len(ax.get_legend().get_texts()) >= 4  # plans and both groups' values


# --- GANPlot --------------------------------------------------------------------------------------------------

def test_gan_plot_frames_keep_the_legend_off_the_points_and_the_labels_inside(always_due):
    x, _ = load_digits()
    set_seed(0)
    generator = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())
    critic = nn.Sequential(nn.Linear(64, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    plot = GANPlot(digit_grid, n_samples=16, mode="widget")
    seen = []
    mid_fit = AtBatch(6, lambda: seen.append(check_clean(plot.live.fig, plot.live.animated[:2])))  # the two series
    learn = gan_learner(generator, critic, DataLoaders.from_tensors(x[:256], torch.zeros(256), bs=64, valid_pct=0.0),
                        noise_size=16, cbs=[plot, mid_fit])
    learn.remove_cbs(learn.progress)
    learn.fit(2)
    assert seen == [[]]  # the live frame mid-fit
    ax_loss, ax_samples = plot.live.fig.axes
    assert plot.live.animated == [*ax_loss.lines, *ax_samples.images]  # the legend is no part of what a frame redraws
    for fig in (plot.live.fig, plot.plot()):  # the last frame, and the static picture
        assert check_clean(fig) == []
        renderer = extents(fig)
        ax_loss = fig.axes[0]
        assert ax_loss.get_legend().get_window_extent(renderer).y0 >= ax_loss.bbox.y1  # above the axes, off the points
        assert [t.get_text() for t in ax_loss.get_legend().get_texts()] == ["critic", "generator"]
        titles = [ax.title.get_window_extent(renderer).y0 for ax in fig.axes]
        assert titles[0] == titles[1]  # side by side, the titles line up
