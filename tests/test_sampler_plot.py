"""SamplerPlot (notebook 11d, looplab.sampler_plot): which dataset index each rank is served at each step, over epochs."""
import base64
import os
import re
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
from torch.utils.data import DistributedSampler as TorchDistributedSampler  # torch's (dataset, num_replicas, rank)

import looplab.sampler_plot as sampler_plot
from looplab.resume import make_epochwise_batch_sampler
from looplab.sampler_plot import SamplerPlot, served
from looplab.widgets import png_bytes

from helpers import PNG, run


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 7), st.booleans(), st.integers(1, 3))
def test_sampler_plot_serves_what_the_batch_sampler_yields(n, bs, drop_last, n_epochs):
    sampler = BatchSampler(SequentialSampler(range(n)), bs, drop_last)
    if len(sampler) == 0:
        with pytest.raises(ValueError, match="length 0"):
            SamplerPlot(sampler)
        return
    plot = SamplerPlot(sampler, n_epochs=n_epochs)
    assert plot.steps == [[list(sampler)] * n_epochs]
    assert plot._offsets == [len(sampler) * e for e in range(n_epochs + 1)]


def test_sampler_plot_calls_set_epoch_for_every_epoch_and_rank():
    calls = []

    class Recording(SequentialSampler):
        def __init__(self, rank):
            super().__init__(range(4))
            self.rank = rank

        def set_epoch(self, epoch):
            calls.append((self.rank, epoch))

    SamplerPlot(lambda rank: Recording(rank), n_ranks=2, n_epochs=3)
    assert calls == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_distributed_ranks_split_each_epoch_without_overlap():
    make = lambda rank: TorchDistributedSampler(range(30), num_replicas=3, rank=rank, shuffle=True, seed=1)
    plot = SamplerPlot([make(r) for r in range(3)], n_epochs=2, kind="grid")
    for epoch in range(2):
        seen = [i for rank in plot.steps for step in rank[epoch] for i in step]
        assert sorted(seen) == list(range(30))
    fig = plot.plot()
    assert len(fig.axes) == 4  # three ranks and the colour bar


class LenRaises:
    def __len__(self):
        raise TypeError("no length")

    def __iter__(self):
        return iter(range(100))


class NoLen:
    def __iter__(self):
        i = 0
        while True:
            yield i
            i += 1


class Flagged:
    "Has a length (of one pass) but repeats forever, and says so."
    infinite = True

    def __len__(self):
        return 3

    def __iter__(self):
        while True:
            yield from range(3)


@pytest.mark.parametrize("sampler", [LenRaises(), NoLen(), Flagged()])
def test_infinite_samplers_need_n_steps(sampler):
    with pytest.raises(ValueError, match="infinite.*n_steps"):
        SamplerPlot(sampler)
    plot = SamplerPlot(sampler, n_steps=5)
    assert len(plot.steps[0][0]) == 5


def test_sampler_plot_skip_fades_and_marks_the_resume_point(tmp_path):
    sampler = BatchSampler(RandomSampler(range(10), generator=torch.Generator().manual_seed(0)), 4, drop_last=False)
    plot = SamplerPlot(sampler, n_epochs=2, skip=4)
    assert plot._offsets == [0, 3, 6]
    assert [plot._skipped_items(0, e) for e in (0, 1)] == [10, 4]
    fig = plot.plot()
    assert any(line.get_color() == "red" for line in fig.axes[0].lines)
    assert plot.save(tmp_path / "order.png").read_bytes()[:8] == PNG
    assert SamplerPlot(sampler, n_epochs=2, skip=4, kind="grid").save(tmp_path / "grid.png", epoch=1).exists()


