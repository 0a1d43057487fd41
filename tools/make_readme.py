"""Write README.md from nbs/index.ipynb (there is no quarto here to do it).

Markdown cells are copied as they are; code cells become fenced Python blocks. `--check` exits 1 when
README.md differs from what the notebook gives, without writing.
"""
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
HEADER = "<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file. -->\n\n"


def render(nb_path: Path = ROOT / "nbs" / "index.ipynb") -> str:
    "The README text for the index notebook."
    nb = nbformat.read(nb_path, as_version=4)
    parts = []
    for cell in nb.cells:
        src = cell.source.strip("\n")
        if not src:
            continue
        if cell.cell_type == "markdown":
            parts.append(src)
        elif cell.cell_type == "code":
            parts.append(f"```python\n{src}\n```")
    return HEADER + "\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    readme = ROOT / "README.md"
    if "--check" in argv:
        if not readme.exists() or readme.read_text(encoding="utf-8") != text:
            print("README.md is out of date with nbs/index.ipynb: run python tools/make_readme.py", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
