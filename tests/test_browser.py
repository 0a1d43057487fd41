"""The live plots in a real browser: JupyterLab runs notebook 06 (its demo trains with the live loss and LR plots) in
headless Chromium, and the plots must render and move while the model trains.

Jupyter runs on 127.0.0.1 with a token, with config, data, runtime and settings directories of its own, on a copy of
the notebook (so that autosave never writes into nbs/). Chromium is the system's (`/usr/bin/chromium`), driven by
the `playwright` package with a fresh profile. Screenshots and the plots' pictures go to test-output/browser/.
Every process this test starts is ended by its PID (helpers.started: the server's process group, and the kernels it
started), however the test ends: a failure, Ctrl-C, or SIGTERM (conftest.py; checked by test_interrupts.py).
"""
import base64
import contextlib
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import chromium_context, require_chromium, started

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-output" / "browser"
NOTEBOOK = "06a_lr_plot.ipynb"  # its last section trains with the live loss and LR plots
MARKER = "# the live demo"  # the first line of the cell that trains with both live plots
DEMO_EPOCHS = "500"  # long enough (over ten seconds) to see the plots at two moments during training
SETTINGS = {  # JupyterLab user settings: every cell stays in the page, no news, no update checks
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}',
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        '{"checkForUpdates": false, "fetchNews": "false", "doNotDisturbMode": true}',
}

NOTEBOOK_JS = "window.jupyterapp.shell.currentWidget"
STATE_JS = f"""() => {{
  const panel = {NOTEBOOK_JS};
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const busy = cells.some(c => (c.node.querySelector('.jp-InputPrompt')?.textContent || '').includes('*'));
  const errors = cells.flatMap(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error')
                                     .map(o => o.ename + ': ' + o.evalue));
  const missing = cells.filter(c => c.model.executionCount === null).length;
  const kernel = panel.sessionContext.session?.kernel?.status || 'none';
  return {{busy, errors, missing, kernel, n_cells: cells.length}};
}}"""
DEMO_JS = f"""() => {{
  const cell = {NOTEBOOK_JS}.content.widgets.find(c => c.model.sharedModel.getSource().includes({MARKER!r}));
  if (!cell) return null;
  return {{  // a queued cell shows [*] too, but only a running one has outputs
    running: (cell.node.querySelector('.jp-InputPrompt')?.textContent || '').includes('*'),
    images: Array.from(cell.node.querySelectorAll('.jp-OutputArea-output img')).map(img => img.src),
    progress_bars: cell.node.querySelectorAll('progress.looplab-progress').length,  // the live plots' HTML bar
  }};
}}"""




def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(tmp_path: Path, notebook: Path):
    "A JupyterLab server on a copy of `notebook` in tmp_path; yields (url of the notebook, the server's log path)."
    require_chromium()
    root = tmp_path / "nbs"
    root.mkdir(parents=True)
    shutil.copy(notebook, root / notebook.name)
    settings = tmp_path / "lab-settings"
    for name, text in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(text)
    port = free_port()
    token = secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), IPYTHONDIR=str(tmp_path / "ipython"),
               LOOPLAB_DEMO_EPOCHS=DEMO_EPOCHS, PYTHONUNBUFFERED="1")
    for name in ("IN_TEST", "MPLBACKEND"):  # the kernel must behave as a learner's: a frontend, inline figures
        env.pop(name, None)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--expose-app-in-browser", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log_path = tmp_path / "jupyter.log"
    with open(log_path, "wb") as log, started(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root) as proc:
        deadline = time.monotonic() + 180  # a loaded machine starts a server slowly
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited 180 s for jupyter lab to answer /api/status:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/lab/tree/{notebook.name}?token={token}", log_path


@pytest.fixture
def jupyter(tmp_path):
    "A JupyterLab server on a copy of notebook 06a; yields (url of the notebook, the server's log path)."
    with serve(tmp_path, ROOT / "nbs" / NOTEBOOK) as served:
        yield served


def pixels(src: str) -> np.ndarray:
    "The pixels of an <img> whose src is a data: URL of a PNG."
    assert src.startswith("data:image/png;base64,"), src[:60]
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB"))


def save_png(src: str, name: str) -> None:
    Image.fromarray(pixels(src)).save(OUT / name)


