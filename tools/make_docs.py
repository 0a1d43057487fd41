"""Build the HTML book of the tour into settings.ini's `doc_path` (`_docs/`), from the committed notebooks.

Usage: make_docs.py [OUT_DIR]   (OUT_DIR: new, empty, or a book this tool wrote before; it is emptied first)

- `index.html`: nbs/index.ipynb (the map), its notebook and module names linked;
- one page per notebook, as JupyterLab shows it with its committed outputs (nbconvert's lab template), with
  previous/next navigation along the first-read route (`tools/sizes.py`), links from each stop to the deep dives
  read beside it (a deep dive's page leads back to its stop, and on to the next), and a link to its module;
- `api/<module>.html`: each module's exported names, their signatures and docstrings, and the comments on their
  parameters (what nbdev's `show_doc` gives).

Math in the markdown (`$…$`, `$$…$$`) becomes MathML when the book is built (latex2mathml), which the browser draws
itself: the pages load no script and fetch nothing from the network.

The notebooks are not executed: the book shows what `./tools/tour.sh --headless --save` wrote into them."""
from __future__ import annotations

import configparser
import copy
import html
import importlib
import inspect
import json
import logging
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import nbformat
from fastcore.docments import docments
from jinja2 import pass_context
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath, MathInlineParser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sizes import route  # noqa: E402  the first-read route: which notebooks are stops, in reading order

TEMPLATES = Path(__file__).resolve().parent / "book"
DEFAULT_EXP_CELL = re.compile(r"#\|\s*default_exp\s+\S+")  # a cell that only names the module the notebook exports


def settings() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / "settings.ini")
    return config["DEFAULT"]


def module_of(nb) -> str | None:
    "The module a notebook exports (`#| default_exp NAME`), as `looplab.NAME`."
    for cell in nb.cells:
        found = re.search(r"^#\|\s*default_exp\s+(\S+)", cell.source, re.M) if cell.cell_type == "code" else None
        if found:
            return f"{settings()['lib_name']}.{found.group(1)}"
    return None


def title_of(nb, fallback: str) -> str:
    "The notebook's first heading."
    for cell in nb.cells:
        found = re.search(r"^#+\s+(.+)$", cell.source, re.M) if cell.cell_type == "markdown" else None
        if found:
            return re.sub(r"[`*_]", "", found.group(1)).strip()
    return fallback


def link(href: str, text: str, rel: str = "") -> str:
    rel_attr = f' rel="{rel}"' if rel else ""
    return f'<a href="{html.escape(href)}"{rel_attr}>{html.escape(text)}</a>'


def nav(root: str, prev: tuple[str, str] | None, next_: tuple[str, str] | None, module: str | None,
        where: str, dives: list[tuple[str, str]] = ()) -> str:
    "The book's navigation bar: the map, previous and next page, the deep dives read beside this page, its module."
    parts = [f'<span class="book-home">{link(root + "index.html", "looplab: the map")}</span>']
    parts.append(f'<span class="book-prev">{"← " + link(prev[0], prev[1], "prev") if prev else ""}</span>')
    parts.append(f'<span class="book-next">{link(next_[0], next_[1], "next") + " →" if next_ else ""}</span>')
    if dives:
        parts.append('<span class="book-dives">deep dives here: '
                     + ", ".join(link(href, text) for href, text in dives) + "</span>")
    if module:
        parts.append(f'<span class="book-module">module {link(root + "api/" + module + ".html", module)}</span>')
    return f'<nav class="book-nav book-nav-{where}">{"".join(parts)}</nav>'


