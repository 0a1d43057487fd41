#!/usr/bin/env bash
# Every test: the package equals what the notebooks export; every notebook runs as in JupyterLab and its outputs are
# the committed ones (its asserts and pictures included); the route's claims under another seed, thread count and
# CPU kernels (tools/claims.py); nbdev_test on the notebooks that shorten themselves under
# it; pytest; then the floor run (tools/test_floors.sh): the unit tests and the README's quick start at the oldest
# versions settings.ini declares. FLOORS=0 leaves the floor run out.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The floor run's environment is built in the background from the start: most of it is waiting on the download of
# torch 2.4's CUDA build, which the notebooks and pytest do not need. Its output is shown at step 6, where it is used.
floor_pid=
floor_log=$(mktemp)
stop_floor_build() {  # a run that fails first ends the build too: its process group, pip's processes included
  if [ -n "$floor_pid" ] && kill -0 "$floor_pid" 2>/dev/null; then kill -- "-$floor_pid" 2>/dev/null || true; fi
  rm -f "$floor_log"
}
trap stop_floor_build EXIT
if [ "${FLOORS:-1}" != "0" ]; then
  setsid bash tools/test_floors.sh --build-only >"$floor_log" 2>&1 &  # a process group of its own, led by $!
  floor_pid=$!
  echo "== the floor run's environment (.venv-floor) is being built in the background; its output follows at step 6"
fi
bash tools/setup_env.sh
VENV=${VENV:-.venv}
export PATH="$root/$VENV/bin:$PATH"
export MPLBACKEND=Agg

# unchanged_by MESSAGE CMD FILES... : run CMD; fail with MESSAGE if it changed any of FILES.
unchanged_by() {
  local message=$1 cmd=$2
  shift 2
  local before after
  before=$(cat "$@" | sha256sum)
  "$cmd"
  after=$(cat "$@" | sha256sum)
  if [ "$before" != "$after" ]; then
    echo "$message" >&2
    git status --short -- "$@" >&2 || true
    exit 1
  fi
}

echo "== 1/6 the package is what the notebooks export, and the notebooks are clean (at ${SECONDS}s)"
unchanged_by "looplab/ was not what nbs/ exports: nbdev_export has rewritten it. Commit the exported package." \
  nbdev_export looplab/*.py looplab/keys/*.py
unchanged_by "nbs/ had notebooks that were not clean: nbdev_clean has cleaned them. Commit them (or run nbdev_install_hooks)." \
  nbdev_clean nbs/*.ipynb nbs/keys/*.ipynb

echo "== 2/6 every notebook runs as in JupyterLab, and its outputs are the committed ones (at ${SECONDS}s)"
# Each cell runs here, its asserts too, at one torch thread (the committed outputs were made at one per core), and
# every picture is checked for text drawn over text (tools/text_boxes.py).
python tools/run_tour.py --check --jobs 2

echo "== 3/6 the route's claims on another student's machine: seeds shifted by one, two torch threads, torch's default (not vectorised) CPU kernels (at ${SECONDS}s)"
# Every assert of the route's stops, run as another machine computes it (tools/claims.py); the committed run (step 2)
# used the notebooks' own seeds, one thread and this CPU's kernels. `python tools/claims.py` alone runs the whole grid.
python tools/claims.py --seeds 1 --threads 2 --caps default --grid full --jobs 2 --quiet

echo "== 4/6 nbdev_test on the notebooks that read IN_TEST (shorter loops; the same cells as step 2 elsewhere) (at ${SECONDS}s)"
mapfile -t nbs < <(grep -l "IN_TEST" "$root"/nbs/*.ipynb)
if [ "${#nbs[@]}" -eq 0 ]; then echo "no notebook in $root/nbs reads IN_TEST" >&2; exit 1; fi
log=$(mktemp)
names=$(for nb in "${nbs[@]}"; do basename "$nb" .ipynb; done | paste -sd'|')
# --skip_folder_re: not nbs/keys/, whose answer keys share their stops' names (step 2 runs them)
nbdev_test --path "$root/nbs" --file_re "^($names)\.ipynb$" --skip_folder_re '^(keys|[_.].*)$' --n_workers 2 --do_print --timing 2>&1 | tee "$log"
started=$(grep -o "Starting /" "$log" | wc -l)  # parallel workers may print two on one line
if [ "$started" -ne "${#nbs[@]}" ]; then
  echo "nbdev_test ran $started notebooks, expected ${#nbs[@]}" >&2
  exit 1
fi
rm -f "$log"

echo "== 5/6 pytest, a test file per worker, one worker per core up to 4 (the reason for each skip at the end) (at ${SECONDS}s)"
workers=$(nproc); if [ "$workers" -gt 4 ]; then workers=4; fi
python -m pytest tests -n "$workers" --dist loadfile -rs --durations=15 "$@"

if [ "${FLOORS:-1}" != "0" ]; then
  echo "== 6/6 the floor run: the unit tests and the quick start at the declared floors (.venv-floor) (at ${SECONDS}s)"
  built=0
  wait "$floor_pid" || built=$?
  floor_pid=
  grep -v "^WARNING: Location .* is ignored" "$floor_log" || true  # pip's note on each package about absent mirrors
  if [ "$built" -ne 0 ]; then echo "building .venv-floor failed (exit $built): its output is above" >&2; exit 1; fi
  echo "-- .venv-floor ready (at ${SECONDS}s)"
  bash tools/test_floors.sh
fi
echo "== every test passed, in ${SECONDS}s"
