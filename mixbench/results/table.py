"""The comparison table: records aggregated into cells (rows = norm, columns = task · model · dataset [scale]),
counted by seed, with differences from a baseline row and Welch confidence intervals."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..core.errors import ConfigError
from . import stats
from .records import _finite, _seed_key, _time_order, column_key, dataset_name, model_label, outcome, primary_value, row_key, with_recipes

# ---------------------------------------------------------------- one table cell: the records of one norm × column


@dataclass
class Delta:
    """``diff = mean(cell) − mean(baseline)``; ``low``/``high``/``dof``: Welch's interval (None when either cell
    has fewer than 2 finished seeds)."""

    baseline: str
    diff: float
    low: float | None = None
    high: float | None = None
    dof: float | None = None

    @property
    def significant(self) -> bool | None:
        return None if self.low is None else stats.excludes_zero(self.low, self.high)


@dataclass
class Cell:
    """The records of one configuration, counted by seed.

    Records with the same seed are *repeats* (re-runs of the same configuration), not independent samples.  Each
    seed has one outcome: that of its latest record (by ``started_at``) that did not crash — a ``failed`` record
    is a crash, not a training outcome, so it decides only when every record of the seed failed.  A seed whose
    outcome is ``completed`` contributes one sample: the mean primary metric of its completed records.  ``mean`` /
    ``std`` are over those samples, i.e. over the finished seeds only.
    """

    samples: dict = field(default_factory=dict)  # seed → value (finished seeds; repeats averaged)
    outcomes: dict = field(default_factory=dict)  # seed → completed | diverged | stalled | failed
    records: int = 0
    delta: Delta | None = None

    @classmethod
    def from_records(cls, records: list[dict]) -> Cell:
        """The cell of ``records``; copies of one run (the same ``run_id``, seed and start time: a confirmation run
        reused from a grid with ``mixbench search --reuse-from``) count once."""
        records = list({_run_key(r): r for r in records}.values())
        by_seed: dict = {}
        for r in sorted(records, key=_time_order):
            by_seed.setdefault(_seed_key(r["seed"]), []).append(r)
        cell = cls(records=len(records))
        for seed, recs in by_seed.items():
            outcomes = [outcome(r) for r in recs]
            decisive = [o for o in outcomes if o != "failed"]
            cell.outcomes[seed] = decisive[-1] if decisive else "failed"
            if cell.outcomes[seed] == "completed":
                cell.samples[seed] = statistics.fmean(float(primary_value(r)) for r, o in zip(recs, outcomes) if o == "completed")
        return cell

    @property
    def values(self) -> list[float]:
        return list(self.samples.values())

    @property
    def n(self) -> int:
        """Finished seeds (the samples)."""
        return len(self.samples)

    @property
    def n_seeds(self) -> int:
        """Distinct seeds, whatever their outcome."""
        return len(self.outcomes)

    @property
    def repeats(self) -> int:
        """Records beyond one per seed."""
        return self.records - self.n_seeds

    def count(self, what: str) -> int:
        return sum(o == what for o in self.outcomes.values())

    @property
    def diverged(self) -> int:
        return self.count("diverged")

    @property
    def stalled(self) -> int:
        return self.count("stalled")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def mean(self) -> float | None:
        return stats.mean_std(self.values)[0]

    @property
    def std(self) -> float | None:
        return stats.mean_std(self.values)[1]

    def summary(self, digits: int = 2) -> str:
        """``mean ± std (n=…)`` and the seeds that did not finish, e.g. ``30.13 ± 0.41 (n=2) 1/3 diverged``."""
        parts = []
        if self.values:
            s = _num(self.mean, digits) + (f" ± {_num(self.std, digits)}" if self.std is not None else "")
            n = f"n={self.n}" + (f" seed{'s' * (self.n != 1)}, {_repeats(self.repeats)}" if self.repeats else "")
            parts.append(f"{s} ({n})")
        parts += [f"{self.count(o)}/{self.n_seeds} {o}" for o in NOT_FINISHED if self.count(o)]
        if not self.values and self.repeats:
            parts.append(f"({_repeats(self.repeats)})")
        return " ".join(parts)

    def delta_text(self, digits: int = 2) -> str:
        """``Δ −0.52 [−0.90, −0.14]*`` (``*``: the interval excludes 0); ``Δ −0.52`` without an interval."""
        if self.delta is None:
            return ""
        d = self.delta
        s = f"Δ {'+' if d.diff >= 0 else '−'}{abs(d.diff):.{digits}f}"
        if d.low is not None:
            s += f" [{_num(d.low, digits)}, {_num(d.high, digits)}]" + ("*" if d.significant else "")
        return s

    def text(self, digits: int = 2, sep: str = " ") -> str:
        return sep.join(t for t in (self.summary(digits), self.delta_text(digits)) if t)


NOT_FINISHED = ("diverged", "stalled", "failed", "pruned")


def _run_key(record: dict):
    """One run's identity across copies of its record (a run folder's name alone is not unique: run_dir= is free)."""
    if record.get("run_id") and record.get("started_at"):
        return (record["run_id"], str(record["seed"]), record["started_at"])
    return id(record)


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def _repeats(k: int) -> str:
    return f"{k} repeat{'s' * (k != 1)}"


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


BUDGET_TOLERANCE = 0.02  # a validation counts as "at fraction f of the budget" within ±2 % of the budget


def at_budget(record: dict, fraction: float) -> dict | None:
    """A view of ``record`` at ``fraction`` of its training budget (``mixbench table --at``), or None where the run has
    no validation there (within :data:`BUDGET_TOLERANCE`; older records have none).

    ``fraction`` 1: the record as it is (its final validation and status).  Below 1: the metrics of the validation
    inside ``fit`` at that fraction (``record["validations"]``).  A run that never beat chance stays ``stalled`` and a
    crash stays ``failed`` in every column; a run that diverged counts as ``completed`` at the budgets it reached with
    a finite metric before it blew up, and as ``diverged`` after."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--at takes budget fractions in (0, 1], got {fraction}")
    view = {**record, "_at_budget": fraction}
    if fraction >= 1.0 - BUDGET_TOLERANCE:
        return view
    if record["status"] in ("stalled", "failed"):
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


def aggregate(records: list[dict], baseline: str | None = "pre", confidence: float = 0.95) -> Table:
    """Rows = norm, columns = task · model · dataset [scale]; cell = the primary metric over seeds (:class:`Cell`),
    with its difference from the ``baseline`` row of its column and Welch's ``confidence`` interval."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"--confidence must be in (0, 1), got {confidence}")
    groups: dict[tuple[str, str], list[dict]] = {}
    metric_of, hib, info = {}, {}, {}
    records = with_recipes(records)
    for r in records:
        col = column_key(r)
        metric_of.setdefault(col, r["primary_metric"]["name"])
        hib.setdefault(col, bool(r["primary_metric"]["higher_is_better"]))
        info.setdefault(
            col,
            {
                "task": r["task"],
                "model": model_label(r),
                "dataset": dataset_name(r),
                "scale": r["scale"],
                "recipe": r.get("_recipe") or None,
                **({"budget": r["_at_budget"]} if r.get("_at_budget") is not None else {}),
            },
        )
        groups.setdefault((row_key(r), col), []).append(r)
    cells = {key: Cell.from_records(recs) for key, recs in groups.items()}
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
    return Table(columns, rows, cells, metric_of, hib, best, info, baseline, baseline_of, confidence)
