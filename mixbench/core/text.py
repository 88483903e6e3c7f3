"""Text read from files handed over, made safe to show: control characters removed (a name holding terminal escape
bytes must not drive the terminal), and CSV cells that a spreadsheet would run as a formula quoted."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but tab and newline), DEL, C1
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a cell a spreadsheet reads as a formula


def printable(text) -> str:
    """``str(text)`` without control characters (tab and newline kept)."""
    return _CONTROL.sub("", str(text))


def csv_cell(value):
    """A CSV cell: text without control characters, and prefixed with ``'`` where a spreadsheet would take it for a
    formula (``=cmd|…``); other values as they are."""
    if not isinstance(value, str):
        return value
    value = printable(value)
    return "'" + value if value.startswith(FORMULA_START) else value
