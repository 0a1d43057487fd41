"""The book reads in the route's order: its "next" walks the first-read route (`tools/sizes.py`), each stop links
the deep dives read beside it, and a deep dive leads back to its stop and on along the route. Each stop's "Next on
the route" names the stop that follows it, as a name the book turns into a link. Built from the notebooks alone:
no browser (tests/test_book.py reads the built pages in Chromium)."""
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_docs  # noqa: E402

NOTEBOOKS = {p.stem: nbformat.read(p, as_version=4) for p in (ROOT / "nbs").glob("*.ipynb")}
NAV = make_docs.book_navigation(NOTEBOOKS)
STOPS = make_docs.route_stops()


def test_next_walks_the_route_from_the_map():
    walk, page = [], "index"
    while NAV[page]["next"]:
        page = NAV[page]["next"]
        walk.append(page)
    assert walk == STOPS, walk
    assert all(NAV[stop]["prev"] == ([ "index"] + STOPS)[i] for i, stop in enumerate(STOPS))


def test_every_deep_dive_hangs_beside_one_stop_and_leads_back_and_on():
    dives = [d for page in ["index", *STOPS] for d in NAV[page]["dives"]]
    assert sorted(dives) == sorted(set(NOTEBOOKS) - set(STOPS) - {"index"}), "each notebook off the route, once"
    for page in ["index", *STOPS]:
        for dive in NAV[page]["dives"]:
            assert NAV[dive]["prev"] == page and NAV[dive]["next"] == NAV[page]["next"], (dive, NAV[dive])


@pytest.mark.parametrize("dive", sorted(set(NOTEBOOKS) - set(STOPS) - {"index"}))
def test_a_deep_dive_hangs_beside_the_stop_its_opening_names(dive):
    opening = " ".join(c.source for c in NOTEBOOKS[dive].cells[:4] if c.cell_type == "markdown")
    named = re.search(r"read (?:it )?after `(\w+)`", opening)
    if named and named.group(1) in STOPS:
        assert NAV[dive]["prev"] == named.group(1), (dive, NAV[dive]["prev"], named.group(0))


def next_line(stem: str) -> str | None:
    "The text from 'Next on the route' to the end of its paragraph, in the stop's first read."
    for cell in NOTEBOOKS[stem].cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("## Second read"):
            return None
        found = re.search(r"Next on the route(.*?)(?:\n\n|$)", cell.source, re.S) if cell.cell_type == "markdown" else None
        if found:
            return found.group(1)
    return None


@pytest.mark.parametrize("stop", STOPS[:-1])
def test_next_on_the_route_names_the_next_stop_as_a_link(stop):
    "A backticked notebook name, or a Markdown link to it, which JupyterLab, GitHub or the book follows."
    line = next_line(stop)
    assert line is not None, f"{stop}: no 'Next on the route' line before its door"
    following = NAV[stop]["next"]
    assert f"`{following}`" in line or f"]({following}.ipynb)" in line, \
        f"{stop}: 'Next on the route{line[:80]}' does not name `{following}`, the route's next stop"
