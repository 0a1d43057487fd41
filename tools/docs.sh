#!/usr/bin/env bash
# The HTML book of the tour: every notebook with its committed outputs, previous/next navigation, and a page per
# module with its exported names, signatures and docstrings; into settings.ini's doc_path (_docs/).
# Refresh the outputs first with ./tools/tour.sh --headless --save if the notebooks changed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash tools/setup_env.sh
VENV=${VENV:-.venv}
exec "$root/$VENV/bin/python" tools/make_docs.py "$@"
