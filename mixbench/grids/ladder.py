"""The size ladder: placements across model sizes, each at its own best learning rate (``mixbench reproduce ladder``).

A ``kind: ladder`` grid (``configs/grids/ladder.yaml``) names families, each with its rungs (a task at one model size)
and the placements to run on every rung.  The learning rates are not fixed ahead: each round reads the finished runs
in ``results_dir`` and plans the next runs of every (rung, placement) on the rung's half-decade lr grid
``anchor × {…, 0.1, 0.3, 1, 3, 10, …}``:

1. **sweep** (seed 0): the start lr (the placement's, else the rung's) and one half-decade step on each side; then one
   step beyond the best lr wherever the best is the highest or the lowest lr tried.  Where every lr tried failed
   (stalled or diverged), those three already are ≥ 3 failed lrs spanning a decade
   (:func:`mixbench.results.sweep.failed_everywhere`): the placement fails at every lr — unless the lowest of them was
   still improving when its budget ended (:func:`mixbench.results.sweep.still_improving`): then its seeds (2) and one
   step lower, until the lowest failed lr stops improving or ``max_lrs`` is reached;
2. **seeds**: 3 at the best lr (chosen by the tuned table's rule, :class:`mixbench.results.sweep.Sweep`), up to 5 where
   they disagree (some train, some stall or diverge).  A rung with ``seeds_first: true`` asks for the seeds at the best
   lr so far in every sweep round too, ahead of the sweep's runs: where a run is so costly (1B) that a lease may end
   mid-sweep, the best so far gets its interval first.

An lr run by hand between two grid lrs (5e-4 on the 1e-3 grid) counts as one more lr tried, at its own place
(:func:`grid_position`): it can be the best (then it gets the seeds), and a step from it goes to the grid lr beside it.

A (rung, placement) is done when its best lr is bracketed (a tried lr on each side of it, worse or failed) and has its
seeds, when it failed at every lr tried (≥ 3 of them spanning a decade), or when it has used ``max_lrs`` lrs.  A
language-model rung's budget is ``budget.fraction`` of the paper's tokens for that size (Table 1), as optimizer steps
of ``global_batch × seq_len`` tokens, a multiple of 4 (validation at 25 / 50 / 75 / 100 %).
"""

from __future__ import annotations

import logging
import math
import shlex
import sys
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..core.tasks import get_task
from ..results.sweep import Sweep
from ..training.config import compose, norm_spec
from ..training.run import finished_runs
from .paper import grid
from .runner import run_many

log = logging.getLogger(__name__)

LR_KEY = "optim.lr"
VALIDATIONS = 4  # validations a run: at 25 / 50 / 75 / 100 % of its steps
LOWEST_FAILED_SEEDS = 2  # seeds at the lowest failed lr where it was still improving (results.sweep.still_improving)


def lr_at(anchor: float, k: int) -> float:
    """The k-th lr of the half-decade grid around ``anchor``: k even → anchor × 10^(k/2); k odd → 3 × that of k − 1
    (1e-3: …, 1e-4, 3e-4, 1e-3, 3e-3, …; 4e-3: …, 1.2e-3, 4e-3, 1.2e-2, 4e-2, …)."""
    return float(f"{anchor * 10 ** (k // 2) * (3 if k % 2 else 1):.3g}")


def grid_index(anchor: float, lr: float) -> int:
    """The k of :func:`lr_at` nearest ``lr`` (3 ≈ √10 puts odd steps 0.05 of a step below their half-decade)."""
    return round(2 * math.log10(lr / anchor))


def grid_position(anchor: float, lr: float) -> float:
    """Where ``lr`` sits on the grid of :func:`lr_at`: its k where it is a grid lr, else k plus the share of the way
    (in log lr) from the grid lr below it (k) to the one above (k + 1): an lr run by hand between two grid lrs (5e-4 on
    the 1e-3 grid, at −0.58: between 3e-4 at −1 and 1e-3 at 0) keeps a place of its own, in lr order."""
    k = grid_index(anchor, lr)
    if lr_at(anchor, k) == lr:
        return k
    below = k if lr_at(anchor, k) < lr else k - 1
    low, high = math.log(lr_at(anchor, below)), math.log(lr_at(anchor, below + 1))
    return below + (math.log(lr) - low) / (high - low)


