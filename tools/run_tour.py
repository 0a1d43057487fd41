"""Execute the notebooks of `nbs/` in reading order, as a student's JupyterLab would, and report the time each took.

Usage: run_tour.py [NBS_DIR | NOTEBOOK ...] [--save] [--check] [--out DIR] [--jobs N]
  --save   write each executed notebook back in place, its outputs normalised (tools/notebook_outputs.py):
           what GitHub and the HTML book show. Made as a student's kernel makes them: one notebook at a time,
           torch with its default thread count (one per core), so --save refuses --jobs N > 1 and a set
           OMP_NUM_THREADS or MKL_NUM_THREADS (a result that depends on the thread count would be committed
           as no student's run shows it)
  --check  leave the notebooks alone; fail if a fresh run's outputs differ in kind, cell by cell, from the
           committed ones (a picture, a table, text), or if any output is matplotlib's bare '<Figure size ...>'.
           Each kernel runs torch with CHECK_THREADS (1) thread, not the count --save used (one per core): a
           number the prose claims is asserted beside it, so a claim that holds only at the committed thread
           count fails here, at no cost of a second run
  Whatever --save runs on, its kernels use torch's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2) where the CPU has them:
  an AVX-512 CPU would pick others, whose last bits differ, and a training run near divergence grows those bits into
  other numbers. So a save on either machine commits the same outputs; the prose quotes the range a claim takes over
  seeds, thread counts and kernels (`tools/claims.py`), and the asserts check that range.
  --out    also write the executed notebooks (normalised) to DIR, to read them
  --jobs   notebooks executed at once (default 1: the times are then each notebook's own); with N > 1 each
           kernel gets cores/N torch threads (OMP_NUM_THREADS), so that they do not contend: for --check and
           --out, not --save
Whatever the mode, a notebook fails if a figure it draws puts a title, an axis label or a legend over another
(tools/text_boxes.py, loaded into each kernel as an IPython startup file, measures them at every draw)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).parent))
from notebook_outputs import REFRESH, compare, normalise  # noqa: E402
from text_boxes import describe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def write_startup(sockets: str) -> None:
    "The kernels' IPython folder ($IPYTHONDIR): its startup file loads tools/text_boxes.py, so every draw's text boxes are checked."
    startup = Path(sockets) / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-text-boxes.py").write_text(
        f"exec(compile(open({str(Path(__file__).parent / 'text_boxes.py')!r}).read(), 'text_boxes.py', 'exec'))\n")


def text_over_text(log: Path) -> list[str]:
    "The texts too close that a kernel's draws wrote to `log` (tools/text_boxes.py), each once, as lines to print."
    if not log.exists():
        return []
    found = {}  # a picture is drawn more than once (the inline backend measures, then draws): each pair once
    for r in map(json.loads, log.read_text().splitlines()):
        found.setdefault((r["a"], r["b"]), f"{describe(r['a'], r['b'], *r['shared'])} (in a {r['figure']} picture)")
    return list(found.values())


def execute(path: Path, sockets: str) -> tuple[object, float, str]:
    "Run one notebook in a fresh kernel; return the executed notebook, the seconds it took and 'ok' or the failure."
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # IPC transport: the kernel talks over local sockets, not TCP, so it has no plain-text-TCP warning to print
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / path.stem))
    log = Path(sockets) / f"{path.stem}.text-boxes.jsonl"
    env = {**os.environ, "IPYTHONDIR": str(Path(sockets) / "ipython"), "LOOPLAB_TEXT_BOXES": str(log)}
    try:
        NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
        found = text_over_text(log)
        status = "ok" if not found else f"FAILED: text over text in {len(found)} place{'s' * (len(found) > 1)}:\n    " + "\n    ".join(found)
    except Exception as e:  # report every notebook, then fail at the end
        status = f"FAILED: {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}"
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)  # a kernel we started is ours to stop
    return nb, time.perf_counter() - start, status


SAVE_CAPABILITY = "avx2"  # the kernels --save runs torch with, where the CPU has them: the same on AVX2 and AVX-512 CPUs
THREAD_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what changes torch's thread count from its default
CHECK_THREADS = 1  # --check's torch threads per kernel: another count than --save's default (one per core)


def check_threads() -> dict[str, str]:
    "The thread settings --check gives each kernel: CHECK_THREADS, whatever `--jobs`; a count set by the caller wins."
    return {name: os.environ.get(name) or str(CHECK_THREADS) for name in THREAD_SETTINGS}


def save_capability() -> dict[str, str]:
    "ATEN_CPU_CAPABILITY for --save's kernels: SAVE_CAPABILITY where this CPU runs it, else nothing (its own kernels)."
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    own = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout.strip().lower()
    return {"ATEN_CPU_CAPABILITY": SAVE_CAPABILITY} if own in ("avx2", "avx512") else {}


def save_refusal(jobs: int) -> str | None:
    "Why `--save` cannot run with `jobs` and this environment (the outputs would not be a student's), or None."
    if jobs > 1:
        return (f"--save with --jobs {jobs}: the kernels would run with fewer torch threads than a student's, "
                "and some results depend on the thread count. Save with --jobs 1 (the default)")
    fixed = [f"{name}={os.environ[name]}" for name in THREAD_SETTINGS if os.environ.get(name)]
    if fixed:
        return (f"--save with {', '.join(fixed)}: a student's kernel runs torch with its default thread count, "
                f"and some results depend on it. Unset {', '.join(f.split('=')[0] for f in fixed)} to save")
    return None


def main(paths: list[Path], save: bool = False, check: bool = False, out_dir: str | None = None,
         jobs: int = 1) -> int:
    if not paths:
        print("no notebooks to run", file=sys.stderr)
        return 1
    refusal = save_refusal(jobs) if save else None
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    # What a student sees: the inline backend draws pyplot's figures (a script's MPLBACKEND=Agg would hide them),
    # and the notebooks run in full, not shortened as under nbdev_test.
    os.environ.pop("MPLBACKEND", None)
    os.environ.pop("IN_TEST", None)
    if check:
        os.environ.update(check_threads())
    if save:
        os.environ.pop("ATEN_CPU_CAPABILITY", None)
        os.environ.update(save_capability())
    if save and (os.cpu_count() or 1) == CHECK_THREADS:
        print(f"note: --save on {CHECK_THREADS} core runs torch with {CHECK_THREADS} thread, as --check does: the "
              "check will not see another thread count than the committed one", file=sys.stderr)
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Kernels side by side share the cores: torch's default of one thread per core in each of them makes
        # their threads wait on one another (a notebook then runs several times slower than alone).
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    failed, stale = [], []
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="looplab-tour-") as sockets, ThreadPoolExecutor(jobs) as pool:
        write_startup(sockets)
        runs = [(path, pool.submit(execute, path, sockets)) for path in paths]
        for path, run in runs:  # in reading order, each as soon as it and those before it are done
            nb, took, status = run.result()
            total += took
            normalise(nb, ROOT)
            if status != "ok":
                failed.append(path.name)
            elif check:
                problems = compare(path.name, nbformat.read(path, as_version=4), nb)
                if problems:
                    stale.extend(problems)
                    status = f"outputs not current ({len(problems)} cells)"
            if save and status == "ok":
                nbformat.write(nb, path)
            if out_dir:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, Path(out_dir) / path.name)
            print(f"{path.name:32s} {took:6.1f} s  {status}", flush=True)
    if save:
        written = [str(p) for p in paths if p.name not in failed]
        clean = Path(sys.executable).parent / "nbdev_clean"
        for path in written:  # the committed form: nbdev_clean's (no execution counts, no metadata noise)
            subprocess.run([str(clean), "--fname", path], check=True, cwd=ROOT)
    print(f"{'total':32s} {total:6.1f} s  {len(paths) - len(failed)} ran, {len(failed)} failed")
    if stale:
        print("\nThe committed outputs are not what the notebooks give now:", file=sys.stderr)
        print("\n".join("  " + p for p in stale), file=sys.stderr)
        print(f"Refresh them with `{REFRESH}`, look at the pictures, and commit the notebooks.", file=sys.stderr)
    return 1 if failed or stale else 0


def notebooks(args: list[str]) -> list[Path]:
    "The notebooks named, or those of the folders named, in reading order (default: nbs/, then its answer keys)."
    paths = []
    for arg in args or [str(ROOT / "nbs"), str(ROOT / "nbs" / "keys")]:
        path = Path(arg)
        if path.is_dir():
            paths.extend(sorted(p for p in path.glob("*.ipynb") if not p.name.startswith(("_", "."))))
        elif path.suffix == ".ipynb" and path.exists():
            paths.append(path)
        else:
            raise SystemExit(f"{arg} is neither a notebook nor a folder of notebooks")
    return paths


if __name__ == "__main__":
    args = sys.argv[1:]

    def option(name: str, default: str | None = None) -> str | None:
        if name not in args:
            return default
        i = args.index(name)
        value = args[i + 1] if i + 1 < len(args) else None
        if value is None or value.startswith("--"):
            raise SystemExit(f"{name} needs a value")
        del args[i:i + 2]
        return value

    def flag(name: str) -> bool:
        if name in args:
            args.remove(name)
            return True
        return False

    out = option("--out")
    jobs = int(option("--jobs", "1"))
    save, check = flag("--save"), flag("--check")
    if save and check:
        raise SystemExit("--save rewrites the outputs and --check compares them: use one at a time")
    unknown = [a for a in args if a.startswith("--")]
    if unknown:
        raise SystemExit(f"unknown option {unknown[0]}; see the docstring of tools/run_tour.py")
    sys.exit(main(notebooks(args), save=save, check=check, out_dir=out, jobs=jobs))