@pytest.mark.parametrize("args, kwargs, error, words", [
    ((SequentialSampler(range(0)),), {}, ValueError, ["rank 0", "length 0"]),
    (([],), {}, ValueError, ["empty"]),
    ((lambda rank: SequentialSampler(range(3)),), {}, ValueError, ["n_ranks"]),
    ((SequentialSampler(range(3)),), {"n_ranks": 2}, ValueError, ["n_ranks=2"]),
    ((SequentialSampler(range(3)),), {"n_epochs": 0}, ValueError, ["n_epochs"]),
    ((SequentialSampler(range(3)),), {"skip": -1}, ValueError, ["skip"]),
    ((SequentialSampler(range(3)),), {"kind": "heatmap"}, ValueError, ["kind", "'heatmap'"]),
    ((SequentialSampler(range(3)),), {"n_steps": 0}, ValueError, ["n_steps"]),
    ((42,), {}, TypeError, ["iterable", "int"]),
    (([["x"]],), {}, TypeError, ["'x'"]),
])
def test_sampler_plot_bad_input(args, kwargs, error, words):
    with pytest.raises(error) as info:
        SamplerPlot(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_served_accepts_tensors_and_numpy_indices():
    assert served([torch.tensor([1, 2]), np.int64(3)]) == [[1, 2], [3]]


def test_sampler_plot_show_outside_ipython_says_what_to_do(capsys):
    SamplerPlot(SequentialSampler(range(3))).show()
    assert "save(path)" in capsys.readouterr().err


def test_in_a_frontend_several_epochs_give_pictures_that_need_no_kernel(monkeypatch):
    monkeypatch.setattr(sampler_plot, "in_notebook", lambda: True)
    bundle = SamplerPlot(SequentialSampler(range(6)), n_epochs=2)._repr_mimebundle_()
    assert list(bundle) == ["text/html"]  # IPython adds text and PNG; no widget (its model dies with the kernel)
    assert bundle["text/html"].count("<details>") == 2 and bundle["text/html"].count("<img ") == 3
    assert SamplerPlot(SequentialSampler(range(6)))._repr_mimebundle_() is None  # one epoch: nothing to select


SHELL = """
from execnb.shell import CaptureShell
shell = CaptureShell()
setup = "from torch.utils.data import SequentialSampler; from looplab.sampler_plot import SamplerPlot"
assert not shell.run(setup)
for source in ["SamplerPlot(SequentialSampler(range(6)), n_epochs=2)",
               "SamplerPlot(SequentialSampler(range(6)), n_epochs=2).show()"]:
    outputs = shell.run(source)
    assert [sorted(out["data"]) for out in outputs] == [["image/png", "text/plain"]], outputs
print("done")
"""


def test_a_cell_ending_with_the_plot_gives_a_png_under_nbdev_test_and_prints_nothing():
    "execnb (nbdev_test's shell) asks for a cell's result after it stops capturing: nothing may be displayed then."
    done = run([sys.executable, "-c", SHELL], timeout=120, env=dict(os.environ, IN_TEST="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"  # not `<IPython.core.display.Image object>`


def _epochwise(n_ranks):
    "The factory of notebook 11d's example: the epoch-by-epoch sampler of notebook 11b over 24 items, in batches of 4."
    return lambda rank: make_epochwise_batch_sampler(range(24), shuffle_seed=0, num_replicas=n_ranks, rank=rank,
                                                     batch_size=4)


@pytest.mark.parametrize("kind, n_ranks, dpi, figsize", [
    ("scatter", 1, 80, None), ("scatter", 2, 100, None), ("grid", 1, 80, None), ("grid", 2, 80, None),
    ("grid", 3, 80, None), ("grid", 3, 120, None), ("grid", 2, 100, (5.0, 2.0)),
])
def test_the_png_is_figsize_times_dpi_and_keeps_its_size_across_epochs(kind, n_ranks, dpi, figsize):
    "Shown 1:1: no wider than a notebook's output, and one size for all epochs and each (the output does not jump)."
    plot = SamplerPlot(_epochwise(n_ranks), n_ranks=n_ranks, n_epochs=3, skip=5, kind=kind, dpi=dpi, figsize=figsize)
    width, height = plot.plot().get_size_inches() * dpi
    if figsize is None:
        assert width <= sampler_plot._MAX_WIDTH
    else:
        assert (width, height) == (figsize[0] * dpi, figsize[1] * dpi)
    sizes = {sampler_plot._png_size(png_bytes(plot.plot(epoch))) for epoch in [None, 0, 1, 2]}
    assert len(sizes) == 1  # one size, whichever epoch is shown
    (png_width, png_height), = sizes  # matplotlib before 3.8 truncates a fractional pixel: 227.99... gives 227
    assert abs(png_width - width) < 1 and abs(png_height - height) < 1, (sizes, width, height)


def test_the_folds_show_each_picture_at_its_natural_size():
    plot = SamplerPlot(_epochwise(2), n_ranks=2, n_epochs=3, kind="grid")
    folds = sampler_plot._epoch_folds(plot)
    shown = re.findall(r'<img src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)"', folds)
    assert [base64.b64decode(data) for data, _, _ in shown] == [png_bytes(plot.plot(epoch)) for epoch in [None, 0, 1, 2]]
    png_width, png_height = sampler_plot._png_size(png_bytes(plot.plot()))
    assert {(int(w), int(h)) for _, w, h in shown} == {(png_width, png_height)}  # the img's own size, every epoch


@pytest.mark.parametrize("kind", ["scatter", "grid"])
@pytest.mark.parametrize("n_items, batch_size", [(3, 1), (10, 4), (7, 2), (40, 3)])
def test_single_epoch_plots_have_integer_ticks(kind, n_items, batch_size):
    "Steps, positions and dataset indices are whole numbers: no tick at 0.5 or 3.25."
    sampler = BatchSampler(SequentialSampler(range(n_items)), batch_size, drop_last=False)
    plot = SamplerPlot(sampler, n_epochs=3, kind=kind)
    for epoch in range(3):
        fig = plot.plot(epoch)
        fig.canvas.draw()
        axes = fig.axes if kind == "scatter" else fig.axes[:-1]  # the grid's last axes is the colour bar
        for ax in axes:
            low, high = sorted(ax.get_xlim())
            shown = [t for t in ax.get_xticks() if low <= t <= high]
            assert shown and all(float(t).is_integer() for t in shown), shown
        index_axis = fig.axes[0].yaxis if kind == "scatter" else fig.axes[-1].yaxis
        low, high = sorted(index_axis.get_view_interval())
        shown = [t for t in index_axis.get_ticklocs() if low <= t <= high]
        assert shown and all(float(t).is_integer() for t in shown), shown