def wait_for(page, what, predicate, timeout: float, log_path: Path, waiting_for: str = "the page"):
    "Poll DEMO_JS or STATE_JS until `predicate` holds; fail, saying what it waited for, with the state and the server log after `timeout` s."
    deadline = time.monotonic() + timeout
    while True:
        state = page.evaluate(what)
        if predicate(state):
            return state
        if time.monotonic() > deadline:
            page.screenshot(path=str(OUT / "timeout.png"))
            shown = {key: [src[:40] + "..." for src in value] if key == "images" else value
                     for key, value in (state or {}).items()}
            pytest.fail(f"waited {timeout} s for {waiting_for}; last state {shown}\n{log_path.read_text()[-2000:]}")
        time.sleep(0.1)


def test_live_plots_render_and_move_in_jupyterlab(jupyter):
    url, log_path = jupyter
    OUT.mkdir(parents=True, exist_ok=True)
    with chromium_context(log_path.parent / "chromium-profile", viewport={"width": 1280, "height": 1000}) as context:
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(url, timeout=180_000)  # generous: a loaded machine serves JupyterLab slowly
        page.wait_for_function(f"() => {NOTEBOOK_JS}?.sessionContext?.session?.kernel?.status === 'idle'",
                               timeout=300_000)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited

        first = wait_for(page, DEMO_JS, lambda s: s and s["running"] and len(s["images"]) >= 2, 300, log_path,
                         "the demo cell to run with both live pictures shown")
        page.locator(".jp-CodeCell", has_text=MARKER).screenshot(path=str(OUT / "moment1.png"))
        assert first["progress_bars"] == 1, "the progress bar widget did not render"
        loss1, lr1 = first["images"][:2]
        # the second moment: both pictures redrawn, and the loss picture seen in at least three states while the
        # demo trains (frames keep coming while the budget allows: the first two on time, then a few a second)
        seen = {loss1}

        def moved(state):
            if state["running"] and state["images"]:
                seen.add(state["images"][0])
            return not state["running"] or (len(seen) >= 3 and state["images"][0] != loss1
                                            and state["images"][1] != lr1)

        second = wait_for(page, DEMO_JS, moved, 120, log_path, "both pictures redrawn, the loss one twice")
        page.locator(".jp-CodeCell", has_text=MARKER).screenshot(path=str(OUT / "moment2.png"))
        assert second["running"], (f"training ended before both plots were redrawn: raise DEMO_EPOCHS "
                                   f"({DEMO_EPOCHS}) so that two moments fall during training")
        assert len(seen) >= 3, f"the loss picture changed {len(seen) - 1} times while the demo trained"
        loss2, lr2 = second["images"][:2]
        save_png(loss1, "loss_moment1.png")
        save_png(loss2, "loss_moment2.png")
        save_png(lr1, "lr_moment1.png")
        save_png(lr2, "lr_moment2.png")
        assert pixels(loss1).shape == pixels(loss2).shape and pixels(lr1).shape == pixels(lr2).shape
        assert (pixels(loss1) != pixels(loss2)).any(), "the loss plot did not change during training"
        assert (pixels(lr1) != pixels(lr2)).any(), "the LR plot did not change during training"

        done = wait_for(page, STATE_JS, lambda s: not s["busy"] and s["kernel"] == "idle"
                        and (s["missing"] == 0 or s["errors"]), 300, log_path,
                        "every cell to finish")
        assert not done["errors"], f"cells raised: {done['errors']}"
        n_code = sum(c["cell_type"] == "code" for c in json.loads((ROOT / "nbs" / NOTEBOOK).read_text())["cells"])
        assert done["missing"] == 0 and done["n_cells"] == n_code, (done, n_code)  # every code cell ran
        final = page.evaluate(DEMO_JS)
        save_png(final["images"][0], "loss_final.png")
        save_png(final["images"][1], "lr_final.png")
        assert (pixels(final["images"][0]) != pixels(loss2)).any()
        page.locator(".jp-CodeCell", has_text=MARKER).screenshot(path=str(OUT / "final.png"))
        page.screenshot(path=str(OUT / "page.png"))


# --- Stop, and a notebook reopened: a second notebook, written by the test --------------------------------------

