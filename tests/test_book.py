"""The HTML book of the tour (`./tools/docs.sh`) in a real browser: built from the committed notebooks, served on
127.0.0.1 by a thread of this process, and read by headless Chromium page by page.

Every page loads, every picture on it has loaded (`naturalWidth > 0`) and there are as many as the notebook's
committed outputs hold, no page shows matplotlib's bare `<Figure size ...>` text, every link between pages resolves,
and each notebook page links to the previous and the next one along the first-read route, and to the deep dives
read beside it. The math is drawn as math (MathML written when the book
is built): no page's prose shows `$…$` TeX, and no page asks for anything but the book's own files. Screenshots of
the index, 06's and 10's pages, and of 09's math, go to test-output/book/."""
import functools
import http.server
import json
import os
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import nbformat
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_docs  # noqa: E402
from helpers import chromium_context, require_chromium  # noqa: E402

OUT = ROOT / "test-output" / "book"
SCREENSHOTS = {"index.html": "index.png", "06_schedules.html": "06_schedules.png", "10_gan.html": "10_gan.png"}

PAGE_JS = """() => ({
  images: Array.from(document.images).map(img => ({src: img.src.slice(0, 40), complete: img.complete,
                                                    width: img.naturalWidth})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
  prev: document.querySelector('nav.book-nav-top a[rel=prev]')?.getAttribute('href') || null,
  next: document.querySelector('nav.book-nav-top a[rel=next]')?.getAttribute('href') || null,
  outputs: Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(e => e.innerText).join(' '),
})"""




@pytest.fixture(scope="module")
def book(tmp_path_factory):
    "The book, built into a temporary folder, served on 127.0.0.1; yields (base URL, the pages' paths)."
    out = tmp_path_factory.mktemp("book")
    pages = [str(p.relative_to(out)) for p in make_docs.build(out)]
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", pages
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports what matters; no access log on stderr
        pass


def committed_pictures(stem: str) -> int:
    "How many pictures the committed notebook's outputs hold."
    nb = nbformat.read(ROOT / "nbs" / f"{stem}.ipynb", as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if any(k.startswith("image/") for k in o.get("data", {})))


def test_book_pages_render_with_their_pictures_and_links(book):
    require_chromium("the book's browser test")
    base, pages = book
    chapters = sorted(p for p in pages if "/" not in p and p != "index.html")
    assert len(chapters) == len([p for p in (ROOT / "nbs").glob("*.ipynb") if p.stem != "index"]), chapters
    assert "index.html" in pages and any(p.startswith("api/") for p in pages)
    OUT.mkdir(parents=True, exist_ok=True)
    problems, seen, links = [], {}, set()
    with chromium_context(str(OUT / "chromium-profile"), viewport={"width": 1200, "height": 900}) as context:
        page = context.new_page()
        for name in pages:
            response = page.goto(base + name, wait_until="load")
            if response is None or response.status != 200:
                problems.append(f"{name}: HTTP {response.status if response else 'no response'}")
                continue
            info = page.evaluate(PAGE_JS)
            seen[name] = info
            broken = [img["src"] for img in info["images"] if not img["complete"] or img["width"] == 0]
            if broken:
                problems.append(f"{name}: {len(broken)} pictures did not load: {broken[:3]}")
            if "<Figure size" in info["outputs"]:
                problems.append(f"{name}: shows matplotlib's bare '<Figure size ...>' text")
            for href in info["links"]:
                target, _ = urldefrag(urljoin(base + name, href))
                if urlparse(target).netloc == urlparse(base).netloc:
                    links.add(target)
            if name in SCREENSHOTS:  # the top of the index; the last picture of a notebook page
                if name != "index.html" and info["images"]:
                    page.evaluate("() => document.images[document.images.length - 1].scrollIntoView()")
                page.screenshot(path=str(OUT / SCREENSHOTS[name]), full_page=False)
        for target in sorted(links):  # every link between pages resolves
            response = page.request.get(target)
            if response.status != 200:
                problems.append(f"a link to {target} gives HTTP {response.status}")
    assert not problems, "\n".join(problems)
    notebooks = {p.stem: nbformat.read(p, as_version=4) for p in (ROOT / "nbs").glob("*.ipynb")}
    navigation = make_docs.book_navigation(notebooks)  # next along the route; a deep dive back to its stop, and on
    assert navigation["index"]["next"] == "01_bare_loop", navigation["index"]
    order = [f"{stem}.html" for stem in navigation]
    for stem, where in navigation.items():
        name = f"{stem}.html"
        assert seen[name]["prev"] == (f"{where['prev']}.html" if where["prev"] else None), (name, seen[name]["prev"])
        assert seen[name]["next"] == (f"{where['next']}.html" if where["next"] else None), (name, seen[name]["next"])
        assert all(f"{dive}.html" in seen[name]["links"] for dive in where["dives"]), (name, where["dives"])
    for name in chapters:  # every picture the notebook carries is on its page
        expected = committed_pictures(name[:-len(".html")])
        assert len(seen[name]["images"]) >= expected, (name, len(seen[name]["images"]), expected)
    drawn = [name for name in chapters if seen[name]["images"]]
    assert len(drawn) >= 15, f"only {len(drawn)} notebook pages carry pictures: refresh the outputs"
    (OUT / "pages.json").write_text(json.dumps({n: len(seen[n]["images"]) for n in order}, indent=1))


