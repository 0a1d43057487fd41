"""Live means live, in a real Jupyter kernel: a fit sends pictures while it trains, not only the final one.

The kernel is started as tools/run_tour.py starts one (jupyter_client, IPC transport), with no IN_TEST and no
MPLBACKEND, as a student's is. A fit of about a second, then one of about three, train the digits MLP with
`LossPlot(mode="widget")`; then a fit of about five trains notebook 10b's GAN on the digits with
`GANPlot(digit_grid, mode="widget")`, which shows the progress bar too. A GAN's picture has a second panel, of
samples, redrawn at every frame, and its first draw costs about twice LossPlot's: at the same share of the fit
(a tenth, first draw and setup included), six pictures take about five seconds. Each asks for more epochs than it needs, and
a callback cancels it once its time has passed on the wall clock *and* on the kernel's main thread (the CPU time it
was given): on a quiet machine the two agree, and on a loaded one the fit lasts as long as the machine needs to give
it that much of its attention, so that the count does not depend on other work on the machine. The test counts the
kernel's display messages carrying image/png while the cell runs, the final picture (drawn at the end of training)
aside. The first fit is the plot's first in this process: cold. Nothing here asserts a time; a kernel that sends
nothing for minutes fails the test, saying what it was running. Every kernel this test starts is shut down by the
test, however it ends."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel import CellError, fresh_kernel, run_cell  # noqa: E402

SETUP = """
import math, time
from torch import nn
from looplab.callback import Callback, CancelFitException
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.loss_plot import LossPlot

class StopAfterSeconds(Callback):
    "Cancels the fit once `seconds` have passed since it began, on the wall clock and in this thread's CPU time."
    order = 50
    def __init__(self, seconds):
        self.seconds = seconds
    def on_train_begin(self):
        self.began = (time.perf_counter(), time.thread_time())
    def on_batch_end(self):
        wall, cpu = time.perf_counter() - self.began[0], time.thread_time() - self.began[1]
        if wall >= self.seconds and cpu >= self.seconds:
            raise CancelFitException()

set_seed(0)
dls = DataLoaders.from_tensors(*load_digits(), bs=64)
learn = Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)
learn.fit(1)  # torch's first-time costs, not the plot's
epoch_start = time.perf_counter()
learn.fit(1)
epoch_seconds = time.perf_counter() - epoch_start  # the fits ask for enough epochs, and StopAfterSeconds ends them
"""


def pictures(kc, code: str, silence: float = 300, bar: list | None = None) -> list[str]:
    "Run `code`; the kinds ('png', or 'html' for a placeholder) of the messages it sent to the displays that showed a picture, in order."
    try:
        messages = run_cell(kc, code, silence)  # each cell here runs for seconds: a silence of minutes is a hang
    except (CellError, TimeoutError) as e:
        pytest.fail(str(e))
    displays = [(content["data"], content.get("transient", {}).get("display_id"))
                for kind, content in messages if kind in ("display_data", "update_display_data")]
    pictured = {display for data, display in displays if "image/png" in data}
    if bar is not None:  # the progress bar's texts, in order
        bar.extend(data["text/html"] for data, _ in displays if "looplab-progress" in data.get("text/html", ""))
    return ["png" if "image/png" in data else "html" for data, display in displays if display in pictured]


@pytest.fixture(scope="module")
def kernel():
    pytest.importorskip("jupyter_client")
    with fresh_kernel(ROOT) as (km, kc):
        assert "png" not in pictures(kc, SETUP)
        yield kc


@pytest.mark.parametrize("seconds, at_least", [(1, 2), (3, 6)])  # in this order: the first fit is cold
def test_a_fit_sends_pictures_while_it_trains(kernel, seconds, at_least):
    shown = pictures(kernel, f"learn.fit(max(2, math.ceil(10 * {seconds} / epoch_seconds)), "
                                 f"cbs=[LossPlot(mode='widget'), StopAfterSeconds({seconds})])")
    assert shown[-1] == "png"  # the output ends with the picture, not a placeholder
    during = shown[:-1].count("png")
    assert during >= at_least, f"{during} pictures during a {seconds} s fit: {shown}"


GAN_SETUP = """
import torch
from looplab.gan import gan_learner
from looplab.gan_images import GANPlot, digit_grid
set_seed(0)
x, _ = load_digits()
generator = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 64), nn.Sigmoid())  # notebook 10b's
critic = nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
gan = gan_learner(generator, critic, DataLoaders.from_tensors(x, torch.zeros(len(x)), bs=64, valid_pct=0.0),
                  noise_size=16, progress=False)
gan.fit(1)
gan_epoch_start = time.perf_counter()
gan.fit(1)
gan_epoch_seconds = time.perf_counter() - gan_epoch_start
"""


def test_a_gan_fit_sends_pictures_while_it_trains(kernel):
    assert "png" not in pictures(kernel, GAN_SETUP)
    bar = []
    shown = pictures(kernel, "gan.fit(max(2, math.ceil(10 * 5 / gan_epoch_seconds)), "
                             "cbs=[GANPlot(digit_grid, n_samples=64, mode='widget'), StopAfterSeconds(5)])", bar=bar)
    assert shown[-1] == "png"  # the output ends with the picture, not a placeholder
    during = shown[:-1].count("png")
    assert during >= 6, f"{during} pictures during a 5 s GAN fit: {shown}"
    assert any("epoch " in text and "batch " in text and "gen " in text for text in bar[:-1]), bar  # ticked while it trained
    assert "training batches in" in bar[-1]  # and ends with the summary