REOPEN_CELLS = [
    "from looplab.resume import make_epochwise_batch_sampler\nfrom looplab.sampler_plot import SamplerPlot\n"
    "per_rank = lambda rank: make_epochwise_batch_sampler(range(24), shuffle_seed=0, num_replicas=2, rank=rank, "
    "batch_size=4)\nSamplerPlot(per_rank, n_ranks=2, n_epochs=3, skip=5)",
    "from torch import nn\nfrom looplab.data import DataLoaders, load_digits\n"
    "from looplab.data import set_seed\nfrom looplab.learner import Learner\nfrom looplab.loss_plot import LossPlot\nset_seed(0)\n"
    "dls = DataLoaders.from_tensors(*load_digits(), bs=64)\n"
    "learn = Learner(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), dls, progress=False)",
    "learn.fit(100_000, cbs=LossPlot())  # Stop, once",
    "learn.fit(100_000, cbs=LossPlot())  # Stop, twice",
    "learn.fit(100_000, cbs=LossPlot())  # saved while training, then Stop",
]
CELL_JS = f"""(i) => {{
  const cell = {NOTEBOOK_JS}.content.widgets.filter(c => c.model.type === 'code')[i];
  return {{
    running: (cell.node.querySelector('.jp-InputPrompt')?.textContent || '').includes('*'),
    count: cell.model.executionCount,
    outputs: cell.model.outputs.toJSON(),
    bar: cell.node.querySelector('progress.looplab-progress')?.parentNode?.textContent || '',
    text: cell.node.querySelector('.jp-OutputArea')?.textContent || '',
    images: cell.node.querySelectorAll('.jp-OutputArea-output img').length,
    folds: cell.node.querySelectorAll('.jp-OutputArea-output details').length,
  }};
}}"""
RUN_JS = f"""(i) => {{
  const panel = {NOTEBOOK_JS};
  const code = panel.content.widgets.filter(c => c.model.type === 'code')[i];
  const index = panel.content.widgets.indexOf(code);
  panel.content.activeCellIndex = index;
  window.jupyterapp.commands.execute('notebook:run-cell');
}}"""
PRESS_JS = """(ms) => {
  const press = () => window.jupyterapp.commands.execute('notebook:interrupt-kernel');
  press();
  if (ms !== null) setTimeout(press, ms);
}"""


def reopen_notebook(path: Path) -> None:
    "A notebook of REOPEN_CELLS, with no outputs, at `path`."
    cells = [{"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {}, "outputs": [],
              "source": source} for i, source in enumerate(REOPEN_CELLS)]
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3",
                                "language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}))


def cell_state(page, i: int) -> dict:
    return page.evaluate(CELL_JS, i)


def wait_cell(page, i: int, predicate, timeout: float, log_path: Path, what: str) -> dict:
    "Poll cell `i` until `predicate` holds; fail after `timeout` s, saying what it waited for."
    deadline = time.monotonic() + timeout
    while True:
        state = cell_state(page, i)
        if predicate(state):
            return state
        if time.monotonic() > deadline:
            page.screenshot(path=str(OUT / "reopen-timeout.png"))
            pytest.fail(f"waited {timeout} s for {what}; cell {i}: {str(state)[:1500]}\n{log_path.read_text()[-2000:]}")
        time.sleep(0.05)


def one_line(state: dict) -> str:
    "The stopped fit's output as the student sees it: exactly one error, of one line, and no other text."
    errors = [o for o in state["outputs"] if o["output_type"] == "error"]
    streams = [o for o in state["outputs"] if o["output_type"] == "stream"]
    assert len(errors) == 1 and not streams, state["outputs"]
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in "\n".join(errors[0]["traceback"]).splitlines()]
    assert len(shown) == 1 and shown[0].startswith("fit stopped by KeyboardInterrupt "), shown
    assert shown[0].endswith(" (%tb shows the traceback)"), shown
    return shown[0]


