"""Reading a JSON file that may come from elsewhere (a record, a grid manifest): a regular file only, opened so that
it never blocks (a FIFO or a device named ``record.json``), at most :data:`MAX_BYTES`, nested at most
:data:`MAX_DEPTH` deep.  Anything else is an :class:`UnreadableFile` whose message says why, for the caller to name
and skip."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import MixbenchError

MAX_BYTES = 8 * 1024 * 1024  # a record is a few kB (its config, histories); a failed run's error is cut long before this
MAX_DEPTH = 64  # a record nests about 6 deep


class UnreadableFile(MixbenchError):
    """A file is not a regular file, too large, too deep, or not JSON; the message names it and says which."""


def _depth(value) -> int:
    """How deep ``value`` nests (a scalar: 0), walked without recursion; stops counting past :data:`MAX_DEPTH`."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_capped(path: str | Path, max_bytes: int | None = None) -> tuple[bytes, os.stat_result]:
    """``path``'s bytes and status, if it is a regular file of at most ``max_bytes`` (default :data:`MAX_BYTES`); never
    blocks on a special file."""
    path, max_bytes = Path(path), max_bytes or MAX_BYTES
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path}: not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            status = os.fstat(f.fileno())
            if not stat.S_ISREG(status.st_mode):  # replaced by a special file since the check
                raise UnreadableFile(f"{path}: not a regular file")
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise UnreadableFile(f"{path}: not readable ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise UnreadableFile(f"{path}: larger than {max_bytes:,} bytes")
    return data, status


def read_text_capped(path: str | Path, max_bytes: int | None = None) -> str:
    """``path``'s text (UTF-8), if it is a regular file of at most ``max_bytes`` (:func:`read_capped`)."""
    data, _ = read_capped(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFile(f"{path}: not UTF-8 text") from None


def read_json(path: str | Path, max_bytes: int | None = None) -> object:
    """The JSON value of ``path`` (see :func:`read_text_capped`), nested at most :data:`MAX_DEPTH` deep."""
    text = read_text_capped(path, max_bytes)
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # not JSON, or an integer of more digits than Python converts
        raise UnreadableFile(f"{path}: not readable JSON ({err})") from None
    if _depth(value) > MAX_DEPTH:
        raise UnreadableFile(f"{path}: nested deeper than {MAX_DEPTH} levels")
    return value
