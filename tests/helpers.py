"""Helpers shared by the tests and by the worker scripts they run in new processes."""
import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from looplab.callback import Callback, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner

PNG = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file
CHROMIUM = Path("/usr/bin/chromium")  # Debian's, driven through playwright: never a browser playwright downloads
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_chromium(what: str = "the browser test") -> None:
    "Skip without Chromium, except under CI, where a missing browser is a failure."
    import pytest  # here, not at the top: the worker scripts that import this module run without pytest
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing, and CI is set: {what} must run in CI "
                    "(apt-get install -y chromium chromium-driver)")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium chromium-driver); outside CI {what} "
                "is skipped")


@contextlib.contextmanager
def chromium_context(profile: Path, **options):
    "Debian's Chromium under playwright, with the flags above and a fresh profile folder `profile`; closed on exit."
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(str(profile), executable_path=str(CHROMIUM),
                                                                headless=True, args=CHROMIUM_FLAGS, **options)
        try:
            yield context
        finally:
            context.close()


def make_dls(n=256, bs=16, valid=True, seed=0):
    "A small two-class problem on 8 features, in batches of `bs` (the first 4 batches again as validation)."
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long()
    batches = [(x[i:i + bs], y[i:i + bs]) for i in range(0, n, bs)]
    return DataLoaders(batches, batches[:4] if valid else None)


def make_learner(dls=None, opt_func=torch.optim.SGD, lr=0.1, **kwargs):
    "A seeded 8-16-2 MLP learner on `make_dls()`, printing its progress into a buffer."
    set_seed(0)
    learn = Learner(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), dls or make_dls(), lr=lr,
                    opt_func=opt_func, **kwargs)
    learn.progress.file = io.StringIO()
    return learn


def digits_learner(make_model, seed: int, bs: int = 64, data_seed: int = 42, lr: float = 0.1, opt_func=None,
                   progress: bool = False, **kwargs) -> Learner:
    "A learner on the digits: `make_model()` built after `set_seed(seed)`, SGD with momentum 0.9 unless told, silent."
    set_seed(seed)
    model = make_model()
    dls = DataLoaders.from_tensors(*load_digits(), bs=bs, seed=data_seed)
    opt_func = partial(torch.optim.SGD, momentum=0.9) if opt_func is None else opt_func
    return Learner(model, dls, lr=lr, opt_func=opt_func, progress=progress, **kwargs)


def find_cb(learn, cls):
    "The learner's first callback of class `cls`."
    return next(cb for cb in learn.cbs if type(cb) is cls)


class StopAt(Callback):
    "Saves a checkpoint to `path` after training batch `n_iter` (never, with `n_iter` None), then stops the run, or with `die` ends the process at once (os._exit, as a kill would)."
    order = 200

    def __init__(self, n_iter, path, die: bool = False):
        self.n_iter = n_iter
        self.path = path
        self.die = die

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            save_checkpoint(self.learn, self.path)
            if self.die:
                os._exit(0)
            raise CancelFitException()


class StopAfter(Callback):
    "Stops the run after training batch `n_iter`, or at the end of epoch `epoch` (after a Checkpoint saved): a kill at a known moment."
    order = 200

    def __init__(self, n_iter=None, epoch=None):
        self.n_iter = n_iter
        self.epoch = epoch

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            self.stop()

    def on_epoch_end(self):
        if self.learn.epoch == self.epoch:
            self.stop()

    def stop(self):
        raise CancelFitException()


class SaveAt(StopAfter):
    "Saves a checkpoint to `path` after training batch `n_iter` (or at the end of epoch `epoch`), then ends the fit."
    order = 100

    def __init__(self, path=None, n_iter=None, epoch=None):
        super().__init__(n_iter, epoch)
        self.path = path

    def stop(self):
        save_checkpoint(self.learn, self.path)
        super().stop()


class PrintProgress(Callback):
    "Prints `fit` when training starts, then `n_iter` after every training batch: a test kills the process on a line."
    order = 300  # after the Checkpoint and any callback that stops the run

    def on_train_begin(self):
        print("fit", flush=True)

    def on_batch_end(self):
        if self.learn.training:
            print(self.learn.n_iter, flush=True)


def resume_if_saved(learn, path) -> dict:
    "Load the checkpoint at `path` into `learn` if there is one; where the run resumes (`load_checkpoint`), or {}."
    if path and Path(path).exists():
        return load_checkpoint(learn, path)["resumes_at"]
    return {}


def kill_and_resume_parser(description: str) -> argparse.ArgumentParser:
    "A worker's command line: OUT, --epochs, --ckpt and --every; the worker adds its own options."
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ckpt", help="the checkpoint file")
    parser.add_argument("--every", type=int, help="checkpoint every this many training batches")
    return parser


