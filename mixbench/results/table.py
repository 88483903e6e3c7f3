"""The comparison table: records aggregated into cells (rows = norm, columns = task · model · dataset [scale]),
counted by seed, with differences from a baseline row and Welch confidence intervals."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import ConfigError
from . import stats
from .cell import Cell, Delta
from .records import _finite, column_key, dataset_name, model_label, row_key, with_recipes
from .sources import record_sources, source_differences
from .sweep import Sweep, with_setting

# ---------------------------------------------------------------- the table: rows = norm, columns = task · model · dataset [scale]


@dataclass
class Table:
    columns: list[str]
    rows: list[str]
    cells: dict[tuple[str, str], Cell]
    metric_of: dict[str, str]
    higher_is_better: dict[str, bool]
    best: dict[str, str]
    info: dict[str, dict] = field(default_factory=dict)  # column → task, model, dataset, scale
    baseline: str | None = None  # as asked for (--baseline)
    baseline_of: dict[str, str | None] = field(default_factory=dict)  # column → the row used as its baseline
    confidence: float = 0.95
    best_over: str | None = None  # --best-over KEY: each cell is the one at its row's best value of KEY
    sweeps: dict[tuple[str, str], Sweep] = field(default_factory=dict)  # with best_over: (row, column) → its cells by value
    sources: tuple[str, ...] = ()  # the results folders the records came from, in the order given (record["_source"])
    cell_sources: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (row, column) → its records' sources
    source_notes: dict[str, str] = field(default_factory=dict)  # column → the settings its folders' rows differ in


BUDGET_TOLERANCE = 0.02  # a validation counts as "at fraction f of the budget" within ±2 % of the budget


def at_budget(record: dict, fraction: float) -> dict | None:
    """A view of ``record`` at ``fraction`` of its training budget (``mixbench table --at``), or None where the run has
    no validation there (within :data:`BUDGET_TOLERANCE`; older records have none).

    ``fraction`` 1: the record as it is (its final validation and status).  Below 1: the metrics of the validation
    inside ``fit`` at that fraction (``record["validations"]``).  A run that never beat chance stays ``stalled``, a
    crash ``failed`` and a run stopped by Ctrl-C ``interrupted`` in every column; a run that diverged counts as
    ``completed`` at the budgets it reached with a finite metric before it blew up, and as ``diverged`` after."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--at takes budget fractions in (0, 1], got {fraction}")
    view = {**record, "_at_budget": fraction}
    if fraction >= 1.0 - BUDGET_TOLERANCE:
        return view
    if record["status"] in ("stalled", "failed", "interrupted"):
        return view
    nearby = [
        v for v in record.get("validations") or [] if v.get("fraction") is not None and abs(v["fraction"] - fraction) <= BUDGET_TOLERANCE
    ]
    validation = min(nearby, key=lambda v: abs(v["fraction"] - fraction)) if nearby else None
    value = validation["metrics"].get(record["primary_metric"]["name"]) if validation else None
    diverged_at = (record.get("divergence") or {}).get("step")
    if _finite(value) and (record["status"] != "diverged" or diverged_at is None or validation["step"] <= diverged_at):
        return {
            **view,
            "status": "completed",
            "metrics": validation["metrics"],
            "primary_metric": {**record["primary_metric"], "value": value},
        }
    return view if record["status"] == "diverged" else None  # diverged before this budget; else no validation here


def budget_views(records: list[dict], fractions: list[float]) -> list[dict]:
    """Every record at each budget fraction (:func:`at_budget`): one table column per column and fraction."""
    return [view for fraction in fractions for r in records if (view := at_budget(r, fraction)) is not None]


def find_baseline(baseline: str | None, rows: list[str]) -> str | None:
    """The row of ``rows`` that is ``baseline``: the row labelled exactly so, else the one row whose label is
    ``baseline`` followed by its parameters in parentheses (``mix`` → ``mix(α=0.25)``; ``pre`` never picks
    ``pre[layernorm]``).  None when there is none; several matches are an error (give the label exactly)."""
    if not baseline:
        return None
    if baseline in rows:
        return baseline
    matches = [r for r in rows if r.startswith(baseline + "(")]
    if len(matches) > 1:
        raise ConfigError(f"--baseline {baseline} matches several rows ({', '.join(matches)}); give one of them exactly")
    return matches[0] if matches else None


