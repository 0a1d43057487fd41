"""tools/claims.py: a notebook's asserts recorded with their sides and run on past a failure, the seed shift reaching
`torch.manual_seed`, torch's kernels and thread count set per run, and a failed claim named with the run it failed in."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import claims  # noqa: E402


def test_an_assert_becomes_a_call_that_reports_each_side_once():
    source = claims.instrument("xs = iter([1, 2])\nassert next(xs) == 1 < 2.5, 'msg'\nassert next(xs) == 2", cell=7)
    tree = ast.parse(source)
    assert not any(isinstance(n, ast.Assert) for n in ast.walk(tree))
    records = []
    def record(key, text, test, names):
        values = {}
        def side(src, value):
            values[src] = value
            return value
        records.append((key, text, test(side), values, {n: f() for n, f in names}))
    exec(compile(tree, "cell", "exec"), {claims.RECORD: record})
    # each side evaluated once, where the assert evaluated it: the iterator gives 1, then 2
    assert records == [("cell 7 line 2", "next(xs) == 1 < 2.5", True, {"next(xs)": 1}, {"xs": records[0][4]["xs"]}),
                       ("cell 7 line 3", "next(xs) == 2", True, {"next(xs)": 2}, {"xs": records[1][4]["xs"]})]


def test_comprehension_names_are_left_to_the_comprehension():
    source = claims.instrument("acc = {'a': 0.9}\nassert all(acc[k] > 0.5 for k in acc)", cell=0)
    assert "_looplab_side" not in source.split("lambda _looplab_side:")[1].split(", [")[0]  # no side inside the genexp
    assert "('acc', lambda: acc)" in source and "('k'" not in source


def test_cells_without_asserts_and_magics_are_left_as_written():
    assert claims.instrument("x = 1  # a comment", cell=0) == "x = 1  # a comment"
    assert claims.instrument("%timeit 1 + 1", cell=0) == "%timeit 1 + 1"


def test_an_exported_cell_keeps_its_asserts_a_notebook_cell_does_not():
    body = "def refuses(ok):\n    assert ok, 'raised on purpose'\n    return ok\n"
    exported = claims.instrument("#| export\n" + body, cell=3)
    assert exported == "#| export\n" + body  # the library's own assert: it must still raise for the caller
    ns = {}
    exec(exported, ns)
    with pytest.raises(AssertionError, match="on purpose"):
        ns["refuses"](False)
    assert claims.RECORD in claims.instrument(body, cell=3)  # a notebook's helper: its assert is a claim


def test_the_star_grid_changes_one_axis_at_a_time():
    runs = claims.perturbations([0, 1], [1, 2], ["default", "avx2"], "star")
    base = runs[0]
    assert base.seed == 0 and base.threads == 1 and base.cap == claims.cpu_caps()[-1]
    changed = [sum(getattr(r, f) != getattr(base, f) for f in ("seed", "threads", "cap")) for r in runs[1:]]
    assert changed == [1] * (len(runs) - 1) and len(runs) == len(set(runs))
    assert len(claims.perturbations([0, 1], [1, 2], ["default", "avx2"], "full")) == 8


def notebook(tmp_path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    path = tmp_path / "claims_probe.ipynb"
    nbformat.write(nb, path)
    return path


def run_tool(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "claims.py"), str(path), "--jobs", "1", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_claim_that_holds_for_one_seed_only_is_caught_and_the_run_goes_on(tmp_path):
    path = notebook(
        tmp_path,
        "import torch\ntorch.manual_seed(0)\nx = torch.rand(()).item()",
        "assert x == pytest_x, 'seed 0 only'".replace("pytest_x", repr(__import__("torch").manual_seed(0)
                                                                      and __import__("torch").rand(()).item())),
        "import os\nthreads, cap = torch.get_num_threads(), torch.backends.cpu.get_cpu_capability()\n"
        "assert 0 <= x < 1",
        "assert threads == int(os.environ['OMP_NUM_THREADS']) and cap.lower() == os.environ['ATEN_CPU_CAPABILITY']")
    run = run_tool(path, "--seeds", "0,1", "--threads", "1,2", "--caps", "default", "--json", str(tmp_path / "r.json"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 claim failed in at least one run" in run.stdout
    assert "FAILS at seed+1 1t" in run.stdout  # the seed-0 claim, in the seed+1 run only
    records = json.loads((tmp_path / "r.json").read_text())["claims_probe"]
    assert set(records) == {str(p) for p in claims.perturbations([0, 1], [1, 2], ["default"], "star")}
    for run_name, rs in records.items():
        assert len(rs) == 3 and all(r["ok"] for r in rs[1:]), (run_name, rs)  # the later cells ran, each held
        assert 0 < rs[0]["values"]["x"] < 1


def test_every_claim_holding_exits_zero_and_a_cell_error_is_a_failure(tmp_path):
    fine = run_tool(notebook(tmp_path, "assert 1 + 1 == 2"), "--seeds", "0", "--threads", "1", "--caps", "default")
    assert fine.returncode == 0 and "every claim held in every run" in fine.stdout, fine.stdout + fine.stderr
    broken = run_tool(notebook(tmp_path, "raise ValueError('no data')"), "--seeds", "0", "--threads", "1",
                      "--caps", "default")
    assert broken.returncode == 1 and "ValueError: no data" in broken.stdout, broken.stdout


def test_a_kernel_set_this_cpu_lacks_is_refused_by_name(tmp_path):
    if "avx512" in claims.cpu_caps():
        pytest.skip("this CPU runs every kernel set torch has on x86")
    run = run_tool(notebook(tmp_path, "pass"), "--caps", "avx512")
    assert run.returncode != 0 and "this CPU runs torch's" in run.stderr
