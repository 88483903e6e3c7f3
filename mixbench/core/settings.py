"""Nested settings (a config or a record's ``config``) as flat ``dotted.key → value`` pairs."""

from __future__ import annotations


def flat_settings(tree, prefix: str = "") -> dict:
    """``{"optim": {"lr": 1e-3}}`` → ``{"optim.lr": 1e-3}``: every leaf under its dotted key (an empty mapping has none)."""
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flat_settings(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): tree}
