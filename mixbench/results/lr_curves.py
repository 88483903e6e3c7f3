"""The metric against the learning rate (``mixbench plot lr``): one figure per column of ``table --best-over optim.lr``
(task · model · data; one per family in a sweep of one model per family), one line per placement.

A point is the mean over the finished seeds at that lr; the band spans their minimum to maximum (it pinches to the line
where an lr has one seed).  An lr where no seed finished is a hollow marker at the bad edge of the axis (the top when
lower is better): ▲ diverged, ○ stalled, × crashed, ◇ interrupted (Ctrl-C), □ pruned.  ★ marks each placement's best
lr, the one the table reports (its rule, :data:`~.sweep.RULE`, counts stalled and diverged seeds against their lr).  An
lr where only some seeds finished is drawn at the mean of those and labelled with the others (``1/3 stalled``): the
star can sit above such a point.
"""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

from ..core.storage import save_figure
from .render import source_tag
from .sweep import ENDED, metric_view, value_text
from .table import Table, aggregate

log = logging.getLogger(__name__)
EDGE_MARKERS = {"diverged": "^", "stalled": "o", "failed": "x", "interrupted": "D", "pruned": "s"}


def figure_names(table: Table, columns: list[str] | None = None) -> dict[str, str]:
    """Column (of ``columns``, default all) → a file-name slug: the family (``lm``, ``vision``) where it has one column,
    else the family and the model label, then task, dataset and recipe, as far as needed to tell the columns apart."""
    columns = table.columns if columns is None else columns
    parts = {c: [table.info[c].get(k) or "" for k in ("family", "model", "task", "dataset", "recipe")] for c in columns}
    names: dict[str, str] = {}
    for col in columns:
        for k in range(1, 6):
            slug = _slug(parts[col][:k])
            if sum(_slug(p[:k]) == slug for p in parts.values()) == 1 or k == 5:
                names[col] = slug
                break
    return names


def _slug(parts: list[str]) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", "_".join(p for p in parts if p)).strip("_").lower() or "results"


def swept_columns(table: Table) -> list[str]:
    """The columns where some row ran at more than one value of the key (a column of single values has no curve)."""
    return [c for c in table.columns if any(len(s.cells) > 1 for (_, col), s in table.sweeps.items() if col == c)]


def lr_figures(records: list[dict], key: str = "optim.lr", metric: str | None = None) -> dict[str, object]:
    """``{slug: matplotlib figure}``: one figure per column of the table of ``records`` over ``key`` (the x axis, log
    scale), ``metric`` on the y axis (default: each record's primary metric; log scale where it spans over 10×).  A
    column where every row ran at one value only (e.g. a follow-up at each row's best lr) gets no figure (logged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FormatStrFormatter, NullLocator

    table = aggregate([metric_view(r, metric) for r in records] if metric else records, baseline=None, best_over=key)
    colors = plt.get_cmap("tab20")
    figures, swept = {}, swept_columns(table)
    for col in table.columns:
        if col not in swept:
            log.info("no figure for %s: every row ran at one %s (not swept)", col, key)
    for col, name in figure_names(table, swept).items():
        fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
        sweeps = {row: table.sweeps[(row, col)] for row in table.rows if (row, col) in table.sweeps}
        handles = []
        for i, (row, sweep) in enumerate(sweeps.items()):
            color = colors((2 * i) % 20 + (i // 10) % 2)  # tab20's ten strong colours first, then their light twins
            _draw_row(ax, sweep, table.higher_is_better[col], color, offset=(i - (len(sweeps) - 1) / 2) * 0.012)
            tag = source_tag(table, row, col)  # which folders the row's records came from, where there are several
            handles.append(plt.Line2D([], [], color=color, marker="o", markersize=4, label=f"{row} ({tag})" if tag else row))
        values = sorted({float(v) for s in sweeps.values() for v in s.cells})
        finished = [x for s in sweeps.values() for c in s.cells.values() for x in c.values]
        if finished and min(finished) > 0 and max(finished) / min(finished) > 10:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.set_xscale("log")
        ax.set_xticks(values, [value_text(v) for v in values], minor=False)
        ax.xaxis.set_minor_locator(NullLocator())  # the swept values are the ticks
        ax.set_xlim(values[0] / 10**0.25, values[-1] * 10**0.25)  # a quarter decade beyond the ends
        ax.set(xlabel=key, ylabel=f"{table.metric_of[col]} {'↑' if table.higher_is_better[col] else '↓'}")
        notes = [f"src {k} = {s}" for k, s in enumerate(table.sources, 1)] if len(table.sources) > 1 else []
        notes += [table.source_notes[col]] if notes and col in table.source_notes else []
        ax.set_title("\n".join(textwrap.wrap(col, 90) + notes), fontsize=10)  # a line a folder (paths stay whole)
        ax.grid(alpha=0.3)
        ended = {sweep.outcome(v) for sweep in sweeps.values() for v in sweep.cells}
        handles += [
            plt.Line2D([], [], marker=m, linestyle="", markerfacecolor="none", color="black", label=f"no seed finished: {o}")
            for o, m in EDGE_MARKERS.items()
            if o in ended
        ]
        handles += [
            plt.Line2D([], [], marker="*", linestyle="", color="black", markersize=10, label="best (table --best-over)"),
            Patch(color="black", alpha=0.2, label="min–max over seeds"),
        ]
        ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        figures[name] = fig
    return figures


def _draw_row(ax, sweep, higher_is_better: bool, color, offset: float) -> None:
    """One placement: its line over the lrs where a seed finished (labelled with the seeds that stalled or diverged
    there), the min–max band, the best lr starred, and a hollow marker at the bad edge of the axis (shifted by
    ``offset`` decades, so that rows at one lr stay apart) elsewhere."""
    points = [(float(v), c.mean, min(c.values), max(c.values)) for v, c in sweep.cells.items() if c.n]
    if points:
        xs, means, lows, highs = zip(*points)
        ax.plot(xs, means, marker="o", markersize=4, color=color)
        ax.fill_between(xs, lows, highs, color=color, alpha=0.2, linewidth=0)
    for value, cell in sweep.cells.items():
        ended = cell.ended_text(ENDED)
        if cell.n and ended:
            ax.annotate(ended, (float(value), cell.mean), xytext=(4, 4), textcoords="offset points", fontsize=7, color=color)
    if sweep.best is not None:
        ax.plot([float(sweep.best)], [sweep.cell.mean], marker="*", markersize=12, color=color, linestyle="")
    edge = 0.03 if higher_is_better else 0.97
    for value in sweep.cells:
        ended = sweep.outcome(value)
        if ended in EDGE_MARKERS:
            ax.plot(
                [float(value) * 10**offset],
                [edge],
                marker=EDGE_MARKERS[ended],
                markerfacecolor="none",
                color=color,
                linestyle="",
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )


def write_lr_figures(records: list[dict], out: str | Path, key: str = "optim.lr", metric: str | None = None) -> list[Path]:
    """Each figure of :func:`lr_figures` as ``<out stem>_<slug><out suffix>`` beside ``out``; the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in lr_figures(records, key, metric).items():
        path = out.with_name(f"{out.stem}_{name}{out.suffix or '.png'}")
        save_figure(fig, path, dpi=120)
        paths.append(path)
    return paths
