"""The ``mixbench`` command (``mixbench ...`` or ``python -m mixbench.cli ...``)."""

from .app import entry, main

__all__ = ["entry", "main"]