def link_names(body: str, stems: set[str], modules: set[str], root: str) -> str:
    "Turn inline code that names a notebook or a module into a link to its page; a notebook's `.ipynb` link to its page."
    def page_href(match: re.Match) -> str:
        return f'href="{root}{match.group(1)}.html"' if match.group(1) in stems else match.group(0)
    body = re.sub(r'href="(?:\./)?([A-Za-z0-9_]+)\.ipynb"', page_href, body)

    def replace(match: re.Match) -> str:
        if match.group(1) is None:  # a whole link: its code is already linked
            return match.group(0)
        name = match.group(1)
        if name in stems:
            return f'<a href="{root}{name}.html"><code>{name}</code></a>'
        if name in modules:
            return f'<a href="{root}api/{name}.html"><code>{name}</code></a>'
        return match.group(0)
    return re.sub(r"<a\b[^>]*>.*?</a>|<code>([A-Za-z0-9_.]+)</code>", replace, body, flags=re.S)


# --- math as MathML -------------------------------------------------------------------------------------------

# `$…$` is math when the `$` that opens it is followed by a non-space and the one that closes it follows a non-space
# and is not followed by a digit (pandoc's rule): "$5 and $10" stays money; `\$` is a literal dollar; a code span
# or block is never read for math.
INLINE_MATH = r"(?s:(?<![$\\])\$(?=[^\s$])(?P<math_inline_tex>.+?)(?<=[^\s$\\])\$(?!\d))"
UNKNOWN_COMMAND = re.compile(r"<m(?:i|o|n|text)>\\[A-Za-z]+")  # a command latex2mathml passed through as text
TEXT_ESCAPE = re.compile(r"\\([_%$&#{}])")  # `\_` in `\text{fan\_in}` is an underscore


def tex_to_mathml(tex: str, display: str = "inline") -> str:
    "`tex` (the inside of `$…$`, or of `$$…$$` with `display='block'`) as a MathML `<math>` element."
    mathml = latex_to_mathml(tex.strip(), display=display)
    unknown = UNKNOWN_COMMAND.search(mathml)
    if unknown:
        raise ValueError(f"the math ${tex}$ uses {unknown.group(0).split('>')[1]}, which latex2mathml cannot turn "
                         "into MathML: write it with commands it knows (\\frac, \\text, \\cdot, ^, _, ...)")
    return re.sub(r"<mtext>.*?</mtext>", lambda text: TEXT_ESCAPE.sub(r"\1", text.group(0)), mathml)


class _BookMathParser(MathInlineParser):
    "nbconvert's inline parser with pandoc's rule for `$…$`."
    SPECIFICATION = {**MathInlineParser.SPECIFICATION, "inline_math_tex": INLINE_MATH}


class MathMLRenderer(IPythonRenderer):
    "nbconvert's markdown renderer, with TeX turned into MathML instead of left for MathJax."
    def inline_math(self, body: str) -> str:
        return tex_to_mathml(body)

    def block_math(self, body: str) -> str:
        return tex_to_mathml(body, display="block")

    def latex_environment(self, name: str, body: str) -> str:
        return tex_to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display="block")


def markdown_html(source: str, **renderer_options) -> str:
    "Markdown as HTML, its math as MathML."
    renderer = MathMLRenderer(escape=False, **renderer_options)
    return MarkdownWithMath(renderer=renderer, inline=_BookMathParser(hard_wrap=False)).render(source)


class BookExporter(HTMLExporter):
    "nbconvert's HTML exporter, whose markdown cells and outputs carry their math as MathML."
    @pass_context
    def markdown2html(self, context, source):
        cell = context.get("cell", {})
        path = context.get("resources", {}).get("metadata", {}).get("path", "")
        return markdown_html(source, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
                             path=path, anchor_link_text=self.anchor_link_text,
                             exclude_anchor_links=self.exclude_anchor_links, **self.lexer_options)


def exporter() -> HTMLExporter:
    exp = BookExporter(template_name="lab", template_file="page.html.j2", extra_template_paths=[str(TEMPLATES)],
                        exclude_input_prompt=True, exclude_output_prompt=True, embed_images=True)
    exp.log.setLevel(logging.ERROR)  # not a warning per picture that its output carries no alt text
    return exp