def run_results(learn, columns, resumed_from: dict, **extra) -> dict:
    "What a kill-and-resume test compares: parameters, every batch loss, the epoch `columns`, and where it resumed."
    rows = learn.recorder.values
    return {"params": [p.detach().clone() for p in learn.model.parameters()],
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "values": {key: torch.tensor([r[key] for r in rows], dtype=torch.float64) for key in columns},
            "n_iter": learn.n_iter, "resumed_from": resumed_from, **extra}


def worker_main(description: str, build_learner, results) -> None:
    "A worker script's main: its command line: build the learner (stopping after --stop-at), --resume from a file, fit, save `results`."
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--stop-at", type=int, help="save --ckpt after this training batch and stop")
    parser.add_argument("--ckpt")
    parser.add_argument("--resume", help="load this checkpoint first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.stop_at, args.ckpt)
    if args.resume:
        load_checkpoint(learn, args.resume)
    learn.fit(args.epochs)
    torch.save(results(learn), args.out)


def run_worker(script: Path, out: Path, *args, env: dict | None = None, timeout: float = 300) -> dict | None:
    "Run the worker `script` with `out` and `args` to its end (a failure shows its stderr); what it saved at `out`, or None."
    done = subprocess.run([sys.executable, str(script), str(out), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=True) if Path(out).exists() else None


# Processes a test starts: each in a process group of its own, ended whatever way the test ends. conftest.py turns
# SIGTERM into the same exception as Ctrl-C, so a run that is terminated (a CI timeout) ends them too.

def _processes() -> dict[int, tuple[int, int]]:
    "Every process's (parent PID, process group), by PID, from /proc."
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended while we looked
                continue
            if fields[0] != "Z":  # a zombie has ended; only its parent's wait() is missing
                table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def cmdline(pid: int) -> str:
    "The command line of process `pid`, or '' if it has ended."
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def family(pid: int) -> dict[int, str]:
    "Process `pid`, its process group and its descendants (a Jupyter kernel leaves the group), with their command lines."
    table = _processes()
    found = {p for p, (_, group) in table.items() if group == pid}
    if pid in table:
        found.add(pid)
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, (pp, _) in table.items() if pp == parent and p not in found]
        found.update(children)
        frontier.extend(children)
    return {p: cmdline(p) for p in found if p != os.getpid()}


def alive(processes: dict[int, str]) -> dict[int, str]:
    "The processes of `processes` (PID -> command line) still running: same PID, same command line, not a zombie."
    table = _processes()
    return {pid: command for pid, command in processes.items() if pid in table and command and cmdline(pid) == command}


def end_family(proc: subprocess.Popen, grace: float = 20.0) -> None:
    "End `proc`, its process group and its descendants by their PIDs: SIGTERM, SIGKILL after `grace` seconds; reap it."
    members = family(proc.pid)
    for pid in alive(members):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # a Jupyter server shuts its kernels down on SIGTERM
    deadline = time.monotonic() + grace
    while alive(members) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive(members):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def started(command: list[str], grace: float = 20.0, **kwargs) -> Iterator[subprocess.Popen]:
    "`subprocess.Popen(command, **kwargs)` in a process group of its own; on leaving, `end_family` ends them all."
    with subprocess.Popen(command, start_new_session=True, **kwargs) as proc:  # on leaving: its pipes closed
        try:
            yield proc
        finally:
            end_family(proc, grace)


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True)`; a timeout or an interrupt ends the child's children too.
    Python processes run with `faulthandler` on, so that a timeout fails with where each of them was stuck."""
    env = {**(kwargs.pop("env", None) or os.environ), "PYTHONFAULTHANDLER": "1"}
    with started(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StillRunning(command, timeout, *python_stacks(proc)) from None
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


class StillRunning(AssertionError):
    "`run`'s command outlived its timeout: the message shows its processes, their Python stacks and their output."
    def __init__(self, command: list[str], timeout: float, processes: dict[int, str], stdout: str, stderr: str):
        listed = "\n".join(f"  {pid}: {line[:200]}" for pid, line in sorted(processes.items()))
        super().__init__(f"{' '.join(map(str, command))[:300]}\nstill running after {timeout:g} s; its processes "
                         f"then:\n{listed}\n-- stdout (end):\n{stdout[-3000:]}\n-- stderr (end; with each Python "
                         f"process's stack):\n{stderr[-12000:]}")


def python_stacks(proc: subprocess.Popen, wait: float = 10.0) -> tuple[dict[int, str], str, str]:
    """The processes of `proc`'s family still alive; then their output so far, with the Python stack of each one
    `faulthandler` is on in (SIGABRT makes it print them; the processes end there)."""
    members = alive(family(proc.pid))
    for pid, line in members.items():
        if "python" in line or "torchrun" in line:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
    try:
        stdout, stderr = proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:  # a process that ignores SIGABRT: ended by `started`, its output not read
        stdout, stderr = "", "(no output: the processes did not end on SIGABRT)"
    return members, stdout or "", stderr or ""
