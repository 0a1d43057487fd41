"""How big each notebook and module is: the numbers the house sizes in ../shared/STYLE.md speak of.

Usage: python tools/sizes.py [--over | --first-read | --route-sentence]
  --over            only what passes ~650 code lines a notebook, ~60 lines a code cell, or ~450 lines a module
  --first-read      the first-read route, notebook by notebook: the cells before each notebook's door, and its
                    reading time by the rule below
  --route-sentence  the route and its size as nbs/index.ipynb states them (tests/test_teaching.py compares the two)

The reading time of a first read, by one rule: a minute per 150 words of prose, a minute per 30 lines of code, and
half a minute per picture (a committed PNG output). The route is meant to fit ROUTE_MINUTES by that rule; running
the cells and trying the Try-its comes on top of it.

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
ROUTE_MINUTES = 120  # a first read of two hours, by the rule of `minutes`
WORDS_A_MINUTE, CODE_LINES_A_MINUTE, MINUTES_A_PICTURE = 150, 30, 0.5


def lines(cell: dict) -> int:
    return len("".join(cell["source"]).splitlines())


def words(cell: dict) -> int:
    return len("".join(cell["source"]).split())


def pictures(cell: dict) -> int:
    "How many PNG pictures a code cell's committed outputs show."
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def first_read_size(cells: list[dict]) -> tuple[int, int, int, int]:
    "(words of prose, code lines, pictures, cells) of a first read."
    n_words = sum(words(c) for c in cells if c["cell_type"] == "markdown")
    n_code = sum(lines(c) for c in cells if c["cell_type"] == "code")
    n_pictures = sum(pictures(c) for c in cells if c["cell_type"] == "code")
    return n_words, n_code, n_pictures, len(cells)


def minutes(n_words: int, n_code: int, n_pictures: int) -> float:
    "Reading time by the rule: words/150 + code lines/30 + half a minute a picture."
    return n_words / WORDS_A_MINUTE + n_code / CODE_LINES_A_MINUTE + n_pictures * MINUTES_A_PICTURE


def route_size() -> tuple[int, int, int, int]:
    "(words, code lines, pictures, cells) of the whole first-read route."
    sizes = [first_read_size(cells) for _, cells in route() if cells is not None]
    return tuple(sum(column) for column in zip(*sizes))


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
    print("| notebook | words | code lines | pictures | cells | minutes |\n|---|---|---|---|---|---|")
    for name, cells in route():
        if cells is None:
            print(f"| `{name}` | second read | | | | |")
            continue
        n_words, n_code, n_pictures, n_cells = first_read_size(cells)
        print(f"| `{name}` | {n_words} | {n_code} | {n_pictures} | {n_cells} | {minutes(n_words, n_code, n_pictures):.1f} |")
    n_words, n_code, n_pictures, n_cells = route_size()
    total = minutes(n_words, n_code, n_pictures)
    print(f"\nfirst read: {n_words} words, {n_code} code lines, {n_pictures} pictures, {n_cells} cells: "
          f"{round(total)} min by the rule (words/{WORDS_A_MINUTE} + code lines/{CODE_LINES_A_MINUTE} + "
          f"{MINUTES_A_PICTURE} min a picture; at most {ROUTE_MINUTES})")


def route_sentence() -> str:
    "The route, its size and its minutes, in the words the README uses."
    stops = [f"`{name}`" for name, cells in route() if cells is not None]
    n_words, n_code, n_pictures, n_cells = route_size()
    return (f"{' → '.join(stops)}:\n{n_words:,} words of prose, {n_code:,} code lines and {n_pictures} pictures in "
            f"{n_cells} cells, which the rule makes {round(minutes(n_words, n_code, n_pictures))} minutes.")


def main(argv: list[str]) -> None:
    if "--first-read" in argv:
        return print_first_read()
    if "--route-sentence" in argv:
        return print(route_sentence())
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
