"""One table cell: the records of one norm × column counted by seed (:class:`Cell`), and its difference from the
baseline row's cell (:class:`Delta`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from . import stats
from .records import _finite, _seed_key, _time_order, outcome, primary_value, run_identity

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
    seed has one outcome: that of its latest record (by ``started_at``) that did not crash or stop on Ctrl-C — a
    ``failed`` or ``interrupted`` record is no training outcome, so it decides only when every record of the seed
    ended so (then the latest of them decides).  A seed whose outcome is ``completed`` contributes one
    sample: the mean primary metric of its completed records.  ``mean`` / ``std`` are over those samples, i.e. over
    the finished seeds only.  A seed that diverged or stalled keeps the value it measured (where finite) in
    ``measured``, apart from the samples: :meth:`measured_mean`.
    """

    samples: dict = field(default_factory=dict)  # seed → value (finished seeds; repeats averaged)
    measured: dict = field(default_factory=dict)  # seed → value of a seed that diverged or stalled (finite; repeats averaged)
    outcomes: dict = field(default_factory=dict)  # seed → completed | diverged | stalled | failed | interrupted | pruned
    records: int = 0
    delta: Delta | None = None

    @classmethod
    def from_records(cls, records: list[dict]) -> Cell:
        """The cell of ``records``; copies of one run (the same ``run_id``, seed and start time: a confirmation run
        reused from a grid with ``mixbench search --reuse-from``) count once."""
        records = list({run_identity(r): r for r in records}.values())
        by_seed: dict = {}
        for r in sorted(records, key=_time_order):
            by_seed.setdefault(_seed_key(r["seed"]), []).append(r)
        cell = cls(records=len(records))
        for seed, recs in by_seed.items():
            outcomes = [outcome(r) for r in recs]
            decisive = [o for o in outcomes if o not in STOPPED]
            cell.outcomes[seed] = (decisive or outcomes)[-1]
            ended = cell.outcomes[seed]
            values = [float(primary_value(r)) for r, o in zip(recs, outcomes) if o == ended and _finite(primary_value(r))]
            if ended == "completed":
                cell.samples[seed] = statistics.fmean(values)
            elif ended in MEASURED and values:
                cell.measured[seed] = statistics.fmean(values)
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
    def interrupted(self) -> int:
        return self.count("interrupted")

    def measured_mean(self, what: str) -> float | None:
        """The mean value measured by the seeds that ended ``what`` (``diverged``, ``stalled``): not a sample, and not
        in :attr:`mean`; None where none of them left a finite value."""
        values = [v for seed, v in self.measured.items() if self.outcomes[seed] == what]
        return statistics.fmean(values) if values else None

    @property
    def mean(self) -> float | None:
        return stats.mean_std(self.values)[0]

    @property
    def std(self) -> float | None:
        return stats.mean_std(self.values)[1]

    def summary(self, digits: int = 2) -> str:
        """``mean ± std (n=…)`` and the seeds that did not finish, e.g. ``30.13 ± 0.41 (n=2) 1/3 diverged``.  A cell
        without a finished seed shows in parentheses what its diverged or stalled seeds measured, e.g.
        ``(1367.42) 2/2 stalled`` (``(1367.42, n=1) 2/2 stalled``: one of the two left a finite value)."""
        parts = []
        if self.values:
            s = _num(self.mean, digits) + (f" ± {_num(self.std, digits)}" if self.std is not None else "")
            n = f"n={self.n}" + (f" seed{'s' * (self.n != 1)}, {_repeats(self.repeats)}" if self.repeats else "")
            parts.append(f"{s} ({n})")
        for o in NOT_FINISHED:
            if self.count(o):
                parts.append(("" if self.values else self._measured_text(o, digits)) + f"{self.count(o)}/{self.n_seeds} {o}")
        if not self.values and self.repeats:
            parts.append(f"({_repeats(self.repeats)})")
        return " ".join(parts)

    def ended_text(self, outcomes: tuple[str, ...] | None = None) -> str:
        """``1/3 stalled``, ``2/5 diverged, 1/5 stalled``: the seeds that ended one of ``outcomes`` (default: every
        outcome but finishing, :data:`NOT_FINISHED`); blank where none did."""
        return ", ".join(f"{self.count(o)}/{self.n_seeds} {o}" for o in outcomes or NOT_FINISHED if self.count(o))

    def _measured_text(self, what: str, digits: int) -> str:
        """``(1367.42) `` for :meth:`summary`; ``, n=k`` where only k of the seeds that ended ``what`` left a value."""
        value = self.measured_mean(what)
        if value is None:
            return ""
        k = sum(self.outcomes[seed] == what for seed in self.measured)
        return f"({_num(value, digits)}{f', n={k}' if k < self.count(what) else ''}) "

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


NOT_FINISHED = ("diverged", "stalled", "failed", "interrupted", "pruned")
STOPPED = ("failed", "interrupted")  # a crash or a Ctrl-C: no training outcome; any other record of the seed decides
MEASURED = ("diverged", "stalled")  # outcomes whose value a cell keeps (a crash left none; a pruned trial is a search's)


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def _repeats(k: int) -> str:
    return f"{k} repeat{'s' * (k != 1)}"
