"""The route at another thread count than the committed one: `tools/run_tour.py --check` (CI's step that executes
every notebook afresh) runs each kernel's torch with one thread, while `--save` runs it with one thread per core, so
a number the prose claims, asserted beside it, is checked at a second thread count without a second run."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import run_tour  # noqa: E402


def test_check_pins_one_torch_thread_whatever_the_jobs(monkeypatch):
    for name in run_tour.THREAD_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert run_tour.check_threads() == {name: str(run_tour.CHECK_THREADS) for name in run_tour.THREAD_SETTINGS}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a caller's own choice wins
    assert run_tour.check_threads()["OMP_NUM_THREADS"] == "3"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: --save's default is one thread too")
def test_the_check_count_is_not_the_committed_one_and_reaches_torch():
    "--save runs torch with its default (one thread per core); --check's setting gives a kernel's torch another count."
    env = {k: v for k, v in os.environ.items() if k not in run_tour.THREAD_SETTINGS}
    ask = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    saved = int(subprocess.run(ask, env=env, capture_output=True, text=True, check=True).stdout)
    checked = int(subprocess.run(ask, env={**env, **run_tour.check_threads()}, capture_output=True, text=True,
                                 check=True).stdout)
    assert checked == run_tour.CHECK_THREADS != saved, (checked, saved)


def test_save_runs_torch_s_avx2_kernels_where_the_cpu_has_them():
    "--save's kernels compute as an AVX2 machine does, on an AVX-512 one too: the committed outputs do not flip."
    probe = [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    own = subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip()
    setting = run_tour.save_capability()
    if own not in ("AVX2", "AVX512"):
        assert setting == {}, "a CPU without AVX2 saves with its own kernels"
        return
    assert setting == {"ATEN_CPU_CAPABILITY": "avx2"}
    used = subprocess.run(probe, env={**env, **setting}, capture_output=True, text=True, check=True).stdout.strip()
    assert used == "AVX2", used