def notebook_page(exp: HTMLExporter, nb, name: str, book: dict) -> str:
    "The notebook as a page; its `#| default_exp` cell is left out (the navigation bar names the module)."
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if not DEFAULT_EXP_CELL.fullmatch(c.source.strip()) or c.cell_type != "code"]
    body, _ = exp.from_notebook_node(nb, resources={"metadata": {"name": name}, "book": book})
    return body


# --- the API pages --------------------------------------------------------------------------------------------

def _md(text: str) -> str:
    return markdown_html(inspect.cleandoc(text)) if text else ""


def _signature(obj) -> str:
    "The signature as written, annotations included (the modules use `from __future__ import annotations`)."
    try:
        return str(inspect.signature(obj, eval_str=True))
    except (NameError, SyntaxError):  # an annotation that names something imported only for type checkers
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _params_table(obj) -> str:
    "The comments on `obj`'s parameters (docments), as a table; empty when none has one."
    try:
        with warnings.catch_warnings():  # docments also parses numpy-style docstrings, some of torch's inherited ones
            warnings.simplefilter("ignore")
            docs = docments(obj, full=True)
    except Exception:  # not a function fastcore can read (a builtin, a C extension)
        return ""
    rows = [(name, info) for name, info in docs.items() if name != "return" and info.get("docment")]
    if not rows:
        return ""
    cells = "".join(f"<tr><td><code>{html.escape(n)}</code></td><td>{html.escape(str(i.get('default', '')))}"
                    f"</td><td>{html.escape(i['docment'])}</td></tr>" for n, i in rows)
    return f'<table class="book-params"><tr><th>parameter</th><th>default</th><th>meaning</th></tr>{cells}</table>'


def _entry(name: str, obj, level: int = 3, anchor: str = "") -> str:
    kind = "class" if inspect.isclass(obj) else "def" if callable(obj) else ""
    signature = _signature(obj) if kind else ""
    heading = f"<h{level} id=\"{html.escape(anchor or name)}\"><code>{kind} {html.escape(name)}"
    heading += f"{html.escape(signature)}</code></h{level}>"
    if not kind:  # a constant: its value
        value = repr(obj)
        heading = (f"<h{level} id=\"{html.escape(anchor or name)}\"><code>{html.escape(name)} = "
                   f"{html.escape(value if len(value) <= 200 else value[:200] + ' …')}</code></h{level}>")
        return heading
    return heading + _md(inspect.getdoc(obj) or "") + _params_table(obj)


def _methods(cls) -> list[tuple[str, object]]:
    "The public methods and properties a class defines itself (not those it inherits)."
    found = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            found.append((name, member.fget if isinstance(member, property) else member))
    return found


def api_page(module_name: str, source_nb: str, title: str) -> str:
    "A module's page: its docstring, then each exported name with signature, docstring and parameter comments."
    module = importlib.import_module(module_name)
    parts = [f'<h1><code class="book-module-name">{module_name}</code></h1>', _md(module.__doc__ or ""),
             f'<p>Built in {link("../" + source_nb + ".html", title)}.</p>']
    names = list(getattr(module, "__all__", []))
    if names:
        parts.append("<ul class=\"book-toc\">" + "".join(
            f'<li><a href="#{html.escape(n)}"><code>{html.escape(n)}</code></a></li>' for n in names) + "</ul>")
    for name in names:
        obj = getattr(module, name)
        parts.append('<section class="book-api">' + _entry(name, obj))
        if inspect.isclass(obj):
            for method, member in _methods(obj):
                parts.append(_entry(f"{name}.{method}", member, level=4, anchor=f"{name}.{method}"))
        parts.append("</section>")
    return "\n".join(parts)


def html_page(title: str, body: str, root: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f'<link rel="stylesheet" href="{root}book.css">\n</head>\n<body class="book-plain">\n<main>\n{body}\n'
            f'</main>\n</body>\n</html>\n')


