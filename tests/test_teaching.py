"""The tour as a student reads it: every "Try it" is an experiment whose committed output is a picture or a table
and which no assert can stop; every "First read: skip." signpost is worded the same way; every pointer to
"notebook NN" names a notebook that exists; every notebook's map row is in the README."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOUR = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.stem != "index")
STEMS = {p.stem for p in TOUR}
PREFIXES = {stem.split("_")[0] for stem in STEMS}  # "01", "04b", "11c", ...
SIGNPOST = "**First read: skip.**"


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
def test_signposts_are_worded_the_same_way(path):
    for cell in cells(path):
        text = source(cell)
        for match in re.finditer(r"first read\s*:", text, re.I):  # a signpost, however it is written
            written = text[max(match.start() - 2, 0):match.start() - 2 + len(SIGNPOST)]
            assert cell["cell_type"] == "markdown" and written == SIGNPOST, \
                f"{path.name}: a signpost reads {written!r}; write it {SIGNPOST!r}"


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
