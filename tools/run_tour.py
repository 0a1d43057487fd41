"""Execute every notebook in `nbs/` in reading order and report the time each took.

Usage: run_tour.py [NBS_DIR] [--out DIR]   (--out: also save the executed notebooks there, to read them)"""
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient


def main(nbs_dir: str, out_dir: str | None = None) -> int:
    paths = sorted(p for p in Path(nbs_dir).glob("*.ipynb") if not p.name.startswith(("_", ".")))
    if not paths:
        print(f"no notebooks in {nbs_dir}", file=sys.stderr)
        return 1
    failed = []
    total = 0.0
    sockets = tempfile.TemporaryDirectory(prefix="looplab-tour-")  # the kernels' IPC sockets
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        # IPC transport: the kernel talks over local sockets, not TCP, so it has no plain-text-TCP warning to print
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets.name) / path.stem))
        try:
            NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute()
            status = "ok"
        except Exception as e:  # report every notebook, then fail at the end
            status = f"FAILED: {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}"
            failed.append(path.name)
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=True)  # a kernel we started is ours to stop
        took = time.perf_counter() - start
        total += took
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, Path(out_dir) / path.name)
        print(f"{path.name:32s} {took:6.1f} s  {status}", flush=True)
    sockets.cleanup()
    print(f"{'total':32s} {total:6.1f} s  {len(paths) - len(failed)} ran, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    out = None
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1]
        del args[i:i + 2]
    sys.exit(main(args[0] if args else "nbs", out))
