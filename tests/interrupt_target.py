"""Tests that start processes and then wait to be interrupted: test_interrupts.py runs one of them in a pytest of its
own, interrupts that pytest (SIGTERM or Ctrl-C) once $LOOPLAB_MARKER exists, and checks that none of the processes is
left. Not collected by a plain `pytest tests` (the file name does not start with test_)."""
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from helpers import family, started
from test_browser import jupyter  # noqa: F401 (a fixture: the JupyterLab server of the browser test)

# A stand-in for a server: it starts a child that leaves its process group (as a Jupyter kernel does), and dies at
# once on SIGTERM, leaving that child behind unless the test ends it.
SERVER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def wait_to_be_interrupted() -> None:
    "Tell test_interrupts.py that every process is up (their PIDs and command lines), and wait."
    marker = Path(os.environ["LOOPLAB_MARKER"])
    marker.with_suffix(".tmp").write_text(json.dumps(family(os.getpid())))
    marker.with_suffix(".tmp").rename(marker)  # whole, or not there
    time.sleep(600)


def test_a_server_with_a_child_out_of_its_group():
    with started([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True) as proc:
        proc.stdout.readline()  # the child has started
        wait_to_be_interrupted()


def test_jupyter_with_a_kernel(jupyter):  # noqa: F811
    url, _ = jupyter
    parts = urlsplit(url)
    token = parse_qs(parts.query)["token"][0]
    request = urllib.request.Request(f"http://{parts.netloc}/api/kernels?token={token}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=60):
        pass
    deadline = time.monotonic() + 60
    while not any("ipykernel" in command for command in family(os.getpid()).values()):
        assert time.monotonic() < deadline, "the kernel did not start in 60 s"
        time.sleep(0.2)
    wait_to_be_interrupted()
