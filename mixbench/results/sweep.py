"""One table cell picked over the values of one setting (``mixbench table --best-over optim.lr``): each norm at its own
best learning rate, with its LR sensitivity (:mod:`.sensitivity`).

The records of one norm × base column (the column without the setting in its recipe) are split by the setting's value
into one :class:`~.cell.Cell` each.  The best value counts every seed that trained (:data:`RULE`): first the smallest
share of seeds that stalled or diverged, then the best mean over its finished seeds (respecting the metric's
direction), then more finished seeds, then the smaller value; a value with no finished seed cannot be best.  So a value
where 1 of 3 seeds stalled loses to one where the seeds it has all finished, however good its other two seeds were.
Seeds that crashed, were interrupted or pruned (``failed``, ``interrupted``, ``pruned``) say nothing about the value
and are not counted.  Where the sweep has one seed at most values and more at the best, each value is judged by the
seeds it has, and the table then shows the chosen cell with all its seeds.  Picking the best of several noisy means
favours a value that was lucky (winner's curse): the chosen cell is optimistic, most when the choice rests on one seed
per value; re-running the chosen value with fresh seeds and tabling those alone removes it.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from ..core.errors import ConfigError
from ..core.settings import flat_settings
from .cell import MEASURED, NOT_FINISHED, Cell
from .records import _finite, _is_recipe, _seed_key, annotate_recipes, outcome
from .sensitivity import LOSS, capped, init_loss, lr_sensitivity

log = logging.getLogger("mixbench")
ENDED = MEASURED  # seeds that trained and did not finish (diverged, stalled): they count against their value
TRAINED = ("completed", *ENDED)  # a seed's outcome that says something about its value (not a crash or a pruned trial)
RULE = (
    "the value with the smallest share of its seeds stalled or diverged, crashed seeds not counted; then the best mean "
    "over its finished seeds; then more finished seeds; then the smaller value"
)


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


def legend(key: str) -> str:
    """What a ``--best-over KEY`` cell says, for the table's legend: how its value was picked and what S is."""
    name = key.rsplit(".", 1)[-1]
    return (
        f"--best-over {key}: each cell is its row's best {name}, shown with all its seeds (@{name}), picked as "
        f"{RULE.replace('value', name)}. Δ compares it with the baseline row at the baseline's own best {name}. Picked among noisy "
        f"means, the best is optimistic (winner's curse), most where each {name} has one seed. k/n {name}s stalled: no "
        f"{name} of the row had a finished seed. S = LR sensitivity (Wortsman et al. 2023, §2.2) over the row's {name}s η "
        "where some seed trained: mean of ℓ(η) − ℓ*, ℓ(η) = mean over the seeds that trained (finished, stalled or "
        "diverged) of val/loss as measured, capped at ℓ₀ (ℓ₀ where not finite), ℓ₀ = loss at init (ln vocab / ln "
        "classes), ℓ* = min ℓ(η); lower = flatter; (k of n): swept over fewer values than the column."
    )


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


def ended_share(cell: Cell) -> float | None:
    """The share of ``cell``'s seeds that trained (:data:`TRAINED`) and stalled or diverged; None where none trained."""
    trained = sum(cell.count(o) for o in TRAINED)
    return sum(cell.count(o) for o in ENDED) / trained if trained else None


FAILED_LRS = 3  # a placement "fails at every lr" once it failed at ≥ this many lrs …
DECADE = 9.5  # … spanning at least this ratio: a decade on a half-decade grid (3 ≈ √10 rounds some steps down)


def failed_everywhere(values) -> bool:
    """Whether the lrs ``values`` (every one of them failed) are enough to say a placement fails at every lr: ≥
    :data:`FAILED_LRS` of them spanning a decade (the size ladder stops sweeping there; its "breaks at" says so)."""
    lrs = sorted(float(v) for v in values)
    return len(lrs) >= FAILED_LRS and lrs[-1] >= DECADE * lrs[0]


IMPROVING_NATS = 0.05  # a failed run whose val/loss fell this much over its second half was still learning


def still_improving(record: dict) -> bool:
    """Whether a run that failed was still learning when its budget ended: its val/loss fell by ≥ :data:`IMPROVING_NATS`
    from the validation at half its steps to its last (1B Post-LN at 1.5e-4: 6.973 → 6.873, 0.099 nats; at 5e-4 and
    1.5e-3 it fell 0.02).  A sweep that fails everywhere is not over while its lowest lr still improves."""
    points = [(v.get("fraction"), (v.get("metrics") or {}).get("val/loss")) for v in record.get("validations") or [] if isinstance(v, dict)]
    points = [(f, x) for f, x in points if isinstance(f, (int, float)) and isinstance(x, (int, float)) and _finite(x)]
    if len(points) < 2:
        return False
    half = min(points, key=lambda p: abs(p[0] - 0.5))
    return half[1] - points[-1][1] >= IMPROVING_NATS


def best_value(cells: dict, higher_is_better: bool):
    """The value of ``cells`` (value → :class:`Cell`, in order) picked by :data:`RULE`; None where no seed finished."""
    scored = [(ended_share(c), -c.mean if higher_is_better else c.mean, -c.n, _order(v), v) for v, c in cells.items() if c.n]
    return min(scored, key=lambda s: s[:4])[4] if scored else None


