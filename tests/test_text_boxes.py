"""Text over text: tools/text_boxes.py finds a title drawn over a legend (or any two of a figure's titles, axis labels
and legends), and tools/run_tour.py fails a notebook whose picture has one, naming both texts."""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import text_boxes  # noqa: E402

TITLE_ON_LEGEND = """
ax.plot([1, 2], [1, 2], label="a long legend label")
ax.legend(loc="lower left", bbox_to_anchor=(0, 1))  # above the axes, where the title goes
ax.set_title("a title on it")
"""


def drawn(code: str) -> Figure:
    fig = Figure(figsize=(4, 3), dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()  # noqa: F841 (used by `code`)
    exec(code)
    fig.canvas.draw()
    return fig


def test_a_title_over_a_legend_is_found_and_named():
    fig = drawn(TITLE_ON_LEGEND)
    found = text_boxes.too_close(text_boxes.text_boxes(fig, fig.canvas.get_renderer()))
    assert [(a, b) for a, b, _, _ in found] == [("axes 0 title 'a title on it'", "axes 0 legend")]
    assert all(w > 1 and h > 1 for _, _, w, h in found)


@pytest.mark.parametrize("code", [
    "ax.plot([1, 2], label='x'); ax.legend(); ax.set_title('t'); ax.set_xlabel('batch'); ax.set_ylabel('loss')",
    "ax.set_title('left', loc='left'); ax.set_title('right', loc='right')",
    "ax.set_title(''); ax.set_xlabel(' ')",  # empty texts are not boxes
])
def test_a_figure_laid_out_as_matplotlib_does_has_no_overlap(code):
    fig = drawn(code)
    assert text_boxes.too_close(text_boxes.text_boxes(fig, fig.canvas.get_renderer())) == []


def test_two_panels_whose_labels_collide_are_found():
    fig = Figure(figsize=(3, 2), dpi=80)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(wspace=0.0)
    left.set_title("a long title on the left")
    right.set_title("and one on the right")
    fig.canvas.draw()
    found = text_boxes.too_close(text_boxes.text_boxes(fig, fig.canvas.get_renderer()))
    assert ("axes 0 title 'a long title on the left'", "axes 1 title 'and one on the right'") in [f[:2] for f in found]


@pytest.mark.parametrize("gap, flagged", [(0.3, True), (1.5, True), (4.0, False)])
def test_two_titles_a_fraction_of_a_pixel_apart_are_found(gap, flagged):
    "Side by side and not overlapping, two titles 0.3 px apart read as one word ('coveredepoch 30'): too close."
    fig = Figure(figsize=(6, 2), dpi=80)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    left.set_title("mode covered")
    right.set_title("epoch 30")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    shift = left.title.get_window_extent(renderer).x1 + gap - right.title.get_window_extent(renderer).x0
    right.title.set_x(right.title.get_position()[0] + shift / right.bbox.width)  # `gap` px right of the left title
    fig.canvas.draw()
    found = text_boxes.too_close(text_boxes.text_boxes(fig, renderer))
    pair = [(w, h) for a, b, w, h in found if "mode covered" in a and "epoch 30" in b]
    assert bool(pair) == flagged, (gap, found)
    if flagged:
        assert pair[0][0] == pytest.approx(-gap, abs=0.15)  # a gap: negative width
        assert text_boxes.describe("a", "b", *pair[0]) == f"a and b are {-pair[0][0]:g} px apart (less than 2)"


def test_watch_logs_each_draw_with_an_overlap(tmp_path, monkeypatch):
    monkeypatch.setattr(Figure, "draw", Figure.draw)  # restored after the test
    log = tmp_path / "boxes.jsonl"
    text_boxes.watch(str(log))
    drawn("ax.set_title('fine')")
    assert not log.exists()
    drawn(TITLE_ON_LEGEND)
    assert "a title on it" in log.read_text() and "legend" in log.read_text()


def test_the_outputs_check_fails_a_notebook_with_text_over_text(tmp_path):
    pytest.importorskip("jupyter_client")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3))\n"
                                          + TITLE_ON_LEGEND + "plt.show()")]
    path = tmp_path / "overlap.ipynb"
    nbformat.write(nb, path)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "run_tour.py"), str(path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "text over text in 1 place:" in run.stdout
    assert "axes 0 title 'a title on it' and axes 0 legend overlap by" in run.stdout
