"""Do the notebooks' claims hold on a student's machine? Run notebooks under perturbations (another seed, another torch
thread count, another CPU kernel set) and print every assert's values across them.

Usage: claims.py [NOTEBOOK ...] [--seeds 0,1,2,3,4] [--threads 1,2,4] [--caps default,avx2,avx512]
                 [--grid star|full] [--jobs N] [--json FILE] [--quiet]
  NOTEBOOK  notebooks to run (default: the first-read route's stops, `tools/sizes.py`)
  --seeds   seed shifts: under shift k, every `torch.manual_seed(s)` the notebook (or looplab) calls seeds s + k, so the
            model's initialisation, dropout and any draw seeded that way move; data orders seeded by their own
            generators (looplab's samplers) do not. 0 is the notebook as written (default 0,1,2,3,4)
  --threads torch's thread count (OMP_NUM_THREADS); a notebook that pins its own count keeps it (default 1,2,4)
  --caps    ATEN_CPU_CAPABILITY: the kernels torch picks on another CPU. Only those this CPU can run are used
            (default: default, avx2, avx512, each where this CPU has it)
  --grid    star (default): the notebook as written at the first thread count and this CPU's own kernels, then one
            axis changed at a time (5 seeds + 2 thread counts + 2 kernel sets = 9 runs); full: every combination
  --jobs    runs at once (default 2)
  --json    also write every run's records to FILE
  --quiet   print only the claims that failed somewhere, and the summary

What a claim is here: every `assert` in the notebooks' code cells. Each is rewritten, in the executed copy only, into
a call that records whether it held and the value of each side of its comparisons, and the run goes on (a failed
assert does not stop the notebook, so one run shows every claim). A cell that raises for another reason is recorded
too. The table lists, for each claim whose sides are numbers, the range of each side over the runs; for every claim,
where it failed. Exit status 1 if any claim failed anywhere, so the same command serves CI."""
from __future__ import annotations

import ast
import builtins
import itertools
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).parent))
import sizes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORD = "__looplab_claim__"  # the kernel-side recorder each rewritten assert calls

# Loaded into every kernel before the notebook's first cell (an IPython startup file): the seed shift and the recorder.
STARTUP = r'''
import json as _json, os as _os
_shift = int(_os.environ.get("LOOPLAB_SEED_SHIFT", "0"))
if _shift:
    import torch as _torch
    _manual_seed = _torch.manual_seed
    def _shifted_manual_seed(seed):
        "torch.manual_seed(seed + shift): the notebook's seeds, moved by the claims run's perturbation."
        return _manual_seed(int(seed) + _shift)
    _torch.manual_seed = _torch.random.manual_seed = _shifted_manual_seed
_claims_log = _os.environ["LOOPLAB_CLAIMS_LOG"]
_claims_seen = {}
def _as_number(v):
    try:
        import numpy, torch
        if isinstance(v, torch.Tensor):
            return v.item() if v.numel() == 1 else None
        if isinstance(v, numpy.ndarray):
            return v.item() if v.size == 1 else None
        if isinstance(v, numpy.generic):
            return v.item()
    except Exception:
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
def _keep(record, source, value):
    items = [(source, value)]
    if isinstance(value, dict) and 0 < len(value) <= 20:
        items = [(f"{source}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)) and 0 < len(value) <= 20:
        items = [(f"{source}[{i}]", v) for i, v in enumerate(value)]
    for side, v in items:
        number = _as_number(v)
        if number is not None and number == number:
            record["values"].setdefault(side, number)
def __looplab_claim__(key, text, test, names):
    n = _claims_seen[key] = _claims_seen.get(key, 0) + 1
    record = {"key": key if n == 1 else f"{key}#{n}", "text": text, "values": {}}
    def side(source, value):
        _keep(record, source, value)
        return value
    try:
        record["ok"] = bool(test(side))
    except Exception as e:
        record["ok"], record["error"] = False, f"{type(e).__name__}: {e}"[:300]
    for name, value in names:
        try:
            _keep(record, name, value())
        except Exception:
            pass
    with open(_claims_log, "a") as f:
        f.write(_json.dumps(record) + "\n")
'''


def _literal(node: ast.AST) -> bool:
    "A number or string written in the source (a bound), possibly negated: not a value worth reporting."
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    return isinstance(node, ast.Constant)


SIDE = "_looplab_side"  # the parameter through which a rewritten comparison reports each of its sides


