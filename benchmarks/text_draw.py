"""What one label costs matplotlib to draw, under the matplotlib this Python imports: the titles, tick labels and axis
labels are most of a live plot's first frame, and matplotlib 3.11's releases draw text glyph by glyph in Python.

Twenty labels like a live plot's ("training batch 7", 16 characters, matplotlib's default font and size) on one
off-screen figure, their layout already measured once (as a second draw finds it cached); each label's `draw` timed,
the best of `--repeats` passes (noise only ever slows a draw down). `--against DIR` times the same labels under the
matplotlib installed in DIR too (`pip install --target DIR --no-deps matplotlib==3.11.2`), in a process of its own,
round by round with this one's, and prints the ratio.
Run: python benchmarks/text_draw.py [--repeats 30] [--against DIR] [--rounds 5]
"""
import argparse
import os
import subprocess
import sys
import time

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def label_ms(repeats: int) -> float:
    "Milliseconds to draw one label: the best pass over twenty of them, per label."
    fig = Figure(figsize=(4, 3), dpi=80)
    canvas = FigureCanvasAgg(fig)
    labels = [fig.text(0.1, 0.045 * i, f"training batch {i % 10}") for i in range(20)]
    canvas.draw()  # fonts loaded, layouts measured
    renderer = canvas.get_renderer()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for label in labels:
            label.draw(renderer)
        best = min(best, (time.perf_counter() - start) / len(labels))
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--against", metavar="DIR", help="also time the labels under the matplotlib installed in DIR")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --against, each process's in turn")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)  # a child of --against: the number only
    args = parser.parse_args()
    if args.against is not None and not os.path.isdir(os.path.join(args.against, "matplotlib")):
        parser.error(f"--against {args.against}: no matplotlib there; make it with "
                     f"pip install --target {args.against} --no-deps matplotlib==3.11.2")
    if args.bare:
        print(f"{matplotlib.__version__} {label_ms(args.repeats)}")
        return
    if args.against is None:
        print(f"matplotlib {matplotlib.__version__}: one 16-character label drawn in {label_ms(args.repeats):.3f} ms "
              f"(best of {args.repeats} passes over 20 labels)")
        return
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.against)}
    mine, theirs, version = [], [], None
    for _ in range(args.rounds):
        mine.append(label_ms(args.repeats))
        out = subprocess.run([sys.executable, __file__, "--bare", "--repeats", str(args.repeats)], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        version = out[0]
        theirs.append(float(out[1]))
    print(f"one 16-character label, best of {args.rounds} rounds of {args.repeats} passes over 20 labels: "
          f"matplotlib {matplotlib.__version__} {min(mine):.3f} ms, matplotlib {version} (from {args.against}) "
          f"{min(theirs):.3f} ms: {min(theirs) / min(mine):.2f}x")


if __name__ == "__main__":
    main()
