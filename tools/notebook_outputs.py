"""What the committed notebooks show: outputs kept free of what changes between runs and machines, and their shape.

`tools/run_tour.py --save` writes executed notebooks through `normalise`; `--check` executes them afresh and
compares `output_kinds` of each code cell with the committed ones, and refuses matplotlib's bare figure text."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

REFRESH = "./tools/tour.sh --headless --save"  # the one command that refreshes the committed outputs

WIDGET = "application/vnd.jupyter.widget-view+json"  # a live control: it needs the kernel that made it
BARE_FIGURE = re.compile(r"^<(\w*Figure size [^>]*|matplotlib\.figure\.\w*Figure object at [^>]*)>$")

# Run-to-run and machine-to-machine noise in printed text, and what it becomes in the committed notebook.
_NOISE = [
    (re.compile(r"\b0x[0-9a-f]{6,16}\b"), "0x…"),  # memory addresses in reprs
    (re.compile(r"(\d+\.\d+|\d+(?=\s?(?:ms|µs|us|ns)\b))(\s?)(s|ms|µs|us|ns)\b"), r"…\2\3"),  # timings
    (re.compile(r"(['\"]time['\"]: )[0-9.e+-]+"), r"\1…"),  # the time column of a recorded epoch
    (re.compile(r"\(\+\d+% on an item"), "(+…% on an item"),  # a timing, as a share
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "…"),  # a date and time
    (re.compile(r"(['\"]sha256['\"]: ['\"])[0-9a-f]{64}"), r"\1…"),  # the digest of a file holding the time it was written
]


def _temp_names(text: str) -> str:
    "Temporary paths made by `tempfile` end in 8 random characters: keep the prefix, hide the rest."
    tmp = re.escape(tempfile.gettempdir())
    return re.sub(rf"{tmp}/([A-Za-z_.-]*?)[a-z0-9_]{{8}}(?=[/'\"\s:)]|$)", r"/tmp/\1…", text)


def scrub(text: str, root: str | Path | None = None) -> str:
    "Text as the committed notebook shows it: no addresses, timings, temporary or machine-specific paths."
    if root is not None:
        text = text.replace(str(Path(root).resolve()) + "/", "")
    text = _temp_names(text)
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return text


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def normalise_outputs(outputs: list, root: str | Path | None = None) -> list:
    "One cell's outputs as committed: live widgets dropped, streams merged and scrubbed, no execution counts."
    kept = []
    for out in outputs:
        out = dict(out)
        kind = out["output_type"]
        if kind == "stream":
            text = scrub(_text(out["text"]), root)
            if kept and kept[-1]["output_type"] == "stream" and kept[-1]["name"] == out["name"]:
                kept[-1]["text"] += text
            else:
                kept.append({"name": out["name"], "output_type": "stream", "text": text})
            continue
        if kind in ("display_data", "execute_result"):
            data = {k: v for k, v in out.get("data", {}).items() if k != WIDGET}
            if set(data) <= {"text/plain"} and WIDGET in out.get("data", {}):
                continue  # a widget with nothing else to show: the saved notebook has no kernel to drive it
            if any(k.startswith("image/") for k in data) and BARE_FIGURE.match(_text(data.get("text/plain", "")).strip()):
                del data["text/plain"]  # matplotlib's name for the figure, beside the figure itself: noise
            if "text/plain" in data:
                data["text/plain"] = scrub(_text(data["text/plain"]), root)
            out["data"] = data
            out.pop("transient", None)
            if kind == "execute_result":
                out["execution_count"] = None
        kept.append(out)
    return kept


def normalise(nb, root: str | Path | None = None):
    "The notebook `nb` (nbformat) with every code cell's outputs normalised, in place; returns it."
    nb.metadata.pop("widgets", None)  # the live widgets' state: dropped with their views
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [_as_node(o) for o in normalise_outputs(cell.outputs, root)]
            cell.execution_count = None
    return nb


def _as_node(out: dict):
    import nbformat
    return nbformat.from_dict(out)


def output_kinds(outputs: list) -> list[str]:
    "What a reader sees of one cell, kind by kind: picture, html, text, stderr, error (details may change)."
    kinds = []
    for out in outputs:
        kind = out["output_type"]
        if kind == "stream":
            shown = "stderr" if out["name"] == "stderr" else "text"
        elif kind == "error":
            shown = "error"
        else:
            data = out.get("data", {})
            shown = ("picture" if any(k.startswith("image/") for k in data)
                     else "html" if "text/html" in data or "text/markdown" in data else "text")
        if not (kinds and kinds[-1] == shown == "text"):  # text printed in pieces is one text
            kinds.append(shown)
    return kinds


def bare_figures(outputs: list) -> list[str]:
    "The outputs that are matplotlib's text for a figure with no picture beside it."
    bare = []
    for out in outputs:
        data = out.get("data", {})
        text = _text(data.get("text/plain", ""))
        if BARE_FIGURE.match(text.strip()) and not any(k.startswith("image/") for k in data):
            bare.append(text.strip())
    return bare


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def compare(name: str, committed, fresh) -> list[str]:
    "Why the committed notebook's outputs are not what a fresh run shows (empty when they are)."
    problems = []
    old_cells, new_cells = _code_cells(committed), _code_cells(fresh)
    if [c.source for c in old_cells] != [c.source for c in new_cells]:
        return [f"{name}: its code cells differ from the executed copy (compare the same notebook)"]
    for number, (old, new) in enumerate(zip(old_cells, new_cells), start=1):
        first_line = old.source.strip().splitlines()[0][:60] if old.source.strip() else ""
        for text in bare_figures(new.outputs):
            problems.append(f"{name}, code cell {number} ({first_line!r}): shows {text!r} instead of a picture; "
                            f"give what it shows a _repr_png_ (e.g. a FigurePlot, or a figure from FigurePlot._figure)")
        was, now = output_kinds(old.outputs), output_kinds(new.outputs)
        if was != now:
            problems.append(f"{name}, code cell {number} ({first_line!r}): committed outputs {was or 'none'}, "
                            f"a fresh run gives {now or 'none'}")
    return problems
