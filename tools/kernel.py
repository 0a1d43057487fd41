"""A fresh Jupyter kernel, started as a student's JupyterLab starts one, and the loop that runs a cell in it and
reads what the cell sent back, for the tests and benchmarks that talk to a kernel the way JupyterLab does
(tests/test_live_kernel.py, tests/test_stop.py, benchmarks/live_frames.py, benchmarks/fit_cost.py)."""
from __future__ import annotations

import json
import os
import queue
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fresh_kernel(cwd: str | Path, prefix: str = "looplab-kernel-", env: dict[str, str] | None = None):
    """Yield `(manager, client)` of a ready kernel in `cwd`, on local sockets (IPC: no TCP); shut down on exit, always.
    `env`: variables to set in the kernel besides this process's (PYTHONPATH, to import another version of a package)."""
    from jupyter_client.manager import KernelManager
    # as a student's kernel: matplotlib picks its inline backend, and nothing is shortened for nbdev_test
    env = {**{k: v for k, v in os.environ.items() if k not in ("IN_TEST", "MPLBACKEND")}, **(env or {})}
    with tempfile.TemporaryDirectory(prefix=prefix) as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        km.start_kernel(cwd=str(cwd), env=env)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=120)
            yield km, kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)  # a kernel we started is ours to stop


class CellError(RuntimeError):
    "The cell raised in the kernel: the message is the kernel's traceback."


def run_cell(kc, code: str, silence: float = 300) -> list[tuple[str, dict]]:
    "Run `code` in the kernel of client `kc`; once it is idle again, the (type, content) of each message the cell sent."
    msg_id = kc.execute(code)
    messages = []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=silence)  # a cell that sends nothing for that long has hung
        except queue.Empty:
            raise TimeoutError(f"waited {silence:.0f} s for the kernel to send anything while running "
                               f"{code.strip()[:80]!r} (kernel alive: {kc.is_alive()}; this cell's messages so far: "
                               f"{[kind for kind, _ in messages]})") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "error":
            raise CellError("\n".join(content["traceback"]))
        if kind == "status" and content["execution_state"] == "idle":
            return messages
        messages.append((kind, content))


def results(messages: list[tuple[str, dict]]) -> list:
    "What the cell printed as `RESULT <json>` lines, decoded, in order."
    lines = [line for kind, content in messages if kind == "stream" for line in content["text"].splitlines()]
    return [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]


def png_displays(messages: list[tuple[str, dict]]) -> int:
    "How many display messages (new or updated) carried a PNG picture."
    return sum(1 for kind, content in messages
               if kind in ("display_data", "update_display_data") and "image/png" in content["data"])
