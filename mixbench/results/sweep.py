"""One table cell picked over the values of one setting (``mixbench table --best-over optim.lr``): each norm at its own
best learning rate, with its LR sensitivity (:mod:`.sensitivity`).

The records of one norm × base column (the column without the setting in its recipe) are split by the setting's value
into one :class:`~.cell.Cell` each.  The best value is the one whose cell has the best mean over its finished seeds
(respecting the metric's direction); a value with no finished seed cannot be best.  Ties: the value with more finished
seeds, then the smaller value.  Where the sweep has one seed at most values and more at the best, each value is judged
by the mean of the seeds it has, and the table then shows the chosen cell with all its seeds.  Picking the best of
several noisy means favours a value that was lucky (winner's curse): the chosen cell is optimistic, most when the
choice rests on one seed per value; re-running the chosen value with fresh seeds and tabling those alone removes it.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from ..core.errors import ConfigError
from ..core.settings import flat_settings
from .cell import NOT_FINISHED, Cell
from .records import _finite, _is_recipe, annotate_recipes, outcome
from .sensitivity import LOSS, init_loss, lr_sensitivity

log = logging.getLogger("mixbench")
TRAINED = ("completed", "diverged", "stalled")  # a value's outcome that says something about it (not a crash or a pruned trial)


def setting(record: dict, key: str):
    """The value of the dotted config ``key`` (``optim.lr``) in ``record["config"]``; None where it has none."""
    return flat_settings(record.get("config") or {}).get(key)


def with_setting(records: list[dict], key: str) -> list[dict]:
    """Copies of the ``records`` that set ``key``, their recipes annotated without it (its values share a column).
    Records without it are left out with a warning; a key no record sets, or one that is no training setting, is a
    :class:`ConfigError`."""
    if not _is_recipe(key):
        raise ConfigError(f"--best-over {key}: not a training setting (seeds, paths, devices, norm.* pick no cell); give e.g. optim.lr")
    having = [dict(r) for r in records if setting(r, key) is not None]
    if not having:
        raise ConfigError(f"--best-over {key}: no record sets {key} in its config; give a dotted key of a record's config, e.g. optim.lr")
    if len(having) < len(records):
        log.warning("--best-over %s: left out %d record(s) whose config does not set it", key, len(records) - len(having))
    return annotate_recipes(having, ignore=(key,))


def value_text(value) -> str:
    """``0.003`` → ``3e-3``, ``2.5e-4`` → ``2.5e-4``; 0.1 and above as they are (``0.1``, ``1``); other values as text."""
    if isinstance(value, float) and value and abs(value) < 0.1:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _order(value) -> tuple:
    """Numbers by size, then anything else by its text."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, float(value), "") if number else (1, 0.0, str(value))


def _metrics(record: dict) -> dict:
    return record["metrics"] if isinstance(record["metrics"], dict) else {}


def metric_view(record: dict, name: str) -> dict:
    """``record`` with the metric ``name`` as its primary metric (its direction from ``metric_specs``; lower is better
    where the record does not say), so that a :class:`Cell` of such views counts its seeds alike."""
    specs = {s.get("name"): s.get("higher_is_better") for s in record.get("metric_specs") or [] if isinstance(s, dict)}
    specs[record["primary_metric"]["name"]] = record["primary_metric"]["higher_is_better"]
    return {**record, "primary_metric": {"name": name, "higher_is_better": bool(specs.get(name, False))}}


