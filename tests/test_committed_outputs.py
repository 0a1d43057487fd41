"""What the committed notebooks show a reader: no picture twice, and no raw warning.

A cell that follows a live run and ends with the plot object again shows the same chart twice: once as the live
figure's last draw, once as the object's repr. The two PNGs differ in their bytes (one is blitted, the other drawn
afresh), so a picture is compared by its pixels: two pictures of a notebook are the same when they have the same
size and almost every pixel agrees. Measured on the tour: a chart and its repr differ in at most 0.03 % of their
pixels; the closest pair of pictures that are meant to differ (12_checkpoint's uninterrupted run against the resumed
one, a few dots apart) in 0.8 %. The bound, 0.1 %, lies between.

A raw warning (`path:line: RuntimeWarning: ...` and its source line) is the kit or a library talking past the
lesson: a cell that expects one catches it and says what it means."""
import base64
import io
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

NBS = Path(__file__).resolve().parent.parent / "nbs"
NOTEBOOKS = sorted(p for p in NBS.glob("*.ipynb") if not p.name.startswith(("_", ".")))
SAME_PICTURE = 0.001  # the largest share of pixels that may differ (by more than 32 grey levels) in one picture
RAW_WARNING = re.compile(r"\b\w*Warning: ")


def pictures(nb: dict) -> list[tuple[int, str]]:
    "(code cell number, base64 PNG) of every picture the notebook's committed outputs show, in order."
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    found = []
    for number, cell in enumerate(code_cells, start=1):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png is not None:
                found.append((number, "".join(png) if isinstance(png, list) else png))
    return found


def pixels(png: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("L"), dtype=np.int16)


def same_picture(a: np.ndarray, b: np.ndarray) -> bool:
    "Whether two pictures show the same thing: one size, and under SAME_PICTURE of their pixels differ visibly."
    return a.shape == b.shape and (np.abs(a - b) > 32).mean() < SAME_PICTURE


def repeated_pictures(nb: dict) -> list[str]:
    "Each pair of pictures in `nb` that show the same thing, as 'code cells i and j'."
    shown = pictures(nb)
    decoded = [pixels(png) for _, png in shown]
    repeats = []
    for (i, (cell_a, png_a)), (j, (cell_b, png_b)) in itertools.combinations(enumerate(shown), 2):
        if png_a == png_b or same_picture(decoded[i], decoded[j]):
            where = f"code cell {cell_a}" if cell_a == cell_b else f"code cells {cell_a} and {cell_b}"
            repeats.append(f"{where} ({'identical PNGs' if png_a == png_b else 'the same pixels'})")
    return repeats


def raw_warnings(nb: dict) -> list[str]:
    "The lines of stream outputs that are a raw warning, with their code cell number."
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    found = []
    for number, cell in enumerate(code_cells, start=1):
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
                found.extend(f"code cell {number}: {line.strip()[:160]}" for line in text.splitlines()
                             if RAW_WARNING.search(line))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_picture_is_shown_twice(path):
    repeats = repeated_pictures(json.loads(path.read_text()))
    assert not repeats, (f"{path.name} shows a picture twice: {'; '.join(repeats)}. A cell after a live run ends "
                         "without the plot object (its live figure is the picture already)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_raw_warning_in_the_outputs(path):
    lines = raw_warnings(json.loads(path.read_text()))
    assert not lines, (f"{path.name} prints a raw warning: {'; '.join(lines)}. Fix its cause, or catch it in the "
                       "cell and say what it means")


def png_of(shade: int, size=(40, 30), dot: tuple[int, int] | None = None) -> str:
    "A grey picture, optionally with one black dot, as base64 PNG."
    image = Image.new("L", size, shade)
    if dot is not None:
        image.putpixel(dot, 0)
    out = io.BytesIO()
    image.save(out, format="png")
    return base64.b64encode(out.getvalue()).decode()


def notebook_of(*cells: list[dict]) -> dict:
    return {"cells": [{"cell_type": "code", "source": [], "outputs": outs} for outs in cells]}


def picture(png: str) -> dict:
    return {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Image>"}}


def test_the_checks_find_what_they_look_for():
    grey, dotted, other = png_of(200), png_of(200, dot=(3, 4)), png_of(90)
    assert repeated_pictures(notebook_of([picture(grey)], [picture(grey)])) == [
        "code cells 1 and 2 (identical PNGs)"]
    assert repeated_pictures(notebook_of([picture(grey), picture(dotted)])) == [
        "code cell 1 (the same pixels)"]  # one dot in 1,200 pixels: the same picture, drawn twice
    assert repeated_pictures(notebook_of([picture(grey)], [picture(other)], [picture(png_of(200, (41, 30)))])) == []
    stream = {"output_type": "stream", "name": "stderr",
              "text": ["looplab/recorder.py:170: RuntimeWarning: the training loss is nan\n", "  self.flush()\n"]}
    told = {"output_type": "stream", "name": "stdout", "text": "a warning, caught: the training loss is nan\n"}
    assert raw_warnings(notebook_of([told], [stream])) == [
        "code cell 2: looplab/recorder.py:170: RuntimeWarning: the training loss is nan"]