def records_by_position(anchor: float, records) -> dict[float, list[dict]]:
    """``records`` (of one placement, any lr and seed) by the :func:`grid_position` of their lr: one lr a position."""
    found: dict[float, list[dict]] = {}
    for record in records:
        found.setdefault(grid_position(anchor, float(record["config"]["optim"]["lr"])), []).append(record)
    return found


def _above(position: float) -> int:
    """The first grid index above ``position``."""
    return math.floor(position) + 1


def _below(position: float) -> int:
    """The first grid index below ``position``."""
    return math.ceil(position) - 1


@dataclass(frozen=True)
class Rung:
    """One model size of a family: its ``task``, the lr grid's ``anchor`` and the settings every run of it takes."""

    family: str
    task: str
    anchor: float
    overrides: tuple[str, ...]
    starts: tuple[tuple[str, float | None], ...]  # (placement, start lr or None: the anchor), in the grid's order
    seeds_first: bool = False  # the best lr so far gets its seeds in every sweep round, ahead of the sweep


@dataclass(frozen=True)
class Step:
    """What one (rung, placement) needs next: its runs ((grid position, seed) pairs: a grid index, or the position of an
    lr already run off the grid) and, when it needs none, why it is done."""

    runs: tuple[tuple[float, int], ...] = ()
    done: str = ""


def lm_budget(budget: dict, paper_tokens: float | None) -> int:
    """Optimizer steps of the rung's token budget at ``budget.tokens_per_step``, a multiple of :data:`VALIDATIONS` (at
    least that many).  The budget is either ``budget.fraction`` × the rung's ``paper_tokens`` (size and data grow
    together) or ``budget.tokens``, the same for every rung (size at equal data)."""
    per_step = int(budget["tokens_per_step"])
    if ("fraction" in budget) == ("tokens" in budget):
        raise ConfigError(f"ladder budget: give either fraction (of each rung's paper_tokens) or tokens (every rung), got {budget}")
    if "tokens" in budget:
        tokens = float(budget["tokens"])
    else:
        fraction = float(budget["fraction"])
        if not 0 < fraction <= 1:
            raise ConfigError(f"ladder budget: fraction must be in (0, 1], got {budget}")
        if paper_tokens is None:
            raise ConfigError(f"ladder budget: fraction {fraction} needs each rung's paper_tokens, or give budget.tokens")
        tokens = fraction * paper_tokens
    if per_step < 1 or not tokens > 0:
        raise ConfigError(f"ladder budget: tokens and tokens_per_step must be > 0, got {budget}")
    return max(VALIDATIONS, VALIDATIONS * round(tokens / per_step / VALIDATIONS))


