"""How big each notebook and module is: the numbers the house sizes in ../shared/STYLE.md speak of.

Usage: python tools/sizes.py [--over]   (--over: only what passes ~650 code lines a notebook, ~60 lines a
code cell, or ~450 lines a module)"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_NOTEBOOK, MAX_CELL, MAX_MODULE = 650, 60, 450


def lines(cell: dict) -> int:
    return len("".join(cell["source"]).splitlines())


def notebook_row(path: Path) -> tuple:
    cells = json.loads(path.read_text())["cells"]
    code = [lines(c) for c in cells if c["cell_type"] == "code"]
    prose = [lines(c) for c in cells if c["cell_type"] == "markdown"]
    return path.stem, len(cells), sum(code), sum(prose), max(code, default=0)


def main(argv: list[str]) -> None:
    over = "--over" in argv
    print(f"| notebook | cells | code lines | prose lines | largest code cell |\n|---|---|---|---|---|")
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        name, n_cells, code, prose, largest = row = notebook_row(path)
        if not over or code > MAX_NOTEBOOK or largest > MAX_CELL:
            print(f"| `{name}` | {n_cells} | {code} | {prose} | {largest} |")
    print(f"\n| module | lines |\n|---|---|")
    for path in sorted((ROOT / "looplab").glob("*.py")):
        n = len(path.read_text().splitlines())
        if path.name != "_modidx.py" and (not over or n > MAX_MODULE):
            print(f"| `{path.name}` | {n} |")


if __name__ == "__main__":
    main(sys.argv[1:])