def test_book_api_pages_list_every_exported_name(book):
    "Each module's page names everything in its __all__, with a signature for each function and class."
    import importlib
    import urllib.request
    base, pages = book
    for name in [p for p in pages if p.startswith("api/")]:
        module = importlib.import_module(name[len("api/"):-len(".html")])
        body = urllib.request.urlopen(base + name).read().decode()
        for export in module.__all__:
            assert f'id="{export}"' in body, (name, export)


def test_an_exercise_solution_is_hidden_until_opened(book):
    "A cell collapsed in JupyterLab (`jupyter.source_hidden`: 04b's exercise solution) is collapsed in the book too."
    require_chromium("the book's browser test")
    base, _ = book
    with chromium_context(str(OUT / "chromium-profile-hidden")) as context:
        page = context.new_page()
        page.goto(base + "04b_learner_rules.html", wait_until="load")
        solution = page.get_by_text("Skips backward and step for a training batch")
        assert page.locator("details.book-hidden-source").count() == 1
        assert not solution.is_visible()
        page.locator("details.book-hidden-source > summary").click()
        assert solution.is_visible()


# A page's prose: its text without code (cell inputs, code spans and blocks, printed outputs) and without the math
# already drawn; what is left must hold no TeX between dollars.
PROSE_JS = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, math, script, style, .jp-CodeCell .jp-InputArea').forEach(e => e.remove());
  const math = Array.from(document.querySelectorAll('math'));
  return {prose: body.textContent,
          math: math.map(m => ({mathml: m instanceof MathMLElement, width: m.getBoundingClientRect().width,
                                text: m.textContent}))};
}"""
RAW_TEX = re.compile(make_docs.INLINE_MATH.replace("?P<math_inline_tex>", "") + r"|\$\$.+?\$\$", re.S)


def math_spans(stem: str) -> int:
    "How many `$…$` and `$$…$$` spans the notebook's markdown holds, code spans left out."
    nb = nbformat.read(ROOT / "nbs" / f"{stem}.ipynb", as_version=4)
    text = "\n".join(re.sub(r"`[^`]*`", "", c.source) for c in nb.cells if c.cell_type == "markdown")
    return len(RAW_TEX.findall(text))


def test_the_book_writes_math_as_mathml_and_leaves_dollars_alone():
    "TeX between dollars becomes MathML; money, an escaped dollar and code keep their dollars; unknown TeX is refused."
    html = make_docs.markdown_html("Below $2^{-14}$ or $1/(3\\,\\text{fan\\_in})$:\n\n$$\\frac{a}{b_i}$$")
    assert html.count("<math ") == 3 and 'display="block"' in html and "$" not in html
    assert "<msup><mn>2</mn><mrow><mo>&#x02212;</mo><mn>14</mn></mrow></msup>" in html
    assert "<mtext>fan_in</mtext>" in html and "<mfrac>" in html
    money = make_docs.markdown_html("It costs $5 and $10, or \\$3; run `echo $HOME $PATH` or\n\n```\nx = \"$a$\"\n```")
    assert "<math" not in money and "It costs $5 and $10, or $3" in money
    assert "<code>echo $HOME $PATH</code>" in money and "$a$" in money
    with pytest.raises(ValueError, match=r"uses \\foo, which latex2mathml cannot turn into MathML"):
        make_docs.markdown_html("the $\\foo x$ here")


def test_the_book_refuses_to_empty_a_folder_it_did_not_write(tmp_path):
    "Building empties its folder first: a folder of other files, or a file, is refused before anything is removed."
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    for out in (mine, mine / "keep.txt"):
        with pytest.raises(SystemExit, match="has no pages.json.*pass a new or empty folder"):
            make_docs.build(out)
    assert (mine / "keep.txt").read_text() == "mine"
    (tmp_path / "book" / "old").mkdir(parents=True)  # a book written before: its pages.json says so
    (tmp_path / "book" / "pages.json").write_text("[]")
    make_docs.refuse_to_empty(tmp_path / "book")  # no refusal
    make_docs.refuse_to_empty(tmp_path / "new")


def test_book_math_renders_and_nothing_is_fetched_from_the_network(book):
    "No page's prose shows raw `$…$` TeX; 09's page draws its math as MathML; every request stays on the book's server."
    require_chromium("the book's browser test")
    base, pages = book
    OUT.mkdir(parents=True, exist_ok=True)
    requests, raw, drawn = [], {}, {}
    with chromium_context(str(OUT / "chromium-profile-math"), viewport={"width": 1200, "height": 900}) as context:
        page = context.new_page()
        page.on("request", lambda request: requests.append(request.url))
        for name in pages:
            page.goto(base + name, wait_until="load")
            info = page.evaluate(PROSE_JS)
            found = RAW_TEX.findall(info["prose"])
            if found:
                raw[name] = found[:3]
            drawn[name] = info["math"]
        page.goto(base + "09_mixed_precision.html", wait_until="load")
        cells = page.locator(".jp-MarkdownCell")
        counts = [cells.nth(i).locator("math").count() for i in range(cells.count())]
        cells.nth(counts.index(max(counts))).screenshot(path=str(OUT / "09_math.png"))
    assert not raw, f"pages showing TeX as text: {raw}"
    outside = [url for url in requests if urlparse(url).scheme not in ("data", "about", "blob")
               and urlparse(url).netloc != urlparse(base).netloc]
    assert not outside, f"the book fetched from the network: {outside[:5]}"
    math = drawn["09_mixed_precision.html"]
    assert len(math) == math_spans("09_mixed_precision") >= 20, (len(math), math_spans("09_mixed_precision"))
    assert all(m["mathml"] and m["width"] > 0 for m in math), [m for m in math if not m["width"]][:3]
    assert math[0]["text"] == "2\u221214"  # $2^{-14}$: a 2 with a raised minus 14
    for name in pages:  # every notebook's math is drawn, as many elements as it has spans
        if "/" not in name and name != "index.html":
            assert len(drawn[name]) == math_spans(name[:-len(".html")]), name


def test_the_answer_keys_are_an_appendix_with_each_reference_hidden(book):
    "Each answer key (nbs/keys/) has a page the index lists; its references are collapsed until opened."
    require_chromium("the book's browser test")
    base, pages = book
    keys = sorted(p.stem for p in (ROOT / "nbs" / "keys").glob("*.ipynb"))
    assert keys and sorted(p[len("keys/"):-len(".html")] for p in pages if p.startswith("keys/")) == keys
    with chromium_context(str(OUT / "chromium-profile-keys")) as context:
        page = context.new_page()
        page.goto(base + "index.html", wait_until="load")
        listed = page.locator("section.book-appendix a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert listed == [f"keys/{stem}.html" for stem in keys]
        page.goto(base + "keys/01_bare_loop.html", wait_until="load")
        reference = page.get_by_text("One epoch of the five-line loop: for every batch")
        assert page.locator("details.book-hidden-source").count() >= 1 and not reference.is_visible()
        page.locator("details.book-hidden-source > summary").first.click()
        assert reference.is_visible()