# --- the book -------------------------------------------------------------------------------------------------

READ_AFTER = re.compile(r"read (?:it )?after (?:notebook )?`?(\d\d[a-z]?)((?:_[a-z0-9]+)*)")


def route_stops() -> list[str]:
    "The notebooks with a first read, in reading order: the pages the book's previous/next links walk."
    return [stem for stem, cells in route() if cells is not None]


def stop_of(stem: str, nb, stops: list[str]) -> str:
    "The route stop a deep dive is read beside: the one its opening names ('read after …'), else the last stop before it."
    opening = " ".join(c.source for c in nb.cells[:4] if c.cell_type == "markdown")
    found = READ_AFTER.search(opening)
    if found:
        name = found.group(1) + found.group(2)
        named = [s for s in stops if s == name] or [s for s in stops if s.split("_")[0] == found.group(1)]
        if len(named) == 1:
            return named[0]
    before = [s for s in stops if s < stem]
    return before[-1] if before else "index"


def book_navigation(notebooks: dict) -> dict[str, dict]:
    "For each page (the map `index`, each notebook): its `prev` and `next` page and the deep `dives` read beside it."
    stops = route_stops()
    walk = ["index"] + stops
    dives = {stop: [] for stop in walk}
    for stem in sorted(notebooks):
        if stem != "index" and stem not in stops:
            dives[stop_of(stem, notebooks[stem], stops)].append(stem)
    pages = {}
    for i, stem in enumerate(walk):
        pages[stem] = {"prev": walk[i - 1] if i > 0 else None, "next": walk[i + 1] if i + 1 < len(walk) else None,
                       "dives": dives[stem]}
    for stop, beside in dives.items():
        for stem in beside:  # back to its stop, on along the route
            pages[stem] = {"prev": stop, "next": pages[stop]["next"], "dives": []}
    return pages


KEYS = "keys"  # the answer keys of the exercises: nbs/keys/, an appendix of the book (keys/ beside the pages)


def appendix(exp: HTMLExporter, out: Path, keys: list[Path], stems: set[str], modules: set[str]) -> list[Path]:
    "A page per answer key, in route order, in `out/keys/`: each reference collapsed until opened, as in JupyterLab."
    (out / KEYS).mkdir()
    notebooks = [nbformat.read(p, as_version=4) for p in keys]
    titles = [title_of(nb, p.stem) for p, nb in zip(keys, notebooks)]
    written = []
    for i, (path, nb) in enumerate(zip(keys, notebooks)):
        prev = (f"{keys[i - 1].stem}.html", titles[i - 1]) if i > 0 else None
        next_ = (f"{keys[i + 1].stem}.html", titles[i + 1]) if i + 1 < len(keys) else None
        book = {"root": "../", "nav_top": nav("../", prev, next_, None, "top"),
                "nav_bottom": nav("../", prev, next_, None, "bottom")}
        page = notebook_page(exp, nb, titles[i], book)
        target = out / KEYS / f"{path.stem}.html"
        target.write_text(link_names(page, stems, modules, "../"), encoding="utf-8")
        written.append(target)
    return written


def refuse_to_empty(out: Path) -> None:
    "Stop unless `out` is new, empty, or a book this tool wrote (its `pages.json`): building empties the folder first."
    if out.resolve() == (ROOT / settings()["doc_path"]).resolve():
        return  # the book's own folder
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "pages.json").is_file())):
        raise SystemExit(f"{out} is not a folder this tool wrote a book into (it has no pages.json), and building "
                         "empties the folder first: pass a new or empty folder, or the book's own (_docs/)")