class _Sides(ast.NodeTransformer):
    """Wrap each non-literal side of a comparison in `_looplab_side(source, side)`, which records it and returns it:
    each side is evaluated once, where the assert evaluated it (an iterator an assert consumes is consumed once).
    Comprehensions and lambdas are left alone: their sides take a value per item."""
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        wrap = lambda o: o if _literal(o) else ast.Call(ast.Name(SIDE, ast.Load()), [ast.Constant(ast.unparse(o)), o], [])
        node.left, node.comparators = wrap(node.left), [wrap(o) for o in node.comparators]
        return node

    def _leave(self, node: ast.AST) -> ast.AST:
        return node

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _leave


def _free_names(test: ast.AST) -> list[str]:
    """The names `test` reads that no comprehension in it binds: reported after the assert, so that a dict or list of
    numbers shows item by item (`all(acc[k] > 0.9 for k in acc)` shows each `acc[k]`). Reading a name has no effect."""
    bound = {n.id for g in ast.walk(test) if isinstance(g, ast.comprehension) for n in ast.walk(g.target)
             if isinstance(n, ast.Name)}
    names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [n for n in dict.fromkeys(names) if n not in bound and not hasattr(builtins, n)]


class _Recorder(ast.NodeTransformer):
    "Rewrite each `assert test` into `__looplab_claim__(key, text, lambda _looplab_side: test, [(name, lambda: name)])`."
    def __init__(self, cell: int):
        self.cell = cell

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        def thunk(expr, *params):
            return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[],
                                                 kw_defaults=[], defaults=[]), body=expr)
        text = ast.unparse(node.test)
        names = [ast.Tuple([ast.Constant(n), thunk(ast.Name(n, ast.Load()))], ast.Load()) for n in _free_names(node.test)]
        call = ast.Call(ast.Name(RECORD, ast.Load()),
                        [ast.Constant(f"cell {self.cell} line {node.lineno}"), ast.Constant(text),
                         thunk(_Sides().visit(node.test), SIDE), ast.List(names, ast.Load())], [])
        return ast.copy_location(ast.Expr(call), node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node  # a class body's names are not visible from a lambda: its asserts stay asserts


def instrument(source: str, cell: int) -> str:
    """The cell's source with its asserts rewritten into recording calls (IPython's magics turned into Python first).
    A cell the package exports is left as written: an assert there is the library's own behaviour (`refuses` raises
    through one on purpose), not a claim of the notebook's."""
    if re.search(r"^#\|\s*export", source, re.M):
        return source
    from IPython.core.inputtransformer2 import TransformerManager
    python = TransformerManager().transform_cell(source)
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return source
    if not any(isinstance(n, ast.Assert) for n in ast.walk(tree)):
        return source
    return ast.unparse(ast.fix_missing_locations(_Recorder(cell).visit(tree)))


@dataclass(frozen=True)
class Perturbation:
    seed: int
    threads: int
    cap: str  # the ATEN_CPU_CAPABILITY torch runs with

    def __str__(self) -> str:
        return f"seed+{self.seed} {self.threads}t {self.cap}"

    def env(self) -> dict[str, str]:
        return {"LOOPLAB_SEED_SHIFT": str(self.seed), "OMP_NUM_THREADS": str(self.threads),
                "MKL_NUM_THREADS": str(self.threads), "ATEN_CPU_CAPABILITY": self.cap}


def cpu_caps() -> list[str]:
    "The ATEN_CPU_CAPABILITY values this CPU can run, from torch's own reading of it."
    os.environ.pop("ATEN_CPU_CAPABILITY", None)  # torch reads it at import: the CPU's own, not a setting's
    import torch
    native = torch.backends.cpu.get_cpu_capability().lower()
    order = ["default", "avx2", "avx512"]
    return order[:order.index(native) + 1] if native in order else ["default", native]


def perturbations(seeds: list[int], threads: list[int], caps: list[str], grid: str) -> list[Perturbation]:
    if grid == "full":
        return [Perturbation(s, t, c) for s, t, c in itertools.product(seeds, threads, caps)]
    base = Perturbation(seeds[0], threads[0], cpu_caps()[-1])  # this CPU's own kernels
    runs = [base] + [Perturbation(s, base.threads, base.cap) for s in seeds[1:]]
    runs += [Perturbation(base.seed, t, base.cap) for t in threads[1:]]
    runs += [Perturbation(base.seed, base.threads, c) for c in caps]
    return list(dict.fromkeys(runs))


def run(path: Path, p: Perturbation, scratch: Path) -> tuple[list[dict], float]:
    "Execute one notebook under one perturbation; return its claim records (and any cell's error) and the seconds."
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = instrument(cell.source, i)
    tag = f"{path.stem}-{p.seed}-{p.threads}-{p.cap}"
    log = scratch / f"{tag}.jsonl"
    ipython = scratch / f"ipython-{tag}"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-claims.py").write_text(STARTUP)
    env = {**os.environ, **p.env(), "IPYTHONDIR": str(ipython), "LOOPLAB_CLAIMS_LOG": str(log), "MPLBACKEND": "Agg"}
    env.pop("IN_TEST", None)
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(scratch / tag))
    start = time.perf_counter()
    try:
        NotebookClient(nb, km=km, timeout=900, allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    except Exception as e:
        return [{"key": "the run", "text": "the notebook runs", "values": {}, "ok": False,
                 "error": f"{type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}"}], 0.0
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    took = time.perf_counter() - start
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.output_type == "error":
                records.append({"key": f"cell {i} ran", "text": f"cell {i} runs", "values": {}, "ok": False,
                                "error": f"{out.ename}: {out.evalue}"[:300]})
    return records, took


def number(v: float) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def report(name: str, runs: dict[Perturbation, list[dict]], quiet: bool) -> int:
    "Print one notebook's claims across the runs; return how many failed in at least one run."
    claims: dict[str, dict] = {}
    for p, records in runs.items():
        for r in records:
            c = claims.setdefault(r["key"], {"text": r["text"], "values": {}, "failed": [], "errors": set(), "runs": 0})
            c["runs"] += 1
            for side, v in r["values"].items():
                c["values"].setdefault(side, []).append(v)
            if not r["ok"]:
                c["failed"].append(str(p))
                if "error" in r:
                    c["errors"].add(r["error"])
    failing = sum(bool(c["failed"]) for c in claims.values())
    print(f"\n## {name}: {len(claims)} claims, {failing} failed somewhere ({len(runs)} runs)")
    for key, c in claims.items():
        missing = len(runs) - c["runs"]
        if quiet and not c["failed"] and not missing:
            continue
        # each side that moved between the runs, with its range; a side that read the same in every run held exactly
        sides = "; ".join(f"{s if len(s) <= 48 else s[:45] + '...'} {number(min(v))}..{number(max(v))}"
                          for s, v in c["values"].items() if min(v) != max(v))
        verdict = "holds" if not c["failed"] else f"FAILS at {', '.join(c['failed'])}"
        if missing:
            verdict += f" (not reached in {missing} run{'s' * (missing > 1)})"
        text = c["text"] if len(c["text"]) <= 90 else c["text"][:87] + "..."
        print(f"- [{key}] {text}\n    {sides + ' — ' if sides else ''}{verdict}")
        for e in sorted(c["errors"])[:2]:
            print(f"    {e}")
    return failing + sum(len(runs) - c["runs"] > 0 for c in claims.values() if not c["failed"])


def main(paths: list[Path], runs: list[Perturbation], jobs: int, json_out: str | None, quiet: bool) -> int:
    print(f"{len(paths)} notebooks x {len(runs)} runs: " + ", ".join(map(str, runs)), flush=True)
    results: dict[str, dict[Perturbation, list[dict]]] = {p.stem: {} for p in paths}
    with tempfile.TemporaryDirectory(prefix="looplab-claims-") as scratch, ThreadPoolExecutor(jobs) as pool:
        work = [(path, p, pool.submit(run, path, p, Path(scratch))) for p in runs for path in paths]
        for path, p, future in work:
            records, took = future.result()
            results[path.stem][p] = records
            bad = sum(not r["ok"] for r in records)
            print(f"  {path.stem:24s} {str(p):24s} {took:6.1f} s  {len(records)} claims"
                  f"{f', {bad} FAILED' if bad else ''}", flush=True)
    failed = sum(report(name, by_run, quiet) for name, by_run in results.items())
    if json_out:
        Path(json_out).write_text(json.dumps({name: {str(p): r for p, r in by_run.items()}
                                              for name, by_run in results.items()}, indent=1))
    print(f"\n{failed} claim{'s' * (failed != 1)} failed in at least one run" if failed
          else "\nevery claim held in every run")
    return 1 if failed else 0


def route_paths() -> list[Path]:
    return [ROOT / "nbs" / f"{name}.ipynb" for name, cells in sizes.route() if cells is not None]


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--caps", default=None)
    ap.add_argument("--grid", choices=["star", "full"], default="star")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    have = cpu_caps()
    caps = a.caps.split(",") if a.caps else have
    unknown = [c for c in caps if c not in have]
    if unknown:
        raise SystemExit(f"--caps {','.join(unknown)}: this CPU runs torch's {', '.join(have)} kernels only")
    paths = [Path(n) for n in a.notebooks] or route_paths()
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"{path}: no such notebook")
    runs = perturbations([int(s) for s in a.seeds.split(",")], [int(t) for t in a.threads.split(",")], caps, a.grid)
    sys.exit(main(paths, runs, a.jobs, a.json, a.quiet))
