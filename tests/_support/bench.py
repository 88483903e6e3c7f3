"""Scripts under bench/ as modules, imported as when run as scripts: their folder on ``sys.path`` (they import their
neighbours by name)."""

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_module(folder: str, name: str):
    """``bench/<folder>/<name>.py`` imported as ``name``."""
    path = str(ROOT / "bench" / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(name)
