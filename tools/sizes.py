"""How big each notebook and module is: the numbers the house sizes in ../shared/STYLE.md speak of.

Usage: python tools/sizes.py [--over | --first-read]
  --over        only what passes ~650 code lines a notebook, ~60 lines a code cell, or ~450 lines a module
  --first-read  the first-read route, notebook by notebook: the cells before each notebook's door

The door: a notebook's first markdown cell whose first line starts with `## Second read`. The cells before it
are the notebook's first read; the door and everything after it wait for a second read. A notebook whose door
comes right after its title cell is a second read as a whole (a deep dive): the route passes it by."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_NOTEBOOK, MAX_CELL, MAX_MODULE = 650, 60, 450
DOOR = "## Second read"
ROUTE_WORDS, ROUTE_CODE_LINES = 12_000, 3_000  # a first read of about two hours


def lines(cell: dict) -> int:
    return len("".join(cell["source"]).splitlines())


def words(cell: dict) -> int:
    return len("".join(cell["source"]).split())


def notebook_row(path: Path) -> tuple:
    cells = json.loads(path.read_text())["cells"]
    code = [lines(c) for c in cells if c["cell_type"] == "code"]
    prose = [lines(c) for c in cells if c["cell_type"] == "markdown"]
    return path.stem, len(cells), sum(code), sum(prose), max(code, default=0)


def is_door(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and "".join(cell["source"]).lstrip().startswith(DOOR)


def first_read(cells: list[dict]) -> list[dict] | None:
    "The cells before the door; None for a deep dive (its door right after the title); all of them without a door."
    doors = [i for i, c in enumerate(cells) if is_door(c)]
    if not doors:
        return cells
    before = cells[:doors[0]]
    markdown = [c for c in before if c["cell_type"] == "markdown"]
    if len(markdown) <= 1 and all(lines(c) <= 1 for c in before if c["cell_type"] == "code"):
        return None  # only the title (and the `#| default_exp` line): a second read as a whole
    return before


def route() -> list[tuple[str, list[dict] | None]]:
    "(notebook, its first-read cells or None) for every notebook of the tour, in reading order."
    return [(p.stem, first_read(json.loads(p.read_text())["cells"]))
            for p in sorted((ROOT / "nbs").glob("*.ipynb")) if p.stem != "index"]


def print_first_read() -> None:
    print("| notebook | words | code lines | cells |\n|---|---|---|---|")
    total_words = total_code = total_cells = 0
    for name, cells in route():
        if cells is None:
            print(f"| `{name}` | second read | | |")
            continue
        n_words = sum(words(c) for c in cells if c["cell_type"] == "markdown")
        n_code = sum(lines(c) for c in cells if c["cell_type"] == "code")
        total_words, total_code, total_cells = total_words + n_words, total_code + n_code, total_cells + len(cells)
        print(f"| `{name}` | {n_words} | {n_code} | {len(cells)} |")
    print(f"\nfirst read: {total_words} words, {total_code} code lines, {total_cells} cells")


def main(argv: list[str]) -> None:
    if "--first-read" in argv:
        return print_first_read()
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
