"""Text over text in a picture: the boxes of a figure's titles, axis labels and legends, as matplotlib drew them,
and the pairs that overlap or come closer than a
few pixels (two titles 0.3 px apart read as one word).

`tools/run_tour.py` loads this file into every kernel it starts (as an IPython startup file), where `watch()` wraps
`Figure.draw`: each time a figure is drawn (pyplot's inline pictures, a plot's `_repr_png_`, a live plot's frames),
the boxes are measured with the renderer that drew them, and each pair too close is written as a JSON line to the file
named by $LOOPLAB_TEXT_BOXES. The committed pictures are drawn by exactly these draws, so a notebook whose picture
puts a title on its legend fails the outputs check, naming the texts."""
from __future__ import annotations

import json
import os


def text_boxes(fig, renderer) -> list[tuple[str, object]]:
    "(name, window extent) of each visible, non-empty title, axis label, legend and figure-level text of `fig`."
    boxes = []

    def add(name, artist):
        if artist is None or not artist.get_visible():
            return
        if hasattr(artist, "get_text") and not artist.get_text().strip():
            return
        box = artist.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((name, box))

    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {i}"
        for title, loc in ((ax.title, "title"), (ax._left_title, "left title"), (ax._right_title, "right title")):
            add(f"{where} {loc} {title.get_text()!r}", title)
        add(f"{where} x label {ax.xaxis.label.get_text()!r}", ax.xaxis.label)
        add(f"{where} y label {ax.yaxis.label.get_text()!r}", ax.yaxis.label)
        legend = ax.get_legend()
        if legend is not None:
            add(f"{where} legend", legend)
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        text = getattr(fig, name, None)
        if text is not None:
            add(f"figure {name[1:]} {text.get_text()!r}", text)
    for j, legend in enumerate(fig.legends):
        add(f"figure legend {j}", legend)
    return boxes


MARGIN = 2.0  # pixels: two texts closer than this read as one ("coveredepoch 30"), though they do not overlap


def too_close(boxes: list[tuple[str, object]], margin: float = MARGIN) -> list[tuple[str, str, float, float]]:
    """Pairs of boxes that come closer than `margin` pixels both across and down: (name, name, width, height) of what
    they share, where a negative width or height is the gap between them (-0.3: 0.3 px apart)."""
    found = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            width = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            height = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if width > -margin and height > -margin:
                found.append((a, b, round(width, 1), round(height, 1)))
    return found


def describe(a: str, b: str, width: float, height: float) -> str:
    "What a pair of `too_close` says, in words."
    if width > 0 and height > 0:
        return f"{a} and {b} overlap by {width}x{height} px"
    return f"{a} and {b} are {-min(width, height)} px apart (less than {MARGIN:g})"


def watch(log: str) -> None:
    "Wrap `Figure.draw` so that each draw appends its text boxes too close, if any, to `log` (JSON lines)."
    from matplotlib.figure import Figure

    draw = Figure.draw
    if getattr(draw, "_text_boxes_watch", False):
        return

    def checked_draw(self, renderer):
        result = draw(self, renderer)
        try:
            found = too_close(text_boxes(self, renderer))
        except Exception as e:  # a figure the measuring does not understand: say so, never break the draw
            found = [("(measuring failed)", f"{type(e).__name__}: {e}", 0.0, 0.0)]
        if found:
            width, height = self.canvas.get_width_height()
            with open(log, "a") as f:
                for a, b, w, h in found:
                    f.write(json.dumps({"figure": f"{width}x{height} px", "a": a, "b": b, "shared": [w, h]}) + "\n")
        return result

    checked_draw._text_boxes_watch = True
    Figure.draw = checked_draw


if os.environ.get("LOOPLAB_TEXT_BOXES"):  # loaded as a kernel's startup file
    watch(os.environ["LOOPLAB_TEXT_BOXES"])