@dataclass
class Sweep:
    """The cells of one norm × base column, one per value of ``key`` (in order), the best value and ℓ₀."""

    key: str
    cells: dict = field(default_factory=dict)  # value → Cell of the primary metric
    losses: dict = field(default_factory=dict)  # value → Cell of val/loss (empty: some finished record has no val/loss)
    best: object = None  # the chosen value; None when no value has a finished seed
    init: float | None = None  # ℓ₀, mean over the records
    column_values: int = 0  # values of key in the whole column (set by the table)

    @classmethod
    def from_records(cls, records: list[dict], key: str, higher_is_better: bool) -> Sweep:
        groups: dict[str, list[dict]] = {}
        value_of: dict[str, object] = {}
        for r in records:
            value = setting(r, key)
            groups.setdefault(repr(value), []).append(r)
            value_of.setdefault(repr(value), value)
        values = sorted(value_of.values(), key=_order)
        cells = {v: Cell.from_records(groups[repr(v)]) for v in values}
        complete = all(_finite(_metrics(r).get(LOSS)) for r in records if outcome(r) == "completed")
        losses = {v: Cell.from_records([metric_view(r, LOSS) for r in groups[repr(v)]]) for v in values} if complete else {}
        scored = [(c.mean, c.n, v) for v, c in cells.items() if c.mean is not None]
        best = min(scored, key=lambda s: (-s[0] if higher_is_better else s[0], -s[1], _order(s[2])))[2] if scored else None
        inits = [x for x in map(init_loss, records) if x is not None]
        return cls(key, cells, losses, best, statistics.fmean(inits) if inits else None)

    @property
    def cell(self) -> Cell:
        """The cell at the best value (all its seeds); an empty cell (no records) when no value finished."""
        return self.cells[self.best] if self.best is not None else Cell()

    def outcome(self, value) -> str:
        """``completed`` where a seed at ``value`` finished, else the most common outcome of its seeds."""
        cell = self.cells[value]
        return "completed" if cell.n else max(NOT_FINISHED, key=lambda o: (cell.count(o), -NOT_FINISHED.index(o)))

    @property
    def trained(self) -> list:
        """The values S is taken over: those whose seeds finished, diverged or stalled (not those that only crashed)."""
        return [v for v in self.cells if self.outcome(v) in TRAINED]

    @property
    def sensitivity(self) -> float | None:
        """S of :mod:`.sensitivity` over :attr:`trained`: ℓ(η) = the mean val/loss of the finished seeds at η, ℓ₀ where
        none finished.  None without ℓ₀, without val/loss, when nothing finished, or over one value (not a sweep: S
        would be 0 whatever the row does, which reads as perfectly flat)."""
        if not self._has_losses or len(self.trained) < 2:
            return None
        return lr_sensitivity([self._loss(v) for v in self.trained], self.init)

    @property
    def _has_losses(self) -> bool:
        """Whether S can be measured at all: ℓ₀ is known and the records hold val/loss."""
        return self.init is not None and bool(self.losses)

    def _loss(self, value) -> float | None:
        """ℓ(η): the mean val/loss of the finished seeds at ``value``; None where none finished."""
        return self.losses[value].mean if self.losses and self.outcome(value) == "completed" else None

    @property
    def best_loss(self) -> float | None:
        """ℓ*: the lowest ℓ(η) (capped at ℓ₀)."""
        finished = [loss for loss in map(self._loss, self.trained) if loss is not None]
        return min([*finished, self.init]) if finished and self.init is not None else None

    def _unit(self, n: int) -> str:
        name = self.key.rsplit(".", 1)[-1]
        return name + ("s" if n != 1 and not name.endswith("s") else "")

    def summary(self, digits: int = 2) -> str:
        """``31.20 ± 0.30 (n=3) @lr 3e-3``, or where no value finished ``5/5 lrs stalled`` (``3/5 lrs diverged 2/5 lrs
        stalled``)."""
        if self.best is not None:
            return f"{self.cell.summary(digits)} @{self.key.rsplit('.', 1)[-1]} {value_text(self.best)}"
        outcomes = [self.outcome(v) for v in self.cells]
        unit = self._unit(len(outcomes))
        return " ".join(f"{outcomes.count(o)}/{len(outcomes)} {unit} {o}" for o in NOT_FINISHED if o in outcomes)

    def sensitivity_text(self, digits: int = 2) -> str:
        """``S 0.42 (5 lrs, 1 stalled)``; ``(3 of 5 lrs)`` where the row was swept over fewer values than its column;
        ``(1 lr: not swept)`` without S where it has one; blank where S is undefined otherwise."""
        s = self.sensitivity
        if len(self.trained) == 1 and self._has_losses:
            return f"(1 {self._unit(1)}: not swept)"
        if s is None:
            return ""
        n, total = len(self.trained), max(self.column_values, len(self.trained))
        count = f"{n} of {total} {self._unit(total)}" if n < total else f"{n} {self._unit(n)}"
        ended = [f"{k} {o}" for o in ("diverged", "stalled") if (k := sum(self.outcome(v) == o for v in self.trained))]
        return f"S {s:.{digits}f} ({', '.join([count, *ended])})"
