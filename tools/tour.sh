#!/usr/bin/env bash
# The tutorial tour: JupyterLab on nbs/. With --headless, execute every notebook in order instead and
# report how long each took (what a learner would see, without a browser); --headless --save also writes
# the outputs into the notebooks (what GitHub and the HTML book show), --headless --check compares them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash tools/setup_env.sh
VENV=${VENV:-.venv}
export PATH="$root/$VENV/bin:$PATH"
if [ "${1:-}" = "--headless" ]; then
  exec python tools/run_tour.py "${@:2}"
fi
extra=()
if [ "$(id -u)" = "0" ]; then extra+=(--allow-root); fi
# the tour starts where the route does: 01_bare_loop (00_checks is a reference, linked where a check is first used)
exec jupyter lab "${extra[@]}" --notebook-dir="$root/nbs" --LabApp.default_url=/lab/tree/01_bare_loop.ipynb "$@"
