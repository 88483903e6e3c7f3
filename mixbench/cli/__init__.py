"""The ``mixbench`` command (``mixbench ...`` or ``python -m mixbench.cli ...``)."""

from .app import main

__all__ = ["main"]
