"Install looplab from the metadata in settings.ini (the single source of truth)."
from configparser import ConfigParser
from pathlib import Path

import setuptools

here = Path(__file__).parent
cfg = ConfigParser(delimiters=["="])
cfg.read(here / "settings.ini", encoding="utf-8")
cfg = cfg["DEFAULT"]

licenses = {"apache2": "Apache-2.0"}  # settings.ini's nbdev name → SPDX expression
statuses = ["1 - Planning", "2 - Pre-Alpha", "3 - Alpha", "4 - Beta", "5 - Production/Stable", "6 - Mature", "7 - Inactive"]
min_python = cfg["min_python"]
lib = cfg["lib_path"]

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    long_description=(here / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    author=cfg["author"],
    author_email=cfg["author_email"],
    license=licenses[cfg["license"]],
    url=cfg["git_url"],
    keywords=cfg["keywords"].split(),
    classifiers=[
        "Development Status :: " + statuses[int(cfg["status"]) - 1],
        "Intended Audience :: " + cfg["audience"].title(),
        "Natural Language :: " + cfg["language"].title(),
        "Programming Language :: Python :: 3",
    ],
    # looplab/assets holds data, not code: it has no __init__.py, so find_packages skips it and setuptools warns
    # that it "would be ignored"; naming it as a package of its own ships its files by declaration
    packages=[*setuptools.find_packages(include=[lib, lib + ".*"]), lib + ".assets"],
    package_data={lib + ".assets": ["*.npz", "*.md"]},
    include_package_data=True,
    python_requires=">=" + min_python,
    install_requires=cfg["requirements"].split(),
    extras_require={"dev": cfg["dev_requirements"].split()},
    zip_safe=False,
)
