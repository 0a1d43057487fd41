import os
import signal

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["LOOPLAB_PROGRESS"] = "off"  # a check run by a test is not a student's progress


@pytest.fixture
def always_due(monkeypatch):
    "Every throttle is due at every batch: what a live plot draws does not depend on how fast this machine draws."
    from looplab.widgets import Throttle
    monkeypatch.setattr(Throttle, "due", lambda self: True)


class Terminated(KeyboardInterrupt):
    "SIGTERM, raised as Ctrl-C's KeyboardInterrupt is, so that pytest ends the run the same way."


_previous = None  # the SIGTERM handler before ours (None while ours is not installed)


def _terminate(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: a second one must not cut the teardown short
    raise Terminated(f"{signal.Signals(signum).name}: the test run was terminated")


def _restore_in_child():
    "A forked child (a DataLoader or `launch` worker) must die on SIGTERM, even while blocked in C code."
    if _previous is not None:
        signal.signal(signal.SIGTERM, _previous)


os.register_at_fork(after_in_child=_restore_in_child)


# The test files that take longest on two cores (measured with --durations=0), longest first. pytest-xdist's
# --dist loadfile hands whole files to the workers in collection order, so these start first and the short files
# fill in at the end: the workers finish together instead of one running a long file alone (on two cores the
# files' times sum to 957 s; the run took 521 s with the longest last, against 479 s for a perfect split).
LONGEST_FIRST = ("test_book.py", "test_datasets.py", "test_checkpoint.py", "test_interrupts.py", "test_engine.py",
                 "test_gan.py", "test_regularize.py", "test_browser.py", "test_distributed.py", "test_live_kernel.py")


def pytest_collection_modifyitems(config, items):
    "The files of LONGEST_FIRST first, in its order; every other file after them, each file's tests in their order."
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort


def pytest_configure(config):
    global _previous
    config.addinivalue_line("markers", "browser: a real JupyterLab driven by headless Chromium (needs /usr/bin/chromium)")
    # Without this, SIGTERM (a CI timeout, `kill`) ends pytest on the spot: no fixture is torn down, no `finally` runs,
    # and every server and worker a test started lives on, re-parented to init. As a KeyboardInterrupt, pytest tears
    # everything down as on Ctrl-C, and helpers.started ends each process group.
    _previous = signal.signal(signal.SIGTERM, _terminate) or signal.SIG_DFL  # None: a handler set outside Python


def pytest_unconfigure(config):
    global _previous
    if _previous is not None:
        signal.signal(signal.SIGTERM, _previous)
        _previous = None


@pytest.fixture(scope="module")
def one_thread():
    "One intra-op thread for a test module, as in its worker processes: bit-identical runs, no fight for a busy machine's cores."
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def deterministic_cudnn():
    """On a GPU, cuDNN may pick a convolution whose backward adds in a varying order: two identical runs then differ in
    the last bit. For a test module that compares weights bit for bit, only the deterministic algorithms (no-op on a CPU)."""
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before