def loss_at(records: list[dict], init: float, decided: dict) -> float | None:
    """ℓ(η) of the records at one value: the mean over its seeds that trained (finished, stalled or diverged) of each
    seed's val/loss, :func:`~.sensitivity.capped` at ℓ₀ (``init``; ℓ₀ where it is not finite).  A seed's outcome is
    decided as in :class:`Cell` (``decided``: the outcomes of the records' cell, :attr:`Cell.outcomes`) and its
    repeats with that outcome are averaged.  None where no seed trained."""

    def view(r: dict) -> dict:
        if outcome(r) != decided[_seed_key(r["seed"])] or outcome(r) not in TRAINED:
            return {**r, "status": "failed"}  # a repeat the seed's outcome overrules, or a crash: not counted
        loss = capped(_metrics(r).get(LOSS), init)
        return {**r, "status": "completed", "metrics": {LOSS: loss}, "primary_metric": {"name": LOSS, "higher_is_better": False}}

    samples = Cell.from_records([view(r) for r in records]).values
    return statistics.fmean(samples) if samples else None


@dataclass
class Sweep:
    """The cells of one norm × base column, one per value of ``key`` (in order), the best value and ℓ₀."""

    key: str
    cells: dict = field(default_factory=dict)  # value → Cell of the primary metric
    losses: dict = field(default_factory=dict)  # value → ℓ(η) (:func:`loss_at`); empty: no ℓ₀, or a finished record has no val/loss
    best: object = None  # the chosen value (:func:`best_value`); None when no value has a finished seed
    init: float | None = None  # ℓ₀, mean over the records
    column_values: int = 0  # values of key in the whole column (set by the table)
    higher_is_better: bool = False  # the primary metric's direction
    lowest_improving: bool = False  # a run at the lowest value was still improving when it ended (:func:`still_improving`)

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
        inits = [x for x in map(init_loss, records) if x is not None]
        init = statistics.fmean(inits) if inits else None
        complete = init is not None and all(_finite(_metrics(r).get(LOSS)) for r in records if outcome(r) == "completed")
        losses = {v: loss_at(groups[repr(v)], init, cells[v].outcomes) for v in values} if complete else {}
        lowest_improving = bool(values) and any(still_improving(r) for r in groups[repr(values[0])] if outcome(r) in ENDED)
        best = best_value(cells, higher_is_better)
        return cls(key, cells, losses, best, init, higher_is_better=higher_is_better, lowest_improving=lowest_improving)

    @property
    def cell(self) -> Cell:
        """The cell at the best value (all its seeds); an empty cell (no records) when no value finished."""
        return self.cells[self.best] if self.best is not None else Cell()

    def outcome(self, value) -> str:
        """``completed`` where a seed at ``value`` finished; else the most common outcome among its seeds that trained
        (diverged or stalled), so that one stalled seed beside crashed ones makes the value stalled; else (every seed
        crashed, was interrupted or pruned) the most common of those."""
        cell = self.cells[value]
        if cell.n:
            return "completed"
        counted = [o for o in ENDED if cell.count(o)] or NOT_FINISHED
        return max(counted, key=lambda o: (cell.count(o), -NOT_FINISHED.index(o)))

    @property
    def trained(self) -> list:
        """The values S is taken over: those where some seed finished, diverged or stalled (not those that only crashed)."""
        return [v for v in self.cells if self.outcome(v) in TRAINED]

    @property
    def bracketed(self) -> bool:
        """Whether the best value has a value that trained (:attr:`trained`) on each side of it: tuned, not an edge of
        the sweep; a value whose seeds only crashed brackets nothing."""
        values = sorted(float(v) for v in self.trained)
        return self.best is not None and values[0] < float(self.best) < values[-1]

    @property
    def sensitivity(self) -> float | None:
        """S of :mod:`.sensitivity` over :attr:`trained`, ℓ(η) from :func:`loss_at`.  None without ℓ₀, without val/loss,
        when no seed finished at any value (a row where nothing trained has no optimum to be flat around), or over one
        value (not a sweep: S would be 0 whatever the row does, which reads as perfectly flat)."""
        if not self._has_losses or self.best is None or len(self.trained) < 2:
            return None
        return lr_sensitivity([self.losses[v] for v in self.trained], self.init)

    @property
    def _has_losses(self) -> bool:
        """Whether S can be measured at all: ℓ₀ is known and the records hold val/loss."""
        return self.init is not None and bool(self.losses)

    @property
    def best_loss(self) -> float | None:
        """ℓ*: the lowest ℓ(η) over :attr:`trained` (each capped at ℓ₀); None where no seed finished at any value."""
        if not self._has_losses or self.best is None:
            return None
        return min(self.losses[v] for v in self.trained)

    def _unit(self, n: int) -> str:
        name = self.key.rsplit(".", 1)[-1]
        return name + ("s" if n != 1 and not name.endswith("s") else "")

    def summary(self, digits: int = 2) -> str:
        """``31.20 ± 0.30 (n=3) @lr 3e-3``, or where no value finished the best value its stalled or diverged seeds
        measured and where, then the counts: ``(936.12 @lr 1e-4) 5/5 lrs stalled`` (``3/5 lrs diverged 2/5 lrs
        stalled``; no value in parentheses where none of them left a finite one)."""
        name = self.key.rsplit(".", 1)[-1]
        if self.best is not None:
            return f"{self.cell.summary(digits)} @{name} {value_text(self.best)}"
        outcomes = [self.outcome(v) for v in self.cells]
        unit = self._unit(len(outcomes))
        counts = " ".join(f"{outcomes.count(o)}/{len(outcomes)} {unit} {o}" for o in NOT_FINISHED if o in outcomes)
        measured = [(m, v) for v, c in self.cells.items() for o in ENDED if (m := c.measured_mean(o)) is not None]
        if not measured:
            return counts
        value, at = (max if self.higher_is_better else min)(measured, key=lambda mv: mv[0])
        return f"({value:.{digits}f} @{name} {value_text(at)}) {counts}"

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
