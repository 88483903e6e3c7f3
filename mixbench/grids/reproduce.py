"""The paper's grids (``configs/paper/mixln_iclr2025.yaml``): expand, run, and compare with the paper.

``mixbench reproduce table1`` runs every (task, norm) of Table 1 at paper scale; ``--scale proxy`` runs
the same placements with the grid's proxy overrides (small model, short budget) on any C4-format
corpus given as ``data.path=...``.  The runs go through :mod:`mixbench.grids.runner` (``--jobs``, ``--resume``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import shlex
import sys

from omegaconf import OmegaConf

from ..core.errors import ConfigError
from ..results.sweep import Sweep
from ..results.table import Cell
from ..training.config import compose, norm_spec
from ..training.run import existing_run, finished_record, finished_runs
from .downstream import paper_comparison as downstream_comparison
from .downstream import reproduce_downstream
from .dry_run import summarize_plan
from .ladder import reproduce_ladder
from .ladder_analysis import reproduce_ladder_analysis
from .paper import grid, grid_scales, paper_runs
from .rlhf import paper_comparison as rlhf_comparison
from .rlhf import reproduce_rlhf
from .runner import run_many

log = logging.getLogger(__name__)


def expand(
    name: str,
    scale: str | None = None,
    seeds: tuple[int, ...] = (0,),
    extra: tuple[str, ...] = (),
    root=None,
    best_from: str | None = None,
    only: tuple[str, ...] = (),
) -> list[list[str]]:
    """The ``mixbench run`` argument lists of a grid (``scale`` None: the grid's default, see :func:`grid_scales`).

    A proxy block with ``sweep: {KEY: [v, ...]}`` runs every value of KEY (one sweep key a block).  With ``best_from``
    (a results folder) it runs each placement at the value that was best there instead (:func:`best_sweep_value`);
    a block whose sweep is ``{KEY: {best_of_block: i}}`` takes the best value of block ``i`` and runs only then.
    ``only``: just the runs whose arguments include every one of these ``key=value`` items; a configuration that cannot
    match is left out before its best value is looked up (that lookup composes it with ``extra``, which may hold
    settings of the matching tasks only)."""
    scale = scale or grid_scales(name, root)[0]
    if scale not in grid_scales(name, root):
        raise ConfigError(f"{name} runs at {' or '.join(grid_scales(name, root))} scale only; use --scale {grid_scales(name, root)[0]}")
    runs = paper_runs(name, root)
    if scale == "paper":
        combos = [(r.task, r.norm, r.overrides, ()) for r in runs]
    elif scale == "proxy":  # one proxy block, or a list of them run in order
        blocks = _proxy_blocks(name, root)
        placements = list(dict.fromkeys((r.norm, r.overrides) for r in runs))
        combos = [
            (task, norm, overrides, tuple(proxy["overrides"]) + tuple(variant) + swept)
            for index, proxy in enumerate(blocks)
            for task in proxy["tasks"]
            for variant in proxy["variants"]
            for norm, overrides in placements
            if _may_match(only, [f"task={task}", f"norm={norm}", *proxy["overrides"], *variant, *overrides, *extra], _sweep(proxy)[0])
            for swept in _swept(blocks, index, task, norm, overrides, tuple(variant), extra, best_from)
        ]
    else:
        raise ConfigError(f"unknown --scale {scale!r}; valid: paper, proxy")
    argvs = [
        [f"task={task}", f"norm={norm}", *scale_overrides, *overrides, f"seed={seed}", *extra]
        for task, norm, overrides, scale_overrides in combos
        for seed in seeds
    ]
    return [argv for argv in argvs if all(item in argv for item in only)]


def _may_match(only: tuple[str, ...], args: list[str], swept_key: str | None) -> bool:
    """Whether a configuration with ``args`` (its seed and swept value still to come) can include every ``only`` item."""
    later = ("seed=", *((f"{swept_key}=",) if swept_key else ()))
    return all(item in args or item.startswith(later) for item in only)


def _proxy_blocks(name: str, root=None) -> list[dict]:
    proxy = grid(name, root).get("proxy") or []
    return proxy if isinstance(proxy, list) else [proxy]


def _sweep(block: dict) -> tuple[str | None, list | dict]:
    """A proxy block's sweep: (key, values or ``{best_of_block: i}``); (None, [()]) for a block without one."""
    sweep = block.get("sweep") or {}
    if len(sweep) > 1:
        raise ConfigError(f"a grid block sweeps one setting, got {', '.join(sweep)}")
    return next(iter(sweep.items()), (None, []))


def _swept(blocks, index, task, norm, overrides, variant, extra, best_from) -> list[tuple[str, ...]]:
    """The sweep arguments of one (block, task, variant, placement): ``[()]`` without a sweep, one ``(KEY=v,)`` per value,
    or with ``best_from`` the one best value (none where no value finished there)."""
    key, values = _sweep(blocks[index])
    if key is None:
        return [()]
    source = values.get("best_of_block", index) if isinstance(values, dict) else index
    if best_from is None:
        return [] if isinstance(values, dict) else [(f"{key}={v}",) for v in values]
    block = blocks[source]
    base = [f"task={task}", f"norm={norm}", *block["overrides"], *(block["variants"][0] if source != index else variant), *overrides]
    best = best_sweep_value(base, key, _sweep(block)[1], [*extra, f"results_dir={best_from}"])
    if best is None:
        log.warning("--best-from %s: no finished run of %s over %s: left out", best_from, " ".join(base), key)
        return []
    return [(f"{key}={best}",)]


def best_sweep_value(base: list[str], key: str, values: list, extra: list[str]):
    """The value of ``key`` among ``values`` that ``mixbench table --best-over KEY`` picks from the finished runs of
    ``base`` (any seed, under ``extra``'s results_dir), by the rule of :data:`mixbench.results.sweep.RULE` (fewest
    stalled/diverged seeds, then the best mean over its completed seeds); None when no value has a completed seed."""
    base_cfg = compose([*base, *extra])
    records = []
    for value in values:
        cfg = base_cfg.copy()
        OmegaConf.update(cfg, key, value)
        records += finished_runs(cfg, norm_spec(cfg).label())
    if not records:
        return None
    return Sweep.from_records(records, key, records[0]["primary_metric"]["higher_is_better"]).best


def reproduce(
    name: str,
    scale: str,
    seeds: tuple[int, ...],
    extra: tuple[str, ...],
    dry_run: bool,
    jobs: int = 1,
    resume: bool = False,
    only: tuple[str, ...] = (),
    launcher: str = "local",
    best_from: str | None = None,
    analyze: bool = False,
    data_elsewhere: bool = False,
) -> list | None:
    """Run a paper grid (see :mod:`mixbench.grids.runner`); with ``dry_run`` only print its ``mixbench run`` commands
    (stdout), then its total, GPU-time estimate and data needs (stderr; data that is not here: a ``ConfigError``, see
    :mod:`mixbench.grids.dry_run`).  ``only``: run just the configurations whose arguments include every one of these
    ``key=value`` items.  ``scale`` None: the grid's default.  ``best_from``: a swept grid's placements at their best
    values there (:func:`expand`).  ``analyze``: a ladder grid's layer analyses (:mod:`mixbench.grids.ladder_analysis`).
    ``data_elsewhere``: a dry run for runs that read their data on another machine: data missing here is a warning."""
    settings = (name, scale, seeds, extra, dry_run, jobs, resume, only, launcher, best_from, analyze)
    if not dry_run:
        return _reproduce(*settings)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        _reproduce(*settings)
    sys.stdout.write(printed.getvalue())
    sys.stdout.flush()
    summarize_plan(name, printed.getvalue(), data_here=not data_elsewhere)
    return None


def _reproduce(name, scale, seeds, extra, dry_run, jobs, resume, only, launcher, best_from, analyze) -> list | None:
    scale = scale or grid_scales(name)[0]
    if best_from is not None and not any(_sweep(b)[0] for b in _proxy_blocks(name)):
        raise ConfigError(f"--best-from needs a grid that sweeps a setting (e.g. lr_sensitivity); {name} sweeps none")
    kind = grid(name).get("kind")
    if analyze and kind != "ladder":  # before any chain starts: the flag is refused, not ignored
        raise ConfigError(f"--analyze belongs to ladder grids (mixbench reproduce ladder --analyze); {name} is not one")
    if kind == "downstream":  # pretrain → SFT → eval chains (paper Table 2)
        if launcher != "local":
            raise ConfigError(
                f"{name}'s pretrain → fine-tune → evaluate chains run with the local launcher only; "
                "submit the chain itself as one job (e.g. sbatch --wrap 'mixbench reproduce ...')"
            )
        return reproduce_downstream(name, scale, seeds, extra, dry_run, jobs, resume, only)
    if kind == "rlhf":  # pretrain → SFT → RM → ReMax chains (paper Table 3)
        return reproduce_rlhf(name, scale, seeds, extra, dry_run, jobs, resume, only)
    if analyze:
        return reproduce_ladder_analysis(name, extra, dry_run, jobs, only, launcher)
    if kind == "ladder":  # placements across model sizes, lrs planned round by round
        return reproduce_ladder(name, seeds, extra, dry_run, jobs, resume, only, launcher)

    argvs = expand(name, scale, seeds, extra, best_from=best_from, only=only)
    if not argvs:
        raise ConfigError(f"--only {' '.join(only)} matches no run of {name}; see mixbench reproduce {name} --dry-run")
    if dry_run:
        configs = [compose(argv) for argv in argvs]  # validates the whole grid
        if resume:  # list what a --resume run would still train
            pending = [argv for argv, cfg in zip(argvs, configs) if not _finished(cfg)]
            log.info(
                "--resume: %d of %d runs finished in their results_dir, %d listed", len(argvs) - len(pending), len(argvs), len(pending)
            )
            argvs = pending
        sys.stdout.write("".join("mixbench run " + " ".join(shlex.quote(a) for a in argv) + "\n" for argv in argvs))
        return None
    return run_many(argvs, jobs, resume, launcher)


def _finished(cfg) -> bool:
    folder = existing_run(cfg, norm_spec(cfg).label())
    return folder is not None and finished_record(folder) is not None


def paper_comparison(name: str, records: list[dict], root=None) -> tuple[list[str], list[str], dict]:
    """Rows (norm labels), columns (tasks) and cells {(row, col): (ours, paper)} from the paper-scale records, where
    ``ours`` is a :class:`mixbench.results.Cell`: counted by seed (repeats of a seed are one sample, see ``Cell``)."""

    if grid(name, root).get("kind") == "downstream":  # accuracy per downstream task (paper Table 2)
        return downstream_comparison(name, records, root)
    if grid(name, root).get("kind") == "rlhf":  # final reward (paper Table 3)
        return rlhf_comparison(name, records, root)
    cells, rows, cols = {}, [], []
    for run in paper_runs(name, root):
        cfg = compose([f"task={run.task}", f"norm={run.norm}", *run.overrides], root)
        label = norm_spec(cfg).label()
        matching = [r for r in records if r["scale"] == "paper" and r["task"] == run.task and r["norm"].get("label") == label]
        if label not in rows:
            rows.append(label)
        if run.task not in cols:
            cols.append(run.task)
        cells[(label, run.task)] = (Cell.from_records(matching), run.paper)
    return rows, cols, cells


def render_comparison(name: str, rows, cols, cells, fmt: str = "md") -> str:
    """``ours / paper (Δ = our mean − paper)`` per cell, e.g. ``33.50 ± 0.20 (n=3) / 33.12 (+0.38)``; ``md`` or ``csv``."""
    import csv
    import io

    def cell(row, col):
        if (row, col) not in cells:
            return ""
        ours, paper = cells[(row, col)]
        paper_s = f"{paper:g}" if paper is not None else "–"
        if not ours.records:
            return f"not run / {paper_s}"
        delta = f" ({ours.mean - paper:+.2f})" if paper is not None and ours.mean is not None else ""
        return f"{ours.summary()} / {paper_s}{delta}"

    title = grid(name)["title"]
    table = [[row, *[cell(row, c) for c in cols]] for row in rows]
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([["norm", *cols], *table])
        return buf.getvalue()
    lines = [f"{title}: ours / paper (Δ)", "| norm | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(values) + " |" for values in table]
    lines += [
        "",
        "ours: mean ± std over seeds, n = seeds that finished (records of the same seed are repeats, averaged "
        "into one sample); k/n diverged = k of n seeds diverged (a seed's latest record decides).",
    ]
    return "\n".join(lines) + "\n"
