"""The language-model ladder at equal data (``mixbench plot ladder``: ``ladder_equal_tokens_lm.md`` / ``.png``).

A ladder that gives each size the same *fraction* of its paper budget grows size and tokens together, so a trend along
it cannot say which of the two causes it.  Every LLaMA record holds its validations inside fit (25 / 50 / 75 / 100 % of
its steps), so the records that exist can be compared at equal tokens: for each size's full budget T (a *target*), each
size that has a validation within :data:`TOKEN_TOLERANCE` of T gives, per placement at its own best lr (the tuned
table's choice at the full budget, :data:`~.sweep.RULE`), the val/loss of each finished seed at its validation nearest
T.  Δ = mean − mean of the baseline row (nats; each at its best lr), with a Welch 95 % interval where both have ≥ 2
seeds.

A validation before the end of a run sits mid-schedule (the cosine has not decayed yet): at equal tokens a short run's
end and a long run's middle differ in learning rate, which favours the run whose end it is.  The table says the
fraction of its run each point is at.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..core.storage import atomic_write_text, save_figure
from .records import column_key, outcome, row_key
from .stats import welch_interval
from .sweep import setting, with_setting

LOSS = "val/loss"
FAILED = "no finished seed at any lr tried"
TOKEN_TOLERANCE = 0.15  # a validation counts at target T within ±15 % of T (the 1B run's 25 % is 6.25M against 5.5M)


@dataclass
class Point:
    """One placement at one size near one token target: its seeds' val/loss there, and Δ against the baseline."""

    row: str
    column: str
    target: float
    lr: float | None
    tokens: float | None  # the tokens of the validations used (their median over seeds)
    fraction: float | None  # where in its run they are (their median)
    losses: list[float]
    delta: float | None = None
    low: float | None = None
    high: float | None = None
    baseline_n: int = 0


def validation_tokens(record: dict, validation: dict) -> float | None:
    """Tokens trained before ``validation`` of ``record``: its step × global batch × sequence length."""
    batch = (record.get("effective") or {}).get("global_batch_size")
    seq = (record.get("dataset") or {}).get("seq_len")
    step = validation.get("step")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (batch, seq, step)):
        return None
    return float(step) * batch * seq


def final_tokens(record: dict) -> float | None:
    """Tokens of the whole run (its last step)."""
    return validation_tokens(record, {"step": record.get("steps")})


def loss_near(record: dict, target: float) -> tuple[float, float, float] | None:
    """``(val/loss, tokens, fraction)`` of the validation of ``record`` nearest ``target`` tokens within
    :data:`TOKEN_TOLERANCE`; the run's final validation counts at its last step.  None where none is that near."""
    points = []
    for v in record.get("validations") or []:
        if isinstance(v, dict) and (tokens := validation_tokens(record, v)) is not None:
            points.append(((v.get("metrics") or {}).get(LOSS), tokens, v.get("fraction")))
    if (end := final_tokens(record)) is not None and not any(abs(t - end) < 1 for _, t, _ in points):
        points.append(((record.get("metrics") or {}).get(LOSS), end, 1.0))
    near = [p for p in points if abs(p[1] - target) <= TOKEN_TOLERANCE * target and isinstance(p[0], float) and math.isfinite(p[0])]
    return min(near, key=lambda p: abs(p[1] - target)) if near else None


def targets(records: list[dict]) -> list[float]:
    """The full budgets (tokens) of the ``records``' runs, smallest first; one within :data:`TOKEN_TOLERANCE` above
    another counts as that one."""
    ends = sorted({round(t) for r in records if (t := final_tokens(r))})
    merged: list[float] = []
    for t in ends:
        if not merged or t > merged[-1] * (1 + TOKEN_TOLERANCE):
            merged.append(float(t))
    return merged


def equal_token_points(ladder, records: list[dict], key: str = "optim.lr") -> list[Point]:
    """The :class:`Point` of every (target, size, placement) of ``ladder`` (a :class:`~.ladder_figures.Ladder` over the
    setting ``key``) that has seeds near the target; none where the records count no tokens (images)."""
    columns = {rung.column for rung in ladder.rungs}
    cells: dict[tuple, list[dict]] = {}  # (row, column, value of key) → its finished records
    for r in with_setting(records, key):
        if outcome(r) == "completed" and column_key(r) in columns:
            cells.setdefault((row_key(r), column_key(r), setting(r, key)), []).append(r)
    points = []
    for target in targets([r for found in cells.values() for r in found]):
        for rung in ladder.rungs:
            seeds: dict[str, Point] = {}
            for row in ladder.rows:
                sweep = ladder.sweep(row, rung)
                if sweep is None or sweep.best is None:
                    continue
                at = [found for r in cells.get((row, rung.column, sweep.best), []) if (found := loss_near(r, target)) is not None]
                if at:
                    seeds[row] = Point(
                        row,
                        rung.column,
                        target,
                        sweep.best,
                        statistics.median(t for _, t, _ in at),
                        statistics.median(f for _, _, f in at if f is not None) if any(f is not None for _, _, f in at) else None,
                        [x for x, _, _ in at],
                    )
            base = seeds.get(ladder.baseline(rung) or "")
            for point in seeds.values():
                if base is not None and point is not base:
                    point.delta = statistics.fmean(point.losses) - statistics.fmean(base.losses)
                    point.baseline_n = len(base.losses)
                    if len(point.losses) >= 2 and len(base.losses) >= 2:
                        interval = welch_interval(point.losses, base.losses)
                        point.low, point.high = interval.low, interval.high
                points.append(point)
    return points


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def _tokens_text(tokens: float) -> str:
    return f"{tokens / 1e6:.1f}M"


