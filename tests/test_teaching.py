"""The tour as a student reads it: every "Try it" is an experiment whose committed output is a picture or a table
and which no assert can stop; every notebook has one door (`## Second read`) before which its first read ends,
and the route of first reads fits two hours by the rule of tools/sizes.py and shows a picture at every stop; the prose speaks of
the kit as it is; every pointer to "notebook NN" names a notebook that exists; every notebook's map row is in the
README."""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from sizes import DOOR, ROUTE_MINUTES, is_door, minutes, route, route_size  # noqa: E402

TOUR = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.stem != "index")
STEMS = {p.stem for p in TOUR}
PREFIXES = {stem.split("_")[0] for stem in STEMS}  # "01", "04b", "11c", ...


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def try_its(path: Path) -> list[tuple[dict, dict]]:
    "(markdown, code) pairs: a markdown cell whose first line is '### Try it' and the code cell after it."
    found = []
    nb_cells = cells(path)
    for i, cell in enumerate(nb_cells):
        if cell["cell_type"] == "markdown" and source(cell).startswith("### Try it"):
            assert i + 1 < len(nb_cells) and nb_cells[i + 1]["cell_type"] == "code", \
                f"{path.name}: a 'Try it' cell must be followed by the code cell of its experiment"
            found.append((cell, nb_cells[i + 1]))
    return found


def shows_a_result(code: dict) -> bool:
    "A picture, an HTML table, or a printed table of several lines."
    for out in code.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data or "text/html" in data:
            return True
        if out.get("output_type") == "stream" and "".join(out.get("text", "")).count("\n") >= 2:
            return True
    return False


def test_at_least_eight_notebooks_invite_an_experiment():
    with_try_it = [p.stem for p in TOUR if try_its(p)]
    assert len(with_try_it) >= 8, with_try_it


@pytest.mark.parametrize("path", [p for p in TOUR if try_its(p)], ids=lambda p: p.stem)
def test_a_try_it_is_an_experiment_without_asserts_that_shows_a_result(path):
    for markdown, code in try_its(path):
        text = source(code)
        assert not re.search(r"^\s*assert\b", text, re.M), \
            f"{path.name}: the 'Try it' cell asserts; a student who changes it would get an AssertionError:\n{text}"
        assert len(source(markdown).splitlines()) >= 2, f"{path.name}: say what to change and what to look for"
        assert shows_a_result(code), \
            f"{path.name}: the committed output of the 'Try it' cell is neither a picture nor a table:\n{text[:200]}"


@pytest.mark.parametrize("path", TOUR, ids=lambda p: p.stem)
def test_one_door_per_notebook(path):
    "The first read ends at one marked door; the old per-cell skip signposts are gone (the door replaces them)."
    doors = [source(c).splitlines()[0] for c in cells(path) if is_door(c)]
    assert len(doors) == 1, f"{path.name}: {len(doors)} doors {doors}; a notebook has exactly one '{DOOR}: ...' cell"
    for cell in cells(path):
        assert not re.search(r"first read\s*:\s*skip", source(cell), re.I), \
            f"{path.name}: a 'First read: skip.' signpost; move what it marks behind the door:\n{source(cell)[:200]}"


ROUTE = route()


def test_the_first_read_fits_two_hours_by_the_rule():
    "words/150 + code lines/30 + half a minute a picture, over every first read of the route."
    n_words, n_code, n_pictures, _ = route_size()
    total = minutes(n_words, n_code, n_pictures)
    assert total <= ROUTE_MINUTES, \
        f"the first read is {total:.0f} min by the rule ({n_words} words, {n_code} code lines, {n_pictures} pictures; " \
        f"at most {ROUTE_MINUTES}): python tools/sizes.py --first-read shows where"


@pytest.mark.parametrize("name, first", [r for r in ROUTE if r[1] is not None], ids=lambda v: v if isinstance(v, str) else "")
def test_every_stop_of_the_route_shows_its_picture(name, first):
    pictures = [o for c in first if c["cell_type"] == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert pictures, f"{name}: no picture before the door; a first reader sees each idea at work"


HISTORY = re.compile(r"\b[Ii]ssue #?\d+|version before this one|used to (crash|fail)|as this notebook first did"
                     r"|\bthis session\b")


@pytest.mark.parametrize("path", [*TOUR, ROOT / "nbs" / "index.ipynb"], ids=lambda p: p.stem)
def test_the_prose_speaks_of_the_kit_as_it_is(path):
    for cell in cells(path):
        found = HISTORY.search(source(cell))
        assert not found, f"{path.name}: {found.group(0)!r} is the project's history, not the kit a student reads"


def test_the_route_starts_at_the_bare_loop():
    first = next(name for name, cs in ROUTE if cs is not None)
    assert first.startswith("01_"), f"the route starts at {first}; 00_checks is a reference, a second read"


@pytest.mark.parametrize("path", [*TOUR, ROOT / "nbs" / "index.ipynb"], ids=lambda p: p.stem)
def test_pointers_name_notebooks_that_exist(path):
    for cell in cells(path):
        if cell["cell_type"] != "markdown":
            continue
        for ref in re.findall(r"[Nn]otebooks? `?(\d\d[a-z]?)\b", source(cell)):
            assert ref in PREFIXES, f"{path.name} points to notebook {ref}, which does not exist: {sorted(PREFIXES)}"


def test_every_notebook_has_a_row_in_the_readme_map():
    readme = (ROOT / "README.md").read_text()
    missing = [stem for stem in STEMS if f"`{stem}`" not in readme]
    assert not missing, f"README.md's map has no row for {missing}: add them to nbs/index.ipynb, then make the README"


def test_the_readme_states_the_route_and_its_size_as_measured():
    "The README's route (the notebooks, in order), its size and its time by the rule are the route's own."
    readme = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"the route is: ((?:`\w+` → )+`\w+`): ([\d,]+) words of prose, ([\d,]+) code lines and "
                      r"([\d,]+) pictures in ([\d,]+) cells, which the rule makes ([\d,]+) minutes", readme)
    assert found, "README.md no longer states the route, its size and its minutes after 'the route is:'"
    on_route = [(name, cs) for name, cs in ROUTE if cs is not None]
    assert re.findall(r"`(\w+)`", found.group(1)) == [name for name, _ in on_route], \
        "README.md's route is not the notebooks that have a first read, in order: fix nbs/index.ipynb, then make the README"
    n_words, n_code, n_pictures, n_cells = route_size()
    measured = (n_words, n_code, n_pictures, n_cells, round(minutes(n_words, n_code, n_pictures)))
    stated = tuple(int(g.replace(",", "")) for g in found.groups()[1:])
    assert stated == measured, (f"README.md says the route is {stated} (words, code lines, pictures, cells, minutes); "
                                f"it measures {measured}: paste python tools/sizes.py --route-sentence into nbs/index.ipynb, "
                                "then make the README")
