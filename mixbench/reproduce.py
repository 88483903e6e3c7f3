"""The paper's grids (``configs/paper/mixln_iclr2025.yaml``): expand, run, and compare with the paper.

``mixbench reproduce table1`` runs every (task, norm) of Table 1 at paper scale; ``--scale proxy`` runs
the same placements with the grid's proxy overrides (small model, short budget) on any C4-format
corpus given as ``data.path=...``.  Runs go one after another (``jobs=1``, in this process) or ``jobs`` at a
time as ``mixbench run`` subprocesses sharing the machine (small proxy models leave most of a GPU idle); a
failed or diverged run is recorded and the grid goes on.
"""
from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from .errors import ConfigError
from .project import project_root

log = logging.getLogger(__name__)
PAPER_FILE = Path("configs") / "paper" / "mixln_iclr2025.yaml"


@dataclass(frozen=True)
class PaperRun:
    task: str
    norm: str
    overrides: tuple[str, ...]
    paper: float | None


def load_grids(root=None) -> dict:
    return OmegaConf.to_container(OmegaConf.load(project_root(root) / PAPER_FILE))


def grid(name: str, root=None) -> dict:
    grids = load_grids(root)
    if name not in grids:
        raise ConfigError(f"unknown paper table {name!r}; valid: {', '.join(grids)}")
    return grids[name]


def paper_runs(name: str, root=None) -> list[PaperRun]:
    return [PaperRun(r["task"], r["norm"], tuple(r.get("overrides", [])), r.get("paper")) for r in grid(name, root)["runs"]]


def expand(name: str, scale: str = "paper", seeds: tuple[int, ...] = (0,), extra: tuple[str, ...] = (), root=None) -> list[list[str]]:
    """The ``mixbench run`` argument lists of a grid."""
    spec = grid(name, root)
    runs = paper_runs(name, root)
    if scale == "paper":
        combos = [(r.task, r.norm, r.overrides, ()) for r in runs]
    elif scale == "proxy":
        proxy = spec["proxy"]
        placements = list(dict.fromkeys((r.norm, r.overrides) for r in runs))
        combos = [(task, norm, overrides, tuple(proxy["overrides"]) + tuple(variant))
                  for task in proxy["tasks"] for variant in proxy["variants"] for norm, overrides in placements]
    else:
        raise ConfigError(f"unknown --scale {scale!r}; valid: paper, proxy")
    return [[f"task={task}", f"norm={norm}", *scale_overrides, *overrides, f"seed={seed}", *extra]
            for task, norm, overrides, scale_overrides in combos for seed in seeds]


def reproduce(name: str, scale: str, seeds: tuple[int, ...], extra: tuple[str, ...], dry_run: bool, jobs: int = 1) -> list[dict]:
    from .config import compose

    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    argvs = expand(name, scale, seeds, extra)
    configs = [compose(argv) for argv in argvs]  # validate the whole grid before running any of it
    if dry_run:
        sys.stdout.write("".join("mixbench run " + " ".join(shlex.quote(a) for a in argv) + "\n" for argv in argvs))
        return []
    if jobs > 1:
        return _run_concurrently(argvs, configs, jobs)
    from .train import run

    records = []
    for i, (argv, cfg) in enumerate(zip(argvs, configs), 1):
        log.info("[%d/%d] mixbench run %s", i, len(argvs), " ".join(argv))
        try:
            records.append(run(cfg))
        except Exception as err:  # recorded as status=failed by run(); the grid goes on
            log.error("run failed: %s: %s", type(err).__name__, err)
    return records


def _run_concurrently(argvs: list[list[str]], configs: list, jobs: int) -> list[dict]:
    """``jobs`` ``mixbench run`` subprocesses at a time, each in a run folder made here (its console output goes to
    ``<run>/console.log``); returns the records they wrote."""
    from .config import norm_spec
    from .train import run_directory

    def one(i: int) -> dict | None:
        run_dir = run_directory(configs[i], norm_spec(configs[i]).label())
        log.info("[%d/%d] mixbench run %s  → %s", i + 1, len(argvs), " ".join(argvs[i]), run_dir)
        with open(run_dir / "console.log", "w") as console:
            done = subprocess.run([sys.executable, "-m", "mixbench.cli", "run", *argvs[i], f"run_dir={run_dir}"],
                                  stdout=console, stderr=subprocess.STDOUT)
        record = run_dir / "record.json"
        if not record.is_file():
            log.error("run %d exited with %d without a record; see %s", i + 1, done.returncode, run_dir / "console.log")
            return None
        return json.loads(record.read_text())

    with ThreadPoolExecutor(jobs) as pool:
        return [r for r in pool.map(one, range(len(argvs))) if r is not None]


def paper_comparison(name: str, records: list[dict], root=None) -> tuple[list[str], list[str], dict]:
    """Rows (norm labels), columns (tasks) and cells {(row, col): (ours mean or None, n completed, n diverged, paper)}
    from the paper-scale records."""
    import statistics

    from .config import compose, norm_spec

    cells, rows, cols = {}, [], []
    for run in paper_runs(name, root):
        cfg = compose([f"task={run.task}", f"norm={run.norm}", *run.overrides], root)
        label = norm_spec(cfg).label()
        matching = [r for r in records if r["scale"] == "paper" and r["task"] == run.task and r["norm"].get("label") == label]
        ours = [r["metrics"][r["primary_metric"]["name"]] for r in matching if r["status"] == "completed"]
        diverged = sum(r["status"] == "diverged" for r in matching)
        if label not in rows:
            rows.append(label)
        if run.task not in cols:
            cols.append(run.task)
        cells[(label, run.task)] = (statistics.fmean(ours) if ours else None, len(ours), diverged, run.paper)
    return rows, cols, cells


def render_comparison(name: str, rows, cols, cells, fmt: str = "md") -> str:
    def cell(row, col):
        if (row, col) not in cells:
            return ""
        ours, n, diverged, paper = cells[(row, col)]
        paper_s = f"{paper:g}" if paper is not None else "–"
        if ours is None:
            return f"{'diverged' if diverged else 'not run'} / {paper_s}"
        delta = f" ({ours - paper:+.2f})" if paper is not None else ""
        return f"{ours:.2f} (n={n}) / {paper_s}{delta}"

    title = grid(name)["title"]
    sep = "," if fmt == "csv" else " | "
    lines = [f"{title}: ours / paper (Δ)"] if fmt != "csv" else []
    lines.append(sep.join(["norm", *cols]) if fmt == "csv" else "| norm | " + " | ".join(cols) + " |")
    if fmt != "csv":
        lines.append("|---|" + "---|" * len(cols))
    for row in rows:
        values = [row, *[cell(row, c) for c in cols]]
        lines.append(sep.join(values) if fmt == "csv" else "| " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"
