import os

os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: a real JupyterLab driven by headless Chromium (needs /usr/bin/chromium)")