def rungs(name: str, root=None) -> list[Rung]:
    """The rungs of ladder grid ``name``, family by family, smallest first."""
    spec = grid(name, root)
    out = []
    for family in spec["families"]:
        placements = family["placements"]
        for rung in family["rungs"]:
            overrides = [*family.get("overrides", []), *rung.get("overrides", [])]
            if "budget" in family:
                paper_tokens = rung.get("paper_tokens")
                steps = lm_budget(family["budget"], None if paper_tokens is None else float(paper_tokens))
                overrides += [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps // VALIDATIONS}"]
            seeds_first = bool(rung.get("seeds_first", False))
            out.append(Rung(family["name"], rung["task"], float(rung["lr"]), tuple(overrides), _starts(placements, rung), seeds_first))
    return out


def _starts(placements: dict, rung: dict) -> tuple[tuple[str, float | None], ...]:
    """Each placement's start lr on ``rung``: the rung's own ``starts`` entry (e.g. a size's best lr in another grid),
    else the family's, else None (the rung's anchor)."""
    own = rung.get("starts") or {}
    unknown = set(own) - set(placements)
    if unknown:
        raise ConfigError(f"ladder rung {rung['task']}: starts names {', '.join(sorted(unknown))}, not among the family's placements")
    return tuple((p, float(own[p]) if own.get(p) is not None else None if v is None else float(v)) for p, v in placements.items())


def next_step(
    records_by_k: dict[float, list[dict]], start: int, higher_is_better: bool, seeds: dict, max_lrs: int, seeds_first: bool = False
) -> Step:
    """The next runs of one (rung, placement) from its finished records by grid position (:func:`records_by_position`;
    see the module's rules: a best lr off the grid gets its seeds, and steps go to the grid lrs beside it); with
    ``seeds_first``, a sweep round also asks for the missing seeds at the best lr so far, ahead of its own runs."""
    step = _next_step(records_by_k, start, higher_is_better, seeds, max_lrs)
    if not seeds_first or not step.runs or not records_by_k:
        return step
    sweep, best = _best_index(records_by_k, higher_is_better)
    if best is None:  # no lr has trained: nothing to seed
        return step
    first = _missing_seeds(records_by_k[best], best, sweep, seeds)
    return Step((*first, *(run for run in step.runs if run not in first)))


def _best_index(records_by_k: dict[float, list[dict]], higher_is_better: bool) -> tuple[Sweep, float | None]:
    """The sweep over every lr tried and its best lr's grid position (None where every lr tried failed)."""
    sweep = Sweep.from_records([r for k in sorted(records_by_k) for r in records_by_k[k]], LR_KEY, higher_is_better)
    if sweep.best is None:
        return sweep, None
    return sweep, next(k for k in sorted(records_by_k) if records_by_k[k][0]["config"]["optim"]["lr"] == sweep.best)


def _missing_seeds(records: list[dict], best: float, sweep: Sweep, seeds: dict) -> tuple[tuple[float, int], ...]:
    """The seeds the best lr (grid position ``best``, its finished ``records``) still needs: ``seeds.best``, or
    ``seeds.disagree`` where its seeds disagree (some trained, some stalled or diverged)."""
    cell = sweep.cells[sweep.best]
    have = {r["seed"] for r in records}
    mixed = cell.n and cell.n < len(have)
    wanted = int(seeds["disagree"] if mixed else seeds["best"])
    return tuple((best, s) for s in range(wanted) if s not in have)


def _next_step(records_by_k: dict[float, list[dict]], start: int, higher_is_better: bool, seeds: dict, max_lrs: int) -> Step:
    sweep_start = [k for k in (start - 1, start, start + 1) if k not in records_by_k]
    if sweep_start:
        return Step(tuple((k, 0) for k in sweep_start))
    sweep, best = _best_index(records_by_k, higher_is_better)
    tried = sorted(records_by_k)
    if best is None:  # every lr tried failed: at least the start and its neighbours, a decade (failed_everywhere)
        if not sweep.lowest_improving:
            return Step(done=f"failed at every lr tried ({len(tried)} lrs spanning ≥ a decade)")
        # the lowest lr was still learning when its budget ended: its seeds, and one lr lower
        have = {r["seed"] for r in records_by_k[tried[0]]}
        missing = tuple((tried[0], s) for s in range(LOWEST_FAILED_SEEDS) if s not in have)
        return _within(Step(((_below(tried[0]), 0), *missing)), tried, max_lrs)
    if best == tried[-1]:
        return _within(Step(((_above(best), 0),)), tried, max_lrs)
    if best == tried[0]:
        return _within(Step(((_below(best), 0),)), tried, max_lrs)
    missing = _missing_seeds(records_by_k[best], best, sweep, seeds)
    return Step(missing) if missing else Step(done=f"best lr bracketed, {len({r['seed'] for r in records_by_k[best]})} seeds there")


def _within(step: Step, tried: list[float], max_lrs: int) -> Step:
    """``step``, or done where it would take the lrs tried past ``max_lrs``."""
    return step if len(tried) < max_lrs else Step(done=f"stopped at max_lrs={max_lrs} lrs, best lr not bracketed")


def family_settings(extras: tuple[str, ...], family: str, families: set[str]) -> tuple[str, ...]:
    """The settings of ``extras`` for ``family``'s runs: ``FAMILY:key=value`` for that family only (prefix dropped),
    ``key=value`` for every family."""
    own = []
    for item in extras:
        prefix, sep, rest = item.partition(":")
        if sep and "=" not in prefix:
            if prefix not in families:
                raise ConfigError(f"{item!r}: no ladder family {prefix!r}; prefix a setting with one of {', '.join(sorted(families))}")
            if prefix == family:
                own.append(rest)
        else:
            own.append(item)
    return tuple(own)


def plan(name: str, extras: tuple[str, ...] = (), only: tuple[str, ...] = (), root=None) -> tuple[list[list[str]], list[str]]:
    """The next round of ladder ``name``: the ``mixbench run`` argument lists, and one line a (rung, placement) saying
    what it needs or why it is done; the runs at each placement's start lr come first (then one step away, …), so that a
    round cut short has tried every placement there.  ``extras``: settings of every run (``llama:data.path=...``: of one family's).
    ``only``: the (rung, placement)s whose arguments include every one of these."""
    spec = grid(name, root)
    seeds, max_lrs = spec.get("seeds", {"best": 3, "disagree": 5}), int(spec.get("max_lrs", 7))
    ranked, lines = [], []  # (how far the run's lr is from its start lr, argv): a round cut short has every start lr first
    ladder_rungs = rungs(name, root)
    families = {r.family for r in ladder_rungs}
    for rung in ladder_rungs:
        extra = family_settings(extras, rung.family, families)
        for placement, start_lr in rung.starts:
            base = [f"task={rung.task}", f"norm={placement}", *rung.overrides]
            if not all(item in [*base, *extra] for item in only if not item.startswith((f"{LR_KEY}=", "seed="))):
                continue
            cfg = compose([*base, *extra], root)
            by_k = records_by_position(rung.anchor, finished_runs(cfg, norm_spec(cfg).label(), aside=(LR_KEY,)))
            start = grid_index(rung.anchor, start_lr if start_lr is not None else rung.anchor)
            step = next_step(by_k, start, _higher_is_better(cfg), seeds, max_lrs, seeds_first=rung.seeds_first)
            runs = [(abs(k - start), [*base, f"{LR_KEY}={_lr(rung.anchor, k, by_k)}", f"seed={seed}", *extra]) for k, seed in step.runs]
            ranked += [(rank, argv) for rank, argv in runs if all(item in argv for item in only)]
            lrs = ", ".join(f"{_lr(rung.anchor, k, by_k):g}×{len(rs)}" for k, rs in sorted(by_k.items())) or "none"
            lines.append(f"{rung.task} {placement}: finished {lrs}; " + (step.done or f"next {len(runs)} run(s)"))
    return [argv for _, argv in sorted(ranked, key=lambda item: item[0])], lines  # stable: rungs and placements in order


def _lr(anchor: float, position: float, by_k: dict[float, list[dict]]) -> float:
    """The lr at ``position``: that of its records where it has some (an lr run off the grid), else the grid's."""
    return float(by_k[position][0]["config"]["optim"]["lr"]) if position in by_k else lr_at(anchor, int(position))


def best_lr(cfg) -> float | None:
    """The best lr of ``cfg``'s finished records at any lr (the tuned table's rule); None where none finished or every
    lr tried failed."""
    records = finished_runs(cfg, norm_spec(cfg).label(), aside=(LR_KEY,))
    return Sweep.from_records(records, LR_KEY, _higher_is_better(cfg)).best if records else None


def _higher_is_better(cfg) -> bool:
    return get_task(cfg.task.name).primary_metric.higher_is_better  # as the task's records say


def reproduce_ladder(
    name: str, seeds: tuple[int, ...], extra: tuple[str, ...], dry_run: bool, jobs: int, resume: bool, only: tuple[str, ...], launcher: str
) -> list | None:
    """Rounds of :func:`plan` and runs until every (rung, placement) is done; ``dry_run``: print the next round's
    ``mixbench run`` lines (stdout) and each (rung, placement)'s state (log)."""
    if seeds != (0,):
        raise ConfigError(f"{name} picks its own seeds (the sweep seed 0; 3 at each best lr, up to 5 where they disagree): drop --seeds")
    outcomes, rounds = [], 0
    while True:
        argvs, lines = plan(name, extra, only)
        for line in lines:
            log.info("%s", line)
        if dry_run:
            sys.stdout.write("".join("mixbench run " + " ".join(shlex.quote(a) for a in argv) + "\n" for argv in argvs))
            return None
        if not argvs:
            log.info("%s: every (rung, placement) is done after %d round(s)", name, rounds)
            return outcomes
        rounds += 1
        log.info("%s round %d: %d run(s)", name, rounds, len(argvs))
        ran = run_many(argvs, jobs, True, launcher)  # resume: a round cut short goes on where it stopped
        outcomes += ran
        if all(o.status == "failed" for o in ran):  # nothing finished: another round would plan the same runs
            log.error("%s round %d: no run finished; stopping (see the runs' logs)", name, rounds)
            return outcomes
