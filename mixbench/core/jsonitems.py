"""Reading item files: a JSON array or JSON lines of objects (instruction data, evaluation items)."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ConfigError


def read_items(path: str | Path, what: str = "") -> list[dict]:
    """The objects of ``path`` (a JSON array, or one JSON object per line); ConfigError naming the file otherwise."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON or JSON lines ({err}){'; expected ' + what if what else ''}") from None
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: expected a JSON array or JSON lines{'; ' + what if what else ''}")
    return rows
