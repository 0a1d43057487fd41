"""A test run that is interrupted — SIGTERM (a CI timeout, `kill`) or Ctrl-C — leaves no process behind: not the
JupyterLab server of the browser test, not its kernel, not a child that left its process group.

Each case runs one test of interrupt_target.py in a pytest of its own, waits until the processes it starts are up,
interrupts that pytest, and checks that every process it had below it has ended (by PID and command line)."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import alive, family, require_chromium, started

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXIT_INTERRUPTED = 2  # pytest's exit status for a run ended by KeyboardInterrupt


def interrupt_and_check(tmp_path: Path, test: str, signum: int) -> dict[int, str]:
    "Run `test` of interrupt_target.py, send `signum` when it is waiting, check that nothing survives; its processes."
    marker = tmp_path / "up.json"
    command = [sys.executable, "-m", "pytest", f"{TESTS / 'interrupt_target.py'}::{test}", "-q", "-p",
               "no:cacheprovider"]
    env = dict(os.environ, LOOPLAB_MARKER=str(marker))
    with started(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, f"the inner pytest ended early:\n{proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "the inner test did not start its processes in 120 s"
            time.sleep(0.1)
        processes = {int(pid): command for pid, command in json.loads(marker.read_text()).items()}
        processes.update(family(proc.pid))
        try:
            if signum == signal.SIGINT:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the whole foreground group
            else:
                os.kill(proc.pid, signum)  # a CI timeout or `kill` signals pytest alone
            output, _ = proc.communicate(timeout=90)
            assert proc.returncode == EXIT_INTERRUPTED, output[-3000:]
            assert ("Terminated: SIGTERM" if signum == signal.SIGTERM else "KeyboardInterrupt") in output, output[-3000:]
            deadline = time.monotonic() + 10  # a process killed by a signal takes a moment to go
            while alive(processes) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not alive(processes), f"left running after {signal.Signals(signum).name}: {alive(processes)}"
        finally:  # a failure leaves nothing behind either
            for pid in alive(processes):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    return processes


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_ends_a_server_and_its_child_out_of_group(tmp_path, signum):
    processes = interrupt_and_check(tmp_path, "test_a_server_with_a_child_out_of_its_group", signum)
    assert sum("time.sleep(600)" in command for command in processes.values()) == 2  # the server and its child


@pytest.mark.browser
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_ends_jupyter_and_its_kernel(tmp_path, signum):
    require_chromium()  # the fixture of the browser test asks for it
    processes = interrupt_and_check(tmp_path, "test_jupyter_with_a_kernel", signum)
    assert any("jupyterlab" in command for command in processes.values())
    assert any("ipykernel" in command for command in processes.values())
