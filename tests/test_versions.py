"""The versions we declare are the versions we test: tools/floors.py reads the floors from settings.ini for the floor
run (tools/test_floors.sh), and the README states the same floors and cap."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import floors  # noqa: E402


def test_each_requirement_is_pinned_at_its_floor():
    assert floors.floor_pins("torch>=2.4,<2.16 numpy>=1.24 matplotlib>=3.7.1 ipywidgets>=8") == \
        ["torch==2.4.0", "numpy==1.24.0", "matplotlib==3.7.1", "ipywidgets==8.0.0"]


def test_a_requirement_without_a_floor_is_refused_by_name():
    with pytest.raises(SystemExit, match="'torch<2.16' has no '>=' floor"):
        floors.floor_pins("numpy>=1.24 torch<2.16")


def test_the_readme_states_the_declared_floors_and_cap():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    settings = floors.settings()
    for requirement in settings["requirements"].split():
        assert f"`{requirement}`" in readme, f"README.md does not state settings.ini's requirement {requirement}"
    assert " ".join(floors.floor_pins(settings["requirements"])) in readme, "README.md's floor run lists other pins"
    assert f"Python ≥ {settings['min_python']}" in readme


def test_the_quick_start_is_the_readme_s_first_python_block():
    snippet = floors.quick_start()
    assert "learn.fit(" in snippet and "assert" in snippet
    compile(snippet, "README.md", "exec")


def test_the_floor_run_asks_for_test_tools_settings_ini_declares():
    assert floors.main(["dev", "pytest", "execnb"]) == 0
    with pytest.raises(SystemExit, match="no \\['not-a-tool'\\]"):
        floors.main(["dev", "not-a-tool"])