def wait_saved(path: Path, before: int, timeout: float) -> dict:
    """The notebook JupyterLab wrote to `path` after `before` (an mtime in ns), read whole. Its `dirty` flag is no
    witness: a live plot's next frame marks the open notebook changed again, maybe before the flag is read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.stat().st_mtime_ns != before:
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:  # caught mid-write: read it again
                pass
        time.sleep(0.2)
    raise AssertionError(f"JupyterLab did not save {path.name} within {timeout:.0f} s")


def training(state: dict) -> bool:
    "The fit's bar says it is training, past its first batches."
    return state["running"] and "while training" in state["bar"] and "batch" in state["bar"]


def test_stop_says_one_line_and_a_saved_notebook_reopens_as_it_was(tmp_path):
    notebook = tmp_path / "reopen.ipynb"
    reopen_notebook(notebook)
    OUT.mkdir(parents=True, exist_ok=True)
    with serve(tmp_path / "lab", notebook) as (url, log_path), \
            chromium_context(tmp_path / "chromium-profile", viewport={"width": 1280, "height": 1000}) as context:
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(url, timeout=180_000)
        page.wait_for_function(f"() => {NOTEBOOK_JS}?.sessionContext?.session?.kernel?.status === 'idle'",
                               timeout=300_000)
        for i in (0, 1):
            page.evaluate(RUN_JS, i)
            wait_cell(page, i, lambda s: not s["running"] and s["count"] is not None, 300, log_path, f"cell {i} to run")
        assert cell_state(page, 0)["folds"] == 3
        lines = {}
        for i, press in ((2, None), (3, 100)):  # Stop once; Stop twice, 0.1 s apart
            page.evaluate(RUN_JS, i)
            wait_cell(page, i, training, 300, log_path, f"cell {i}'s fit to train")
            page.evaluate(PRESS_JS, press)
            state = wait_cell(page, i, lambda s: not s["running"] and any(o["output_type"] == "error"
                                                                        for o in s["outputs"]), 120, log_path,
                              f"cell {i}'s fit to stop")
            time.sleep(0.3)  # a late second press lands now, if at all
            lines[i] = one_line(cell_state(page, i))
            name = "stop_once.png" if press is None else "stop_twice.png"
            page.locator(".jp-CodeCell").nth(i).screenshot(path=str(OUT / name))
        (OUT / "stop_lines.txt").write_text(f"one press:   {lines[2]}\ntwo presses: {lines[3]}\n")
        page.evaluate(RUN_JS, 4)
        wait_cell(page, 4, lambda s: training(s) and s["images"], 300, log_path, "cell 4's fit to draw while it trains")
        on_disk = tmp_path / "lab" / "nbs" / notebook.name
        before = on_disk.stat().st_mtime_ns
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        saved = wait_saved(on_disk, before, 120)
        page.evaluate(PRESS_JS, None)
        wait_cell(page, 4, lambda s: not s["running"], 120, log_path, "cell 4's fit to stop")
        page.evaluate(f"() => {NOTEBOOK_JS}.sessionContext.shutdown()")  # the kernel is gone
        page.close(run_before_unload=False)  # the stopped fit's outputs came after the save: they are not kept

        page = context.new_page()  # the notebook opened again, from the file
        page.goto(url, timeout=180_000)
        page.wait_for_function(f"() => {NOTEBOOK_JS}?.content?.widgets?.length === {len(REOPEN_CELLS)}",
                               timeout=180_000)
        time.sleep(2)  # renderers that wait for a widget manager give up by now
        sampler = cell_state(page, 0)
        assert sampler["images"] == 4 and sampler["folds"] == 3, sampler  # all epochs, and one fold an epoch
        assert "model not found" not in sampler["text"] and "Error displaying" not in sampler["text"]
        page.locator(".jp-CodeCell").nth(0).locator("summary").nth(1).click()  # epoch 1 alone, opened
        page.locator(".jp-CodeCell").nth(0).screenshot(path=str(OUT / "reopened_11d.png"))
        assert one_line(cell_state(page, 2)) == lines[2] and one_line(cell_state(page, 3)) == lines[3]
        mid_fit = cell_state(page, 4)
        assert re.search(r"as of \d\d:\d\d:\d\d, while training", mid_fit["bar"]), mid_fit["bar"]
        assert mid_fit["images"] >= 1  # the picture as it was when saved
        assert [o["output_type"] for o in saved["cells"][4]["outputs"]] == \
            [o["output_type"] for o in mid_fit["outputs"]]  # what the file holds, shown
        page.locator(".jp-CodeCell").nth(4).screenshot(path=str(OUT / "reopened_mid_fit.png"))
        page.screenshot(path=str(OUT / "reopened_page.png"))