def cell_text(point: Point, baseline: str | None) -> str:
    where = f"at {_tokens_text(point.tokens)}, {point.fraction:.0%} of its run" if point.fraction is not None else ""
    if point.row == baseline:
        value = statistics.fmean(point.losses)
        spread = f" ± {statistics.stdev(point.losses):.3f}" if len(point.losses) >= 2 else ""
        return f"{value:.3f}{spread} (n={len(point.losses)}) {where}"
    if point.delta is None:
        return f"{statistics.fmean(point.losses):.3f} (n={len(point.losses)}; no baseline here) {where}"
    interval = f" [{_signed(point.low)}, {_signed(point.high)}]{'*' if point.low * point.high > 0 else ''}" if point.low is not None else ""
    return f"Δ {_signed(point.delta)}{interval} (n={len(point.losses)}, base n={point.baseline_n}) {where}"


def _marked(point: Point, ladder, rung, baseline: str | None) -> str:
    """:func:`cell_text`, then ``(lr not bracketed; pre's lr not bracketed)`` where the tuned table says so (``rung``:
    the point's column of ``ladder``)."""
    untuned = ladder.untuned_text(point.row, rung, with_baseline=point.delta is not None)
    return cell_text(point, baseline) + (f" ({untuned})" if untuned else "")


def markdown(ladder, points: list[Point]) -> str:
    """One table per token target: rows = placements, columns = the sizes with validations near it."""
    baseline = next((ladder.baseline(r) for r in ladder.rungs if ladder.baseline(r)), None)
    lines = [
        f"## {ladder.family} at equal tokens: Δ {LOSS} (nats, lower is better) against {baseline}, each at its own best lr",
        "",
        "Each placement at the lr the tuned table picks at the full budget; its finished seeds' validation nearest the target "
        f"(within ±{TOKEN_TOLERANCE:.0%}). A point before the end of its run sits mid-cosine (a higher lr than at a run's end): "
        "at equal tokens the size whose whole run it is has the advantage of its decayed schedule. [low, high] = Welch's "
        "95 % interval where both cells have ≥ 2 seeds; * = it excludes 0. lr not bracketed: that best lr is an edge of "
        "its sweep (or its one lr), not a tuned one (pre's: the baseline's).",
    ]
    label = {rung.column: rung.label for rung in ladder.rungs}
    rungs = {rung.column: rung for rung in ladder.rungs}
    for target in sorted({p.target for p in points}):
        here = [p for p in points if p.target == target]
        columns = [rung.column for rung in ladder.rungs if any(p.column == rung.column for p in here)]
        lines += ["", f"### {_tokens_text(target)} tokens", "", "| placement | " + " | ".join(label[c] for c in columns) + " |"]
        lines.append("|---|" + "---|" * len(columns))
        for row in ladder.rows:
            cells = {p.column: p for p in here if p.row == row}
            failed = {c for c in columns if c not in cells and (sweep := ladder.sweep(row, rungs[c])) is not None and sweep.best is None}
            if cells or failed:
                texts = [_marked(cells[c], ladder, rungs[c], baseline) if c in cells else FAILED if c in failed else "—" for c in columns]
                lines.append(f"| {row} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def figure(ladder, points: list[Point]):
    """One panel per token target: Δ by model size, a line per placement, Welch intervals as error bars (hollow: one
    seed)."""
    import matplotlib.pyplot as plt

    size = {rung.column: rung.params for rung in ladder.rungs}
    targets_ = sorted({p.target for p in points})
    n = max(1, len(targets_))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n + 3.0, 3.8), sharex=True, sharey=True, squeeze=False)
    rows = [row for row in ladder.rows if any(p.row == row and p.delta is not None for p in points)]
    colors = {row: plt.get_cmap("tab10")(i % 10) for i, row in enumerate(rows)}
    for ax, target in zip(axes[0], targets_):
        ax.axhline(0, color="grey", lw=0.8)
        for row in rows:
            mine = sorted((p for p in points if p.row == row and p.target == target and p.delta is not None), key=lambda p: size[p.column])
            if not mine:
                continue
            xs, ys = [size[p.column] for p in mine], [p.delta for p in mine]
            ax.plot(xs, ys, "-", color=colors[row], lw=1)
            for p, x, y in zip(mine, xs, ys):
                resolved = p.low is not None
                err = [[y - p.low], [p.high - y]] if resolved else None
                ax.errorbar(x, y, yerr=err, fmt="o", color=colors[row], mfc=colors[row] if resolved else "white", ms=5, capsize=2)
        ax.set_xscale("log")
        ax.set_title(f"{_tokens_text(target)} tokens", fontsize=9)
        ax.set_xlabel("parameters")
    axes[0][0].set_ylabel(f"Δ {LOSS} vs {ladder.baseline(ladder.rungs[0]) or 'baseline'} (nats)")
    handles = [plt.Line2D([], [], color=colors[row], marker="o", lw=1, label=row) for row in rows]
    axes[0][-1].legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(f"{ladder.family}: placements by size at equal tokens, each at its own best lr (hollow: one seed)", fontsize=10)
    fig.tight_layout()
    return fig


def write_equal_tokens(ladder, records: list[dict], out: Path, name: str, key: str = "optim.lr") -> list[Path]:
    """``ladder_equal_tokens_<name>.md`` / ``.png`` in ``out`` where the records count tokens; the paths written."""
    import matplotlib.pyplot as plt

    points = equal_token_points(ladder, records, key)
    if not points:
        return []
    table, picture = out / f"ladder_equal_tokens_{name}.md", out / f"ladder_equal_tokens_{name}.png"
    atomic_write_text(table, markdown(ladder, points))
    fig = figure(ladder, points)
    save_figure(fig, picture, dpi=120)
    plt.close(fig)
    return [table, picture]
