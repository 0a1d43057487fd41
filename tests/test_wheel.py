"""The wheel ships the embedded data: build it, install it into a fresh virtual environment with no checkout on the
path, and load the digits from there."""
import os
import subprocess
import sys
import venv
from pathlib import Path

import numpy
import torch

from helpers import run

ROOT = Path(__file__).resolve().parent.parent


def source_tree(dest: Path) -> Path:
    "A copy of the files git tracks (what a clean clone holds), so that the build leaves the checkout untouched."
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            target.write_bytes((ROOT / name).read_bytes())
    return dest


def test_wheel_installs_and_loads_the_digits(tmp_path):
    src = source_tree(tmp_path / "src")
    build = run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                 "-w", str(tmp_path / "dist")], timeout=300)  # pip's build subprocess ended too, if interrupted
    assert build.returncode == 0, build.stdout + build.stderr
    assert "absent from the `packages` configuration" not in build.stdout + build.stderr, build.stderr
    wheel, = (tmp_path / "dist").glob("looplab-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # torch and numpy from this environment, not reinstalled: a plain path line, so that no .pth there (such as
    # an editable install of looplab) is run
    deps = sorted({str(Path(torch.__file__).parent.parent), str(Path(numpy.__file__).parent.parent)})
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    install = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                   str(wheel)], timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    check = ("import looplab, looplab.data as d; x, y = d.load_digits(); "
             "assert x.shape == (1797, 64) and y.shape == (1797,); print(looplab.__file__)")
    loaded = run([str(python), "-c", check], timeout=300, cwd=tmp_path, env=env)
    assert loaded.returncode == 0, loaded.stderr
    assert Path(loaded.stdout.strip()).is_relative_to(env_dir), f"looplab was imported from {loaded.stdout.strip()}"
