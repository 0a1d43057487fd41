#!/usr/bin/env bash
# The floor run: looplab at the oldest versions settings.ini declares — Python, torch, numpy, matplotlib and ipywidgets,
# every floor at once — in a virtual environment of its own (.venv-floor): the unit tests of what changes between
# versions (listed below) and the README's quick start.
# FLOOR_PYTHON names the interpreter to use; by default the first of python3.X (X from min_python) and pyenv's
# versions of it that runs. --build-only builds (or reuses) the environment and stops there: tools/test.sh runs that
# in the background while the notebooks run, since most of it is waiting on the download of torch's CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FLOOR_VENV:-.venv-floor}
host_python=$(command -v python3)
min_python=$("$host_python" tools/floors.py python)
read -r -a pins <<< "$("$host_python" tools/floors.py pins)"

is_min_python() { "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$min_python'.split('.'))))" 2>/dev/null; }
find_python() {
  local candidates=("${FLOOR_PYTHON:-}" "python$min_python")
  if command -v pyenv >/dev/null; then
    candidates+=("$(pyenv root)"/versions/"$min_python".*/bin/python"$min_python")
  fi
  for candidate in "${candidates[@]}"; do
    if [ -n "$candidate" ] && is_min_python "$candidate"; then echo "$candidate"; return 0; fi
  done
  echo "the floor run needs Python $min_python (settings.ini's min_python) and found none: install it" \
       "(e.g. pyenv install $min_python) or set FLOOR_PYTHON to its interpreter" >&2
  return 1
}

stamp="$VENV/.looplab-floors"
if ! [ -f "$stamp" ] || ! [ "$stamp" -nt settings.ini ] || ! [ "$stamp" -nt setup.py ] || ! [ "$stamp" -nt tools/test_floors.sh ]; then
  rm -rf "$VENV"
  "$(find_python)" -m venv "$VENV"
  echo "installing the floors into $VENV: ${pins[*]}"
  # the test tools as settings.ini pins them, and what tests/test_wheel.py builds with (no build isolation there)
  read -r -a tools <<< "$("$host_python" tools/floors.py dev pytest pytest-xdist hypothesis nbformat execnb fastcore)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" "${tools[@]}" setuptools wheel
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  touch "$stamp"
fi
# what is installed is what was asked for: a pin that pip resolved otherwise would make this run prove nothing
"$VENV/bin/python" - "${pins[@]}" <<'PY'
import sys
from importlib.metadata import version
wrong = [f"{p} (installed {version(p.split('==')[0])})" for p in sys.argv[1:]
         if version(p.split("==")[0]).split("+")[0] != p.split("==")[1]]
print(f"Python {sys.version.split()[0]};", ", ".join(f"{p.split('==')[0]} {version(p.split('==')[0])}" for p in sys.argv[1:]))
sys.exit(f"not at the floor: {wrong}" if wrong else 0)
PY
if [ "${1:-}" = "--build-only" ]; then exit 0; fi

echo "-- the README's quick start"
snippet=$(mktemp --suffix=.py)
"$host_python" tools/floors.py snippet > "$snippet"
venv_python="$(cd "$VENV" && pwd)/bin/python"
(cd "$(dirname "$snippet")" && MPLBACKEND=Agg "$venv_python" "$snippet")
rm -f "$snippet"

echo "-- the unit tests of what changes between versions"
# torch's amp scaler and autocast, its weights_only unpickler and files, the DataLoader's sampler protocol, DDP over
# gloo, the optimizers and norm layers, hooks, NumPy's casting, matplotlib's and ipywidgets' plots. The tests that
# rerun a whole training in a new process to compare it bit for bit (`new_process` in their names) run at the
# development versions only: they check the kit's arithmetic, which the floors do not change, and take minutes.
floor_tests=(tests/test_foundation.py tests/test_learner_api.py tests/test_surfaces.py tests/test_engine.py
             tests/test_fp16.py tests/test_checkpoint.py tests/test_data.py tests/test_samplers.py tests/test_optim.py
             tests/test_schedule.py tests/test_hooks.py tests/test_widgets.py tests/test_throttle.py
             tests/test_loss_plot.py tests/test_distributed.py tests/test_versions.py tests/test_bad_input.py)
workers=$(nproc); if [ "$workers" -gt 4 ]; then workers=4; fi  # a test file per worker, as in tools/test.sh
MPLBACKEND=Agg "$VENV/bin/python" -m pytest "${floor_tests[@]}" -q -m "not browser" -k "not new_process" \
  -n "$workers" --dist loadfile -p no:cacheprovider "$@"
