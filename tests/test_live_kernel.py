"""Live means live, in a real Jupyter kernel: a fit sends pictures while it trains, not only the final one.

The kernel is started as tools/run_tour.py starts one (jupyter_client, IPC transport), with no IN_TEST and no
MPLBACKEND, as a student's is. A fit of about a second, then one of about three, train the digits MLP with
`LossPlot(mode="widget")`; each asks for the epochs an untimed epoch says fill its time three times over, and a
callback cancels it after its time, so that its length does not depend on this machine's speed. The test counts the kernel's display messages carrying image/png while the cell runs, the final
picture (drawn at the end of training) aside. The first fit is the plot's first in this process: cold.
Every kernel this test starts is shut down by the test, however it ends."""
import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SETUP = """
import math, time
from torch import nn
from looplab.callback import Callback, CancelFitException
from looplab.data import DataLoaders, load_digits
from looplab.learner import Learner, set_seed
from looplab.loss_plot import LossPlot

class StopAfter(Callback):
    "Cancels the fit `seconds` after it began."
    order = 50
    def __init__(self, seconds):
        self.seconds = seconds
    def on_train_begin(self):
        self.began = time.perf_counter()
    def on_batch_end(self):
        if time.perf_counter() - self.began >= self.seconds:
            raise CancelFitException()

set_seed(0)
dls = DataLoaders.from_tensors(*load_digits(), bs=64)
learn = Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, lr=0.2, progress=False)
learn.fit(1)  # torch's first-time costs, not the plot's
epoch_start = time.perf_counter()
learn.fit(1)
epoch_seconds = time.perf_counter() - epoch_start  # the fits ask for enough epochs, and StopAfter ends them
"""


def pictures(kc, code: str) -> list[str]:
    "Run `code`; the kinds of the messages it sent that carry a PNG, in order, and 'html' for the others."
    msg_id = kc.execute(code)
    shown = []
    while True:
        msg = kc.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "error":
            pytest.fail("\n".join(content["traceback"]))
        if kind in ("display_data", "update_display_data"):
            shown.append("png" if "image/png" in content["data"] else "html")
        if kind == "status" and content["execution_state"] == "idle":
            return shown


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import KernelManager
    env = {k: v for k, v in os.environ.items() if k not in ("IN_TEST", "MPLBACKEND")}
    with tempfile.TemporaryDirectory(prefix="looplab-kernel-") as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        km.start_kernel(cwd=str(ROOT), env=env)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=120)
            assert "png" not in pictures(kc, SETUP)
            yield kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)  # a kernel we started is ours to stop


@pytest.mark.parametrize("seconds, at_least", [(1, 2), (3, 6)])  # in this order: the first fit is cold
def test_a_fit_sends_pictures_while_it_trains(kernel, seconds, at_least):
    shown = pictures(kernel, f"learn.fit(max(2, math.ceil(3 * {seconds} / epoch_seconds)), "
                                 f"cbs=[LossPlot(mode='widget'), StopAfter({seconds})])")
    assert shown[-1] == "png"  # the output ends with the picture, not a placeholder
    during = shown[:-1].count("png")
    assert during >= at_least, f"{during} pictures during a {seconds} s fit: {shown}"
