#!/usr/bin/env bash
# Every test: the package equals what the notebooks export, every notebook runs (nbdev_test), pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash tools/setup_env.sh
VENV=${VENV:-.venv}
export PATH="$root/$VENV/bin:$PATH"
export MPLBACKEND=Agg

echo "== 1/3 nbdev_export changes nothing"
before=$(cat looplab/*.py | sha256sum)
nbdev_export
after=$(cat looplab/*.py | sha256sum)
if [ "$before" != "$after" ]; then
  echo "looplab/ was not what nbs/ exports: nbdev_export has rewritten it. Commit the exported package." >&2
  git status --short -- looplab >&2 || true
  exit 1
fi

echo "== 1b/3 notebooks are committed clean (nbdev_clean changes nothing)"
before=$(cat nbs/*.ipynb | sha256sum)
nbdev_clean
after=$(cat nbs/*.ipynb | sha256sum)
if [ "$before" != "$after" ]; then
  echo "nbs/ had notebooks that were not clean: nbdev_clean has now cleaned them. Commit them (or run nbdev_install_hooks)." >&2
  exit 1
fi

echo "== 2/3 nbdev_test on every notebook"
mapfile -t nbs < <(ls "$root"/nbs/*.ipynb)
if [ "${#nbs[@]}" -eq 0 ]; then echo "no notebooks found in $root/nbs" >&2; exit 1; fi
log=$(mktemp)
nbdev_test --path "$root/nbs" --n_workers 2 --do_print --timing 2>&1 | tee "$log"
started=$(grep -c "^Starting" "$log" || true)
if [ "$started" -ne "${#nbs[@]}" ]; then
  echo "nbdev_test ran $started notebooks, expected ${#nbs[@]}" >&2
  exit 1
fi
rm -f "$log"

echo "== 3/3 pytest"
python -m pytest tests -q "$@"
