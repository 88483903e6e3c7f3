"""Logging of the ``mixbench`` process: logs go to stderr, data (tables, configs) to stdout."""

from __future__ import annotations

import logging
import sys


def log_handler() -> logging.Handler:
    """Rich on a terminal, one plain line per message otherwise."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        return RichHandler(console=Console(stderr=True), show_path=False)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    return handler


def configure_logging() -> None:
    """INFO and up to stderr; Lightning's own messages stay Lightning's (it prints them itself)."""
    logging.basicConfig(level=logging.INFO, handlers=[log_handler()])
    logging.getLogger("lightning.pytorch").propagate = False
