"""The house: each module is exported by one notebook, and imports only modules of notebooks that come before it
in the reading order — at top level and inside functions alike — so that a reader never meets a name a later
notebook defines. The package's `__init__` (the one import of notebook 06c) is the exception by design: it
gathers the public names of every module."""
import ast
import re
from pathlib import Path

import pytest

import looplab.learner

PACKAGE = Path(__file__).resolve().parents[1] / "looplab"


def notebook_of(module: Path) -> str:
    found = re.search(r"File to edit: \.\./nbs/(\S+)\.ipynb", module.read_text())
    assert found, f"{module.name} says no notebook it is exported from"
    return found.group(1)


MODULES = {p.stem: p for p in sorted(PACKAGE.glob("*.py")) if p.stem not in ("__init__", "_modidx")}
NOTEBOOK = {name: notebook_of(path) for name, path in MODULES.items()}


def imported_modules(path: Path) -> set[str]:
    "The looplab modules `path` imports, anywhere in it (relative or absolute)."
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names if alias.name in MODULES)
            elif node.module and node.module.startswith("looplab."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("looplab."))
    return found & set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_earlier_notebooks_modules(name):
    later = [m for m in imported_modules(MODULES[name]) if NOTEBOOK[m] > NOTEBOOK[name]]
    assert not later, (f"looplab.{name} (notebook {NOTEBOOK[name]}) imports "
                       f"{', '.join(f'looplab.{m} (notebook {NOTEBOOK[m]})' for m in later)}, which come later")


def test_the_learner_is_one_loop_class_on_a_short_chain():
    chain = [c for c in looplab.learner.Learner.__mro__ if c.__module__.startswith("looplab")]
    assert len(chain) <= 4, [c.__name__ for c in chain]
    for step in ("fit", "_do_epoch", "_train_epoch", "_validate_epoch", "_do_batch", "_batch", "_phase"):
        assert step in vars(looplab.learner.Learner), f"Learner.{step} is not in the Learner's own cell"


def test_every_public_name_is_served_by_the_one_import():
    "`from looplab import X` works for every name in any module's `__all__`, and gives that very object."
    import importlib

    import looplab
    homes = {}
    for name in MODULES:
        try:
            module = importlib.import_module(f"looplab.{name}")
        except ImportError as e:  # looplab.fsdp and looplab.shards before torch 2.6: each says so itself
            assert name in ("fsdp", "shards") and "torch>=2.6" in str(e), e
            continue
        for public in getattr(module, "__all__", ()):
            homes.setdefault(public, []).append(getattr(module, public))
    for public, objects in sorted(homes.items()):
        served = getattr(looplab, public)
        assert any(served is obj for obj in objects), f"looplab.{public} is not the module's own {public}"


def imports_the_package_face(path: Path) -> bool:
    "Whether `path` imports from looplab's `__init__` (`from . import name`, `from looplab import name`, `import looplab`)."
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and not node.module and any(a.name not in MODULES for a in node.names):
                return True
            if node.level == 0 and node.module == "looplab":
                return True
        elif isinstance(node, ast.Import) and any(a.name == "looplab" for a in node.names):
            return True
    return False


def test_no_module_imports_the_package_face():
    "The face (`__init__`) imports every module, so a module that imports from it would be an arrow back up."
    assert imports_the_package_face(PACKAGE / "__init__.py") is False  # the check itself: the face imports modules
    assert not [name for name, path in MODULES.items() if imports_the_package_face(path)]


def test_no_module_serves_names_from_another_by_a_lazy_door():
    "A module-level `__getattr__` that fetches a name from a later module reaches back at run time: none is left."
    lazy = [name for name, path in MODULES.items()
            if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in ast.parse(path.read_text()).body)]
    assert not lazy, f"{lazy} serve old import paths; import the names from their own modules"
    with pytest.raises(ImportError, match="Checkpoint"):
        from looplab.checkpoint import Checkpoint  # noqa: F401 (its home is looplab.checkpoint_callback)
