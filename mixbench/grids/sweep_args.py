"""The arguments of a sweep (``mixbench run -m norm=pre,post seed=0,1 ...``) as the argument lists of its runs: pure
string work, so that ``-m`` checks every configuration before the grid runner (and Lightning) is imported."""

from __future__ import annotations

import itertools

from ..core.errors import ConfigError


def split_top_level(value: str) -> list[str]:
    """``'pre,post'`` → ``['pre', 'post']``; commas inside brackets, braces or quotes do not split (``[pre,post]``)."""
    parts, depth, quote, current = [], 0, None, ""
    for ch in value:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    return [*parts, current]


def expand_sweep(args: list[str]) -> list[list[str]]:
    """``['norm=pre,post', 'seed=0,1', 'task=x']`` → the 4 argument lists of the product (first axis slowest)."""
    axes = []
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"argument {arg!r} is not key=value (e.g. norm=pre,post,mix seed=0,1,2)")
        key, value = arg.split("=", 1)
        axes.append([f"{key}={v}" for v in split_top_level(value)])
    return [list(combo) for combo in itertools.product(*axes)]
