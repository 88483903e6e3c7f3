"""Small statistics over seeds, as pure functions: mean and sample standard deviation, the Student-t quantile and
Welch's confidence interval for a difference of two means.

Every sample here is one number per seed (see :func:`mixbench.results.Cell`: repeats of a seed are averaged into
one sample before they get here), so ``n`` is a number of seeds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """``(x̄, s)``: the mean ``x̄ = Σx / n`` and the sample standard deviation ``s = sqrt(Σ(x − x̄)² / (n − 1))``;
    ``s`` is None for fewer than 2 values, both are None for none."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t distribution with ``dof`` (real, > 0) degrees of freedom, e.g.
    ``t_quantile(0.975, 4) = 2.776`` (``scipy.special.stdtrit``, what ``scipy.stats.t.ppf`` computes, without
    importing ``scipy.stats``: a quarter of the import time of ``mixbench table``)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {p}")
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {dof}")
    from scipy.special import stdtrit

    return float(stdtrit(dof, p))


def welch_dof(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom ``ν = (vₐ + v_b)² / (vₐ² / (nₐ − 1) + v_b² / (n_b − 1))`` with
    ``v = s² / n``.  When both variances are 0 (ν is 0/0) it returns the pooled ``nₐ + n_b − 2``."""
    va, vb = var_a / n_a, var_b / n_b
    denominator = va * va / (n_a - 1) + vb * vb / (n_b - 1)
    if denominator == 0.0:
        return float(n_a + n_b - 2)
    return (va + vb) ** 2 / denominator


class Interval(NamedTuple):
    diff: float  # mean(a) − mean(b)
    low: float
    high: float
    dof: float  # Welch–Satterthwaite degrees of freedom

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return excludes_zero(self.low, self.high)


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval:
    """Welch's ``confidence`` interval for ``mean(a) − mean(b)`` (unequal variances):
    ``d = ā − b̄``, ``SE = sqrt(sₐ²/nₐ + s_b²/n_b)``, ``d ± t_{(1+c)/2, ν} · SE`` with ν from :func:`welch_dof`.
    Needs at least 2 values on each side (``ValueError`` otherwise).  Zero variance on both sides gives the
    zero-width interval ``[d, d]``."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs at least 2 values on each side, got {len(a)} and {len(b)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    (mean_a, sd_a), (mean_b, sd_b) = mean_std(a), mean_std(b)
    diff = mean_a - mean_b
    se = math.sqrt(sd_a**2 / len(a) + sd_b**2 / len(b))
    dof = welch_dof(sd_a**2, len(a), sd_b**2, len(b))
    half = t_quantile((1.0 + confidence) / 2.0, dof) * se if se > 0 else 0.0
    return Interval(diff, diff - half, diff + half, dof)


def excludes_zero(low: float, high: float) -> bool:
    """``low > 0`` or ``high < 0``: the interval ``[low, high]`` does not contain 0."""
    return low > 0.0 or high < 0.0
