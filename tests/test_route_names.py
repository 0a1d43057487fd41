"""The route shows what it uses. A first read (the cells before a stop's door, `tools/sizes.py`) may call only the
looplab names the route has shown by then: named in the prose of that stop's first read or an earlier stop's (in
backticks, as the notebooks write code in prose), or defined in the route's own code (a sketch the stop builds).
A name the route uses without a word is one the student meets as magic; a name taught only behind a door belongs
behind it, or gets its sentence where the route first uses it.

Which names are looplab's: the public functions and classes of `looplab/*.py`, and the public methods and attributes of
their classes, less the names torch, Python, NumPy and matplotlib objects have too (`model.parameters`,
`ax.plot`), which a static read cannot tell apart."""
from __future__ import annotations

import ast
import json
import random
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import sizes  # noqa: E402


def looplab_names() -> tuple[set[str], set[str]]:
    "(public top-level functions and classes, public members of their classes) defined in looplab/*.py."
    top, members = set(), set()
    for path in (ROOT / "looplab").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                top.add(node.name)
            if not isinstance(node, ast.ClassDef):
                continue
            for n in ast.walk(node):
                if isinstance(n, ast.FunctionDef):
                    members.add(n.name)
                elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and ast.unparse(n.value) == "self":
                    members.add(n.attr)
            for n in node.body:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
                members.update(t.id for t in targets if isinstance(t, ast.Name))
    public = lambda names: {n for n in names if not n.startswith("_")}
    return public(top), public(members) - shared_names()


def shared_names() -> set[str]:
    "Names other libraries' objects have too: `model.parameters` or `ax.plot` is not a looplab name."
    import matplotlib.axes
    import matplotlib.figure
    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset
    kinds = (nn.Module, torch.Tensor, torch.optim.Optimizer, DataLoader, Dataset, dict, list, str, tuple, set, object,
             matplotlib.axes.Axes, matplotlib.figure.Figure, random.Random, np.random.Generator, np.ndarray)
    names = set().union(*(dir(k) for k in kinds), dir(np), dir(plt), dir(torch))
    return names | {"dataset", "batch_size", "sampler", "batch_sampler"}  # a DataLoader's, set in its __init__


def code_of(cell: dict) -> ast.AST | None:
    try:
        return ast.parse("".join(cell["source"]))
    except SyntaxError:  # a cell of IPython magics
        return None


def unshown() -> dict[str, dict[str, str]]:
    "For each route stop, the looplab names its first read uses before the route has shown them: {name: the use}."
    top, members = looplab_names()
    shown: set[str] = set()
    found = {}
    for stop, cells in sizes.route():
        if cells is None:
            continue
        used = {}
        for cell in cells:
            if cell["cell_type"] == "markdown":
                for quoted in re.findall(r"`([^`]+)`", "".join(cell["source"])):
                    shown.update(re.findall(r"[A-Za-z_]\w*", quoted))
                continue
            tree = code_of(cell)
            for n in ast.walk(tree) if tree else []:
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                    shown.add(n.name)
                elif isinstance(n, ast.arg):
                    shown.add(n.arg)
                elif isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store):
                    shown.add(n.id if isinstance(n, ast.Name) else n.attr)
            for n in ast.walk(tree) if tree else []:
                if isinstance(n, ast.Attribute) and n.attr in members:
                    used.setdefault(n.attr, ast.unparse(n))
                elif isinstance(n, ast.Name) and n.id in top:
                    used.setdefault(n.id, n.id)
        found[stop] = {name: use for name, use in used.items() if name not in shown}
    return found


def test_the_check_sees_a_name_used_without_a_word(tmp_path, monkeypatch):
    "The check itself: a stop that calls `fit_one_cycle` unannounced is caught; a sentence naming it clears it."
    def stop(prose: str) -> list[dict]:
        return [{"cell_type": "markdown", "source": [prose]},
                {"cell_type": "code", "source": ["fit_one_cycle(learn, 3, lr_max=0.1)\nlearn.recorder.plot_loss()"]}]
    monkeypatch.setattr(sizes, "route", lambda: [("a", stop("We train."))])
    assert unshown() == {"a": {"fit_one_cycle": "fit_one_cycle", "plot_loss": "learn.recorder.plot_loss",
                               "recorder": "learn.recorder"}}
    told = "`fit_one_cycle(learn, n, lr_max)` trains with 1cycle; `learn.recorder.plot_loss()` draws the losses."
    monkeypatch.setattr(sizes, "route", lambda: [("a", stop(told))])
    assert unshown() == {"a": {}}


@pytest.mark.parametrize("stop", [name for name, cells in sizes.route() if cells is not None])
def test_a_route_stop_uses_only_names_the_route_has_shown(stop):
    missing = unshown()[stop]
    assert not missing, (
        f"{stop}'s first read uses looplab names the route has not shown by then: "
        + ", ".join(f"`{name}` (in `{use}`)" for name, use in sorted(missing.items()))
        + ". Name each in a sentence of the first read where it is first used (in backticks), or move the use "
          "behind the door.")


if __name__ == "__main__":  # the list, stop by stop
    for stop, missing in unshown().items():
        print(f"{stop}: {', '.join(f'{n} ({u})' for n, u in sorted(missing.items())) or 'all shown'}")
