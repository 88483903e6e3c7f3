"""Rows of the throughput benchmarks: their speed ratios, their fixed-width text table, and freeing a row's memory.

from rows import add_ratios, text_table  # bench/speed/ is the scripts' directory
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence

import torch

Column = tuple[str, int, Callable[[dict], str]]  # title, width (negative: left-aligned), the cell of a row


def add_ratios(rows: list[dict], rate: str, peer: str, group: Sequence[str] = ("model",)) -> None:
    """Per row with a ``rate``: ``<peer>`` against the peer library's row (``norm`` None), ``vs_base`` against mixbench
    pre with every option at its default, ``vs_pre`` against mixbench pre with the same options (the cost of the
    placement) — each among the rows that agree on every key of ``group``; the first such row counts."""

    def find(r: dict, norm: str | None, options: str | None) -> float | None:
        return next(
            (
                o[rate]
                for o in rows
                if all(o[k] == r[k] for k in group) and o["norm"] == norm and o[rate] and (options is None or o["options"] == options)
            ),
            None,
        )

    for r in rows:
        if r[rate]:
            peer_rate, base, pre = find(r, None, None), find(r, "pre", "defaults"), find(r, "pre", r["options"])
            r[peer] = r[rate] / peer_rate if peer_rate else None
            r["vs_base"] = r[rate] / base if base and r["norm"] else None
            r["vs_pre"] = r[rate] / pre if pre and r["norm"] else None


def fmt(value, spec: str, suffix: str = "") -> str:
    """``value`` formatted, or ``-`` when it is missing (None or 0)."""
    return format(value, spec) + suffix if value else "-"


def text_table(rows: list[dict], columns: Sequence[Column], ok: Callable[[dict], bool] = lambda r: True, lead: int = 0) -> str:
    """A header, a rule and a line per row; a row that is not ``ok`` shows its first ``lead`` cells and ``failed: <error>``."""

    def line(cells: Sequence[str], spec: Sequence[Column]) -> str:
        return "".join(cell.ljust(-width) if width < 0 else cell.rjust(width) for cell, (_, width, _) in zip(cells, spec))

    header = line([title for title, _, _ in columns], columns)
    lines = [header, "-" * len(header)]
    for r in rows:
        if ok(r):
            lines.append(line([cell(r) for _, _, cell in columns], columns))
        else:
            lines.append(line([cell(r) for _, _, cell in columns[:lead]], columns[:lead]) + f"  failed: {r['error']}")
    return "\n".join(lines)


def free_device_memory(device: str) -> None:
    """Drop compiled graphs and collected tensors so the next row starts from an empty cache."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
