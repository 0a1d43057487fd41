"""The oldest versions looplab declares it supports, read from settings.ini (the single source of metadata).

Usage: python tools/floors.py python    the minimum Python, e.g. 3.10
       python tools/floors.py pins      every requirement pinned at its floor, e.g. torch==2.4.0 numpy==1.24.0
       python tools/floors.py snippet   the README's quick start (the first ```python block), to run as a script
       python tools/floors.py dev NAME...  those development requirements as settings.ini gives them (test tools)"""
from __future__ import annotations

import re
import sys
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def settings() -> dict:
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    return dict(cfg["DEFAULT"])


def floor_pins(requirements: str) -> list[str]:
    "Each requirement at its floor: 'torch>=2.4,<2.15' -> 'torch==2.4.0'; a requirement with no floor is an error."
    pins = []
    for req in requirements.split():
        match = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?.*?>=\s*([0-9][0-9.]*)", req)
        if match is None:
            raise SystemExit(f"settings.ini: requirement {req!r} has no '>=' floor; give it one, e.g. {req}>=1.0")
        name, version = match.groups()
        parts = version.split(".")
        pins.append(f"{name}=={'.'.join(parts + ['0'] * (3 - len(parts)))}")
    return pins


def quick_start(readme: Path = ROOT / "README.md") -> str:
    "The first Python block of the README: the quick start a new user copies."
    found = re.search(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)
    if found is None:
        raise SystemExit("README.md has no ```python block: the quick start is missing")
    return found.group(1)


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "python":
        print(settings()["min_python"])
    elif what == "pins":
        print(" ".join(floor_pins(settings()["requirements"])))
    elif what == "dev":
        wanted = set(argv[1:])
        dev = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0]: req for req in settings()["dev_requirements"].split()}
        missing = sorted(wanted - set(dev))
        if missing:
            raise SystemExit(f"settings.ini's dev_requirements has no {missing}")
        print(" ".join(dev[name] for name in sorted(wanted)))
    elif what == "snippet":
        print(quick_start(), end="")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
