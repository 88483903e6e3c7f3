"""The plans ``mixbench search`` may try, as ``mixbench run`` overrides.

* ``alpha``: Mix-LN's count of leading Post-LN blocks, ``norm=mix norm.num_post=k`` for k in 0..L;
* ``plan``: the grammar "k Post-LN blocks first, then Pre-LN, the last j blocks of one kind from ``kinds``"
  (k + j ≤ L; e.g. kinds ``sandwich,lns,peri``), as ``norm=custom norm.layers=[...]``;
* ``blocks``: every per-block list over ``kinds`` (small L only: |kinds|^L plans).

Every plan is checked by :class:`mixbench.layers.NormSpec` before a study starts.  ``PRUNERS``: how a study stops
plans early (successive halving, Hyperband, or never).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..layers.placement import NormSpec
from ..layers.placements import block_placements, plan_summary

PRUNERS = ("halving", "hyperband", "none")
SPACES = ("alpha", "plan", "blocks")
MAX_PLANS = 4096  # a categorical space larger than this is no longer searchable plan by plan


def grammar_plans(num_layers: int, tail_kinds: tuple[str, ...]) -> list[tuple[str, ...]]:
    """k × post, then pre, the last j of them of a kind in ``tail_kinds`` (k + j ≤ L); each distinct plan once,
    ordered by k, then kind, then j."""
    plans: dict[tuple[str, ...], None] = {}
    for k in range(num_layers + 1):
        plans[("post",) * k + ("pre",) * (num_layers - k)] = None
        for kind in tail_kinds:
            for j in range(1, num_layers - k + 1):
                plans[("post",) * k + ("pre",) * (num_layers - k - j) + (kind,) * j] = None
    return list(plans)


def block_plans(num_layers: int, kinds: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every per-block list over ``kinds`` (``len(kinds) ** num_layers`` plans, at most :data:`MAX_PLANS`)."""
    if len(kinds) ** num_layers > MAX_PLANS:
        raise ConfigError(
            f"--space blocks with {len(kinds)} kinds and {num_layers} blocks has {len(kinds) ** num_layers} plans "
            f"(at most {MAX_PLANS}); use --space plan, fewer kinds or fewer blocks"
        )
    return list(itertools.product(kinds, repeat=num_layers))


@dataclass(frozen=True)
class Space:
    """A search space over the plans of a model with ``num_layers`` blocks."""

    name: str
    num_layers: int
    kinds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in SPACES:
            raise ConfigError(f"unknown --space {self.name!r}; valid: {', '.join(SPACES)}")
        valid = block_placements()
        bad = [k for k in self.kinds if k not in valid]
        if bad:
            raise ConfigError(f"--kinds has unknown block placement(s) {bad}; valid: {', '.join(valid)}")
        if self.name == "blocks" and len(self.kinds) < 2:
            raise ConfigError("--space blocks needs --kinds with at least two block placements, e.g. --kinds pre,post")
        if self.name == "alpha" and self.kinds:
            raise ConfigError("--kinds belongs to --space plan or blocks; --space alpha searches Mix-LN's num_post")
        for plan in self.plans():  # every plan must be a valid norm setting before a trial runs
            self.spec(plan)

    def plans(self) -> list[tuple[str, ...]]:
        L = self.num_layers
        if self.name == "alpha":
            return [("post",) * k + ("pre",) * (L - k) for k in range(L + 1)]
        if self.name == "plan":
            return grammar_plans(L, self.kinds)
        return block_plans(L, self.kinds)

    def spec(self, plan: tuple[str, ...]) -> NormSpec:
        if self.name == "alpha":
            return NormSpec(placement="mix", num_post=plan.count("post"))
        return NormSpec(placement="custom", layers=plan)

    def overrides(self, plan: tuple[str, ...]) -> list[str]:
        """The ``mixbench run`` arguments of ``plan``."""
        if self.name == "alpha":
            return ["norm=mix", f"norm.num_post={plan.count('post')}"]
        return ["norm=custom", f"norm.layers=[{','.join(plan)}]"]

    def suggest(self, trial) -> tuple[str, ...]:
        """The plan an Optuna trial draws: ``num_post`` (an integer, ordered) or ``plan`` (a category, its summary)."""
        if self.name == "alpha":
            k = trial.suggest_int("num_post", 0, self.num_layers)
            return ("post",) * k + ("pre",) * (self.num_layers - k)
        codes = {plan_summary(list(p)): p for p in self.plans()}
        return codes[trial.suggest_categorical("plan", list(codes))]

    def plan_of(self, params: dict) -> tuple[str, ...]:
        """The plan of a finished trial's ``params``."""
        if self.name == "alpha":
            k = params["num_post"]
            return ("post",) * k + ("pre",) * (self.num_layers - k)
        return {plan_summary(list(p)): p for p in self.plans()}[params["plan"]]