def one_metric_per_column(records: list[dict]) -> None:
    """A :class:`ConfigError` where the records of one column have different primary metrics (its cells would average
    them as one number)."""
    names: dict[str, set[str]] = {}
    for r in records:
        names.setdefault(column_key(r), set()).add(r["primary_metric"]["name"])
    for col, found in names.items():
        if len(found) > 1:
            raise ConfigError(
                f"column {col} mixes primary metrics {', '.join(sorted(found))}; "
                "table the records of each metric from a folder of their own"
            )


def aggregate(records: list[dict], baseline: str | None = "pre", confidence: float = 0.95, best_over: str | None = None) -> Table:
    """Rows = norm, columns = task · model · dataset [scale]; cell = the primary metric over seeds (:class:`Cell`),
    with its difference from the ``baseline`` row of its column and Welch's ``confidence`` interval.

    ``best_over`` (a dotted config key, e.g. ``optim.lr``): the key's values share a column, and each cell is the one at
    its row's best value (:class:`~.sweep.Sweep`), so that Δ compares each row at its best value with the baseline at
    the baseline's own best value."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0, 1), got {confidence}")
    groups: dict[tuple[str, str], list[dict]] = {}
    metric_of, hib, info = {}, {}, {}
    records = with_recipes(records) if best_over is None else with_setting(records, best_over)
    one_metric_per_column(records)
    for r in records:
        col = column_key(r)
        metric_of.setdefault(col, r["primary_metric"]["name"])
        hib.setdefault(col, bool(r["primary_metric"]["higher_is_better"]))
        info.setdefault(
            col,
            {
                "task": r["task"],
                "family": r.get("family"),
                "model": model_label(r),
                "dataset": dataset_name(r),
                "scale": r["scale"],
                "recipe": r.get("_recipe") or None,
                **({"budget": r["_at_budget"]} if r.get("_at_budget") is not None else {}),
            },
        )
        groups.setdefault((row_key(r), col), []).append(r)
    sweeps = {key: Sweep.from_records(recs, best_over, hib[key[1]]) for key, recs in groups.items()} if best_over else {}
    for (_, col), sweep in sweeps.items():
        sweep.column_values = len({repr(v) for (_, c), s in sweeps.items() if c == col for v in s.cells})
    cells = {key: sweeps[key].cell if sweeps else Cell.from_records(recs) for key, recs in groups.items()}
    sources, cell_sources = record_sources(records, groups)
    source_notes = source_differences(records, (best_over,) if best_over else ())
    columns = sorted(metric_of)
    order = {"pre": 0, "post": 1, "mix": 2}
    rows = sorted({row for row, _ in cells}, key=lambda n: (order.get(n.split("(")[0].split("[")[0], 3), n))
    best, baseline_of = {}, {}
    for col in columns:
        in_col = [row for row in rows if (row, col) in cells]
        scored = [(cells[(row, col)].mean, row) for row in in_col if cells[(row, col)].mean is not None]
        if scored:
            best[col] = (max if hib[col] else min)(scored)[1]
        base_row = baseline_of[col] = find_baseline(baseline, in_col)
        base = cells.get((base_row, col))
        if base is None or not base.values:
            continue
        for row in in_col:
            cell = cells[(row, col)]
            if row == base_row or not cell.values:
                continue
            if cell.n >= 2 and base.n >= 2:
                diff, low, high, dof = stats.welch_interval(cell.values, base.values, confidence)
                cell.delta = Delta(base_row, diff, low, high, dof)
            else:
                cell.delta = Delta(base_row, cell.mean - base.mean)
    return Table(
        columns,
        rows,
        cells,
        metric_of,
        hib,
        best,
        info,
        baseline,
        baseline_of,
        confidence,
        best_over,
        sweeps,
        sources,
        cell_sources,
        source_notes,
    )