def build(out: Path) -> list[Path]:
    "Write the book into `out` (emptied first); return the pages written."
    nbs = sorted(p for p in (ROOT / settings()["nbs_path"]).glob("*.ipynb") if not p.name.startswith(("_", ".")))
    index = [p for p in nbs if p.stem == "index"]
    chapters = [p for p in nbs if p.stem != "index"]
    if not index or not chapters:
        raise SystemExit(f"no index.ipynb or no notebooks in {settings()['nbs_path']}/")
    refuse_to_empty(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "api").mkdir(parents=True)
    shutil.copy(TEMPLATES / "book.css", out / "book.css")
    notebooks = {p.stem: nbformat.read(p, as_version=4) for p in index + chapters}
    keys = sorted((ROOT / settings()["nbs_path"] / KEYS).glob("*.ipynb"))
    titles = {stem: title_of(nb, stem) for stem, nb in notebooks.items()}
    modules = {stem: module_of(nb) for stem, nb in notebooks.items()}
    stems, module_names = set(notebooks), {m for m in modules.values() if m}
    navigation = book_navigation(notebooks)
    order = ["index"] + [s for s in route_stops() if s in notebooks]
    order += [d for s in order for d in navigation[s]["dives"]]  # every page once: the route, then beside it
    exp = exporter()
    written = []
    for stem in order:
        where = navigation[stem]
        prev = (f"{where['prev']}.html", titles[where["prev"]]) if where["prev"] else None
        next_ = (f"{where['next']}.html", titles[where["next"]]) if where["next"] else None
        dives = [(f"{d}.html", d) for d in where["dives"]]
        book = {"root": "", "nav_top": nav("", prev, next_, modules[stem], "top", dives),
                "nav_bottom": nav("", prev, next_, modules[stem], "bottom", dives)}
        page = notebook_page(exp, notebooks[stem], titles[stem], book)
        if stem == "index":
            api_list = "".join(f"<li>{link('api/' + modules[s] + '.html', modules[s])} — {link(s + '.html', titles[s])}</li>"
                               for s in sorted(order) if modules[s])
            key_list = "".join(f"<li>{link(KEYS + '/' + p.stem + '.html', title_of(nbformat.read(p, as_version=4), p.stem))}"
                               f"</li>" for p in keys)
            page = page.replace(book["nav_bottom"], f'<section class="book-api-index"><h2>The modules</h2>'
                                f'<ul>{api_list}</ul></section><section class="book-appendix"><h2>Appendix: the '
                                f'answer keys of the exercises</h2><ul>{key_list}</ul></section>' + book["nav_bottom"])
        path = out / ("index.html" if stem == "index" else f"{stem}.html")
        path.write_text(link_names(page, stems, module_names, ""), encoding="utf-8")
        written.append(path)
    sys.path.insert(0, str(ROOT))  # document the package of this checkout
    api_order = [s for s in sorted(order) if modules[s]]
    for i, stem in enumerate(api_order):
        name = modules[stem]
        prev = (f"{modules[api_order[i - 1]]}.html", modules[api_order[i - 1]]) if i > 0 else None
        next_ = (f"{modules[api_order[i + 1]]}.html", modules[api_order[i + 1]]) if i + 1 < len(api_order) else None
        body = nav("../", prev, next_, None, "top") + api_page(name, stem, titles[stem]) + nav("../", prev, next_, None, "bottom")
        path = out / "api" / f"{name}.html"
        path.write_text(link_names(html_page(name, body, "../"), stems, module_names, "../"), encoding="utf-8")
        written.append(path)
    written += appendix(exp, out, keys, stems, module_names)
    (out / "pages.json").write_text(json.dumps([str(p.relative_to(out)) for p in written], indent=1))
    return written


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        raise SystemExit(f"make_docs.py takes one argument, the book's folder, got {sys.argv[1:]}; usage: "
                         "make_docs.py [OUT_DIR]")
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / settings()["doc_path"]
    started = time.perf_counter()
    pages = build(target)
    print(f"{len(pages)} pages in {target}/ in {time.perf_counter() - started:.1f} s: open {target / 'index.html'}")
