"""``mixbench status [DIR] [--watch [SECONDS]]``: what the runs of a grid or sweep under a results folder are doing,
read from their files (:mod:`mixbench.results.progress`).  It writes nothing, and imports neither torch nor Lightning."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path

from ..core.errors import ConfigError
from ..core.text import printable

STYLES = {"running": "green", "starting": "green", "planned": "cyan", "stopped": "yellow", "interrupted": "yellow", "failed": "red",
          "diverged": "red", "stalled": "magenta", "planned (grid stopped)": "yellow", "unreadable": "red"}  # fmt: skip


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours < 24 else f"{hours // 24}d{hours % 24:02d}h"


def _step(run) -> str:
    if run.step is None and run.total is None:
        return "–"
    total = "?" if run.total is None else f"{'' if run.exact_total else '≈'}{run.total:,}"
    return f"{'?' if run.step is None else f'{run.step:,}'}/{total}"


def planned_part(plans) -> str:
    """``planned: 6 runs, about 1h30m (3 rounds of 2 at a time, 30m each, ...)``, or their time unknown."""
    planned = sum(plan.planned for plan in plans)
    text = f"planned: {planned} run{'s' if planned != 1 else ''}"
    unknown = [plan for plan in plans if plan.median_s is None]
    if unknown:
        return text + ", time unknown (no run of their grid has finished its budget yet)"
    if len(plans) > 1:
        return text + f", about {duration(max(plan.remaining_s() for plan in plans))} (grids side by side)"
    (plan,) = plans
    rounds = -(-plan.planned // plan.jobs)
    each = f"{duration(plan.median_s)} each, the median of its grid's finished runs"
    return text + f", about {duration(plan.remaining_s())} ({rounds} round{'s' if rounds != 1 else ''} of {plan.jobs} at a time, {each})"


def summary(progress) -> str:
    """``7 runs: 2 running · 3 finished · ...; running: 1,234 steps left, all done in 12m (about 19:02)``; a grid's
    planned runs add their expected time (:func:`planned_part`)."""
    counts = progress.counts()
    if not counts:
        return "no runs"
    line = f"{len(progress.runs)} run{'s' if len(progress.runs) != 1 else ''}: " + " · ".join(f"{n} {state}" for state, n in counts.items())
    if "running" not in counts and not progress.plans:
        return line + "; nothing running"
    parts = []
    if "running" in counts:
        left = progress.remaining_steps()
        parts.append(f"running: {left:,} steps left" if left is not None else "running: steps left unknown")
    if progress.plans:
        parts.append(planned_part(progress.plans))
    eta = progress.eta_s()
    if eta is not None:
        done = datetime.fromtimestamp(progress.taken_at + eta).strftime("%H:%M")
        parts.append(f"all done in {duration(eta)} (about {done})")
    unknown = sum(r.state == "running" and r.eta_s is None for r in progress.runs)
    if unknown:
        parts.append(f"{unknown} running without an ETA yet")
    return line + "; " + ", ".join(parts)


def run_name(run, root: Path) -> str:
    """The run's folder relative to ``root`` (``.`` for ``root``); a planned run's, the folder it will be made in."""
    from ..results.progress import GRID_STOPPED, PLANNED

    for base in (root, root.resolve()):
        try:
            name = str(run.run_dir.relative_to(base))
        except ValueError:
            continue
        return ("" if name == "." else name + "/") + "…" if run.state in (PLANNED, GRID_STOPPED) else name
    return str(run.run_dir)


def view(progress):
    """The rich renderable of a :class:`~mixbench.results.progress.FolderProgress`: a heading with the totals, then
    one row per run."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    taken = datetime.fromtimestamp(progress.taken_at).strftime("%H:%M:%S")
    heading = f"[bold]{escape(printable(progress.root))}[/bold] at {taken}: {escape(printable(summary(progress)))}"
    if not progress.runs:
        return Group(heading)
    table = Table(box=None, pad_edge=False)
    for column in ("run", "state", "step", "steps/s", "ETA", "updated"):
        table.add_column(column, no_wrap=column != "run", overflow="fold")
    table.add_column("note", overflow="fold")
    for run in progress.runs:
        name = run_name(run, progress.root)
        style = STYLES.get(run.state, "")
        table.add_row(
            escape(printable(name)),
            f"[{style}]{run.state}[/{style}]" if style else run.state,
            _step(run),
            f"{run.rate:.3g}" if run.rate else "–",
            duration(run.eta_s) if run.eta_s is not None else "–",
            f"{duration(progress.taken_at - run.updated)} ago" if run.updated else "–",
            escape(printable(run.note)),
        )
    return Group(heading, table)


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..results.progress import folder_progress
    from ..results.sources import default_runs_dir

    root = Path(args.dir) if args.dir is not None else default_runs_dir()
    # a folder that does not exist yet has no runs: the default one before the first run, any one under --watch (a
    # grid about to start); a folder given once that does not exist is a typo
    if root.exists() and not root.is_dir() or args.dir is not None and args.watch is None and not root.exists():
        raise ConfigError(
            f"{root}: no such folder; give a results folder (mixbench run puts its runs in {default_runs_dir()}) or a run folder"
        )
    if args.watch is not None and args.watch <= 0:
        raise ConfigError(f"--watch {args.watch:g}: give the seconds between refreshes, more than 0 (e.g. --watch 10)")
    console = Console()
    if args.watch is None:
        console.print(view(folder_progress(root)))
        return 0
    return watch(root, args.watch, console)


def watch(root: Path, seconds: float, console) -> int:
    """Show the runs under ``root`` again every ``seconds`` until Ctrl-C (exit status 0): in place on a terminal, one
    view after another elsewhere (a pipe, a file)."""
    from rich.live import Live

    from ..results.progress import folder_progress

    seen: dict = {}  # observations of earlier refreshes: their rates span the whole watch
    try:
        if console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(view(folder_progress(root, seen)), refresh=True)
                    time.sleep(seconds)
        else:
            while True:
                console.print(view(folder_progress(root, seen)))
                console.print()
                time.sleep(seconds)
    except KeyboardInterrupt:
        return 0


def add_status_command(sub) -> None:
    """Add ``status`` to the sub-command parsers ``sub`` of ``mixbench``."""
    status = sub.add_parser(
        "status",
        help="what the runs of a grid or sweep are doing: state, step, rate, ETA",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="mixbench status [DIR] [--watch [SECONDS]]: each run under DIR — running, starting, stopped "
        "(resume=auto continues it), interrupted, failed, diverged, stalled, pruned or finished — with a running "
        "run's step / budget, steps/s and ETA, and the totals.  Read from the runs' files (record, lock, checkpoints, "
        "logs/metrics.csv) and the grids' manifests; nothing is written.  A grid's runs with no folder yet are planned "
        "(planned (grid stopped) once the grid has ended); their expected time, the median of the grid's finished runs, "
        "is in the folder's ETA.",
        epilog="examples:\n"
        "  mixbench status                                  # every run under results/runs\n"
        "  mixbench status results/runs/llama_lm --watch 10  # refresh every 10 s until Ctrl-C\n",
    )
    status.add_argument("dir", nargs="?", metavar="DIR", help="a results folder, at any depth, or one run folder (default: results/runs)")
    status.add_argument(
        "--watch",
        nargs="?",
        const=5.0,
        type=float,
        metavar="SECONDS",
        help="refresh every SECONDS (default 5) until Ctrl-C; waits for a DIR a grid is about to make",
    )
    status.set_defaults(func=cmd_status)
