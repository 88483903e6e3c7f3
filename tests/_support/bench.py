"""Scripts under bench/ as modules, imported as when run as scripts: their folder on ``sys.path`` (they import their
neighbours by name).  The one place the test suite puts a bench/ folder on ``sys.path`` (test_suite_layout.py)."""

import importlib
import sys

from .paths import REPO_ROOT


def bench_module(folder: str, name: str):
    """``bench/<folder>/<name>.py`` imported as ``name``."""
    path = str(REPO_ROOT / "bench" / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(name)
