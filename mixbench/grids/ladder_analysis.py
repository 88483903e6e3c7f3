"""Layer analyses across the ladder's sizes (``mixbench reproduce ladder --analyze``).

The ladder's own runs keep no weights.  For every rung of the grid's ``analysis.family``, each placement of
``analysis.placements`` (Pre-LN and Mix-LN) is trained again at its best lr there (the tuned table's rule,
:class:`mixbench.results.sweep.Sweep`, over the ladder's finished records), seed ``analysis.seed``, with its weights
kept, into ``<results_dir>_analysis/``, a folder beside the ladder's (so that neither the ladder's planner nor ``mixbench
table --results-dir <results_dir>`` counts a rerun as another seed); then each of
``analysis.analyses`` (``angular``: d(x^l, x^(l+n)) between block inputs, Eq. 8; ``prune``: ΔP(l), Eq. 9) measures them
side by side into ``<results_dir>/analysis/<task>/<what>.json`` + ``.png`` (angular over ``analysis.tokens``
validation tokens, default the paper's 256K; ΔP over ``analysis.limit_val_batches`` batches, default all).  A rung
where a placement has no best lr yet (no finished sweep) is left out, with a line saying so.  Reruns are
``resume=auto``: a finished one is analysed again without training.
"""

from __future__ import annotations

import logging
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.constants import ANGULAR_TOKENS
from ..core.errors import ConfigError
from ..core.run_files import ANALYSIS_DIR
from ..training.config import compose
from .ladder import LR_KEY, best_lr, family_settings, rungs
from .paper import grid
from .runner import run_many

log = logging.getLogger(__name__)

ANALYSES = ("angular", "prune")


@dataclass(frozen=True)
class RungAnalysis:
    """One rung's analysis: its reruns (one argument list a placement, in the grid's order) and where they are written."""

    task: str
    argvs: tuple[tuple[str, ...], ...]
    out_dir: Path


def analysis_spec(name: str, root=None) -> dict:
    spec = grid(name, root).get("analysis")
    if not spec:
        raise ConfigError(f"{name} has no analysis section: --analyze is for ladder grids that name one (e.g. ladder)")
    if not spec.get("family") or not spec.get("placements"):
        raise ConfigError(f"{name} analysis: name a family and its placements, e.g. {{family: llama, placements: [pre, mix]}}")
    unknown = set(spec.get("analyses", ANALYSES)) - set(ANALYSES)
    if unknown:
        raise ConfigError(f"{name} analysis: unknown analyses {sorted(unknown)}; choose from {', '.join(ANALYSES)}")
    return spec


def reruns_folder(results_dir: Path) -> Path:
    """``<results_dir>_analysis``: where the reruns with weights go, beside the ladder's folder, never inside it."""
    results_dir = results_dir if results_dir.name else results_dir.resolve()
    return results_dir.with_name(f"{results_dir.name}_{ANALYSIS_DIR}")


def analysis_plan(name: str, extras: tuple[str, ...] = (), only: tuple[str, ...] = (), root=None) -> tuple[list[RungAnalysis], list[str]]:
    """The rungs whose placements all have a best lr, as reruns with weights kept; and a line for each rung left out.
    ``only``: the rungs whose settings include every one of these (e.g. ``task=c4_llama_130m``)."""
    spec = analysis_spec(name, root)
    ladder_rungs = rungs(name, root)
    families = {r.family for r in ladder_rungs}
    if spec["family"] not in families:
        raise ConfigError(f"{name} analysis: no family {spec['family']!r}; the grid has {', '.join(sorted(families))}")
    planned, skipped = [], []
    for rung in (r for r in ladder_rungs if r.family == spec["family"]):
        extra = family_settings(extras, rung.family, families)
        if not all(item in [f"task={rung.task}", *rung.overrides, *extra] for item in only):
            continue
        argvs, results_dir, missing = [], None, []
        for placement in spec["placements"]:
            base = [f"task={rung.task}", f"norm={placement}", *rung.overrides]
            cfg = compose([*base, *extra], root)
            best = best_lr(cfg)
            if best is None:
                missing.append(placement)
                continue
            results_dir = Path(str(cfg.results_dir))
            argvs.append(
                (
                    *base,
                    f"{LR_KEY}={best:g}",
                    f"seed={int(spec.get('seed', 0))}",
                    *extra,
                    "save_weights=true",
                    f"results_dir={reruns_folder(results_dir)}",
                )
            )
        if missing:
            skipped.append(
                f"{rung.task}: no best lr yet for {', '.join(missing)} (no finished run, or it failed at every lr); not analysed"
            )
        else:
            planned.append(RungAnalysis(rung.task, tuple(argvs), results_dir / ANALYSIS_DIR / rung.task))
    return planned, skipped


def reproduce_ladder_analysis(
    name: str, extra: tuple[str, ...], dry_run: bool, jobs: int, only: tuple[str, ...], launcher: str, root=None
) -> list | None:
    """Train the reruns of :func:`analysis_plan` (``resume``: a finished one is kept) and analyse each rung's side by
    side; ``dry_run``: print the reruns' ``mixbench run`` lines."""
    if launcher != "local":
        raise ConfigError("--analyze runs its reruns and analyses here (--launcher local): the analyses need the reruns' weights")
    planned, skipped = analysis_plan(name, extra, only, root)
    for line in skipped:
        log.warning("%s", line)
    if dry_run:
        sys.stdout.write("".join("mixbench run " + " ".join(shlex.quote(a) for a in argv) + "\n" for r in planned for argv in r.argvs))
        return None
    if not planned:
        raise ConfigError(f"{name} --analyze: no rung has a best lr for every analysed placement yet; run mixbench reproduce {name} first")
    outcomes = run_many([list(a) for r in planned for a in r.argvs], jobs, True, launcher)
    from ..analysis import runner

    spec = analysis_spec(name, root)
    whats = spec.get("analyses", list(ANALYSES))
    tokens, batches = int(spec.get("tokens", ANGULAR_TOKENS)), spec.get("limit_val_batches")
    by_rung = iter(outcomes)
    for rung in planned:
        ran = [next(by_rung) for _ in rung.argvs]
        if any(o.status != "completed" or o.run_dir is None for o in ran):
            log.error("%s: a rerun did not complete (%s); its analyses are skipped", rung.task, ", ".join(o.status for o in ran))
            continue
        subjects = [runner.subject_from_run(o.run_dir) for o in ran]
        for what in whats:
            runner.measure(what, subjects, rung.out_dir, tokens=tokens, limit_val_batches=batches)
    return outcomes
