"""A fresh Jupyter kernel, started as a student's JupyterLab starts one, for the tests and benchmarks that talk to
a kernel the way JupyterLab does (tests/test_live_kernel.py, tests/test_stop.py, benchmarks/live_frames.py)."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fresh_kernel(cwd: str | Path, prefix: str = "looplab-kernel-"):
    "Yield `(manager, client)` of a ready kernel in `cwd`, on local sockets (IPC: no TCP); shut down on exit, always."
    from jupyter_client.manager import KernelManager
    # as a student's kernel: matplotlib picks its inline backend, and nothing is shortened for nbdev_test
    env = {k: v for k, v in os.environ.items() if k not in ("IN_TEST", "MPLBACKEND")}
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
