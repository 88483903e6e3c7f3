"""Running many configurations: the grid runner behind ``mixbench reproduce`` and ``mixbench run -m`` (sweeps).

Every configuration is composed (validated) before any runs.  With ``jobs=1`` they run one after another in this
process; with ``jobs>1`` that many ``mixbench run`` subprocesses share the machine (small proxy runs leave most of a
GPU idle), each logging to ``<run>/console.log`` and each on its share of the cores (:func:`core_share`: its torch
threads through ``OMP_NUM_THREADS``, its ``data.num_workers`` capped), so that the runs do not oversubscribe them; a
Ctrl-C stops the running ones at their next step and starts no more (:class:`Children`).  With ``resume=True`` every
run gets ``resume=auto``: a configuration whose record is finished is skipped, an interrupted one continues from its
newest checkpoint.  A failed run is recorded and the grid goes on; :func:`summarize` says which failed.  Each run
process is given this one's project folder (``--project``).  A grid run here writes its manifest
(:mod:`mixbench.grids.manifest`) as it starts, which ``mixbench status`` reads to count the runs not started yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..core.errors import ConfigError
from ..core.run_files import CONSOLE_FILE, RECORD_FILE
from ..core.storage import open_append
from ..training.config import compose, norm_spec
from ..training.preemption import Interrupted
from ..training.preflight import preflight
from ..training.run import RESUMABLE_STOPS, run, run_directory
from .launchers import Outcome, project_arguments, submit_many
from .manifest import GridManifest, grid_manifest

log = logging.getLogger(__name__)


def run_many(argvs: list[list[str]], jobs: int = 1, resume: bool = False, launcher: str = "local") -> list[Outcome]:
    """Run every configuration: here (``local``, ``jobs`` at a time) or as SLURM jobs (``slurm``, see
    :mod:`mixbench.grids.launchers`)."""

    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    if launcher == "slurm" and jobs != 1:
        raise ConfigError("--jobs is for the local launcher; with --launcher slurm every run is a job the cluster schedules")
    given = [list(argv) for argv in argvs]
    argvs = [[*argv, "resume=auto"] if resume else list(argv) for argv in argvs]
    configs = [compose(argv) for argv in argvs]  # validate every configuration before running any
    share = core_share(jobs) if launcher == "local" and jobs > 1 else None
    if share is not None:
        log.info("--jobs %d on %d cores: each run gets %d (torch threads, data.num_workers at most that)", jobs, cores(), share)
        for argv, cfg in zip(argvs, configs):
            cap_workers(argv, cfg, share)
    for cfg in configs:
        preflight(cfg)
    if launcher == "slurm":
        return submit_many(argvs, configs, resume)
    with grid_manifest(given, configs, jobs) as manifest:
        if jobs == 1:  # in this thread: a run's preemption handlers (SIGTERM, SIGUSR1) can be set only in the main thread
            return in_turn(argvs, configs, manifest)
        children = Children()
        with children.on_ctrl_c(), ThreadPoolExecutor(jobs) as pool:
            outcomes = list(
                pool.map(lambda i: _in_subprocess(i, len(argvs), argvs[i], configs[i], share, children, manifest), range(len(argvs)))
            )
    if children.stopping:
        raise GridInterrupted(sum(o.record is not None and o.status == "interrupted" for o in outcomes), children.not_started)
    return outcomes


def in_turn(argvs: list[list[str]], configs: list, manifest: GridManifest) -> list[Outcome]:
    """The runs one after another in this process.  A Ctrl-C inside a run stops it at its step (its
    :class:`~mixbench.training.preemption.Interrupted` stops the grid); one between two runs stops the grid there."""
    outcomes = []
    try:
        for i, (argv, cfg) in enumerate(zip(argvs, configs)):
            manifest.started(i)
            try:
                outcomes.append(_in_process(i, len(argvs), argv, cfg))
            except RESUMABLE_STOPS as stop:  # the run stopped at its step and the grid with it: not "running" any more
                manifest.ended(i, None, None, status=getattr(stop, "status", "failed"))
                raise
            manifest.ended(i, outcomes[-1].run_dir, outcomes[-1].record)
    except KeyboardInterrupt:  # as a run started, before it took Ctrl-C over (or between two runs)
        if len(outcomes) < len(argvs):
            manifest.not_started(len(outcomes))
        if not outcomes:  # the grid leaves nothing (grid_manifest removes its manifest)
            raise
        raise GridInterrupted(0, len(argvs) - len(outcomes)) from None
    return outcomes


class GridInterrupted(Interrupted):
    """Ctrl-C stopped a grid of runs side by side (exit status 130, as one run's)."""

    def __init__(self, stopped: int, not_started: int):
        Exception.__init__(
            self,
            f"interrupted (Ctrl-C): {stopped} running run(s) stopped at a checkpoint, {not_started} not started; "
            "the same command with --resume continues",
        )
        self.signame, self.step, self.checkpoint, self.requeued = "SIGINT", None, None, False


class Children:
    """The run processes of a grid side by side.  On Ctrl-C (:meth:`on_ctrl_c`) no more start and each running one is
    sent SIGINT: it checkpoints its step and exits 130 (:mod:`mixbench.training.preemption`); a further Ctrl-C is
    passed on the same way (the runs ignore it while they stop)."""

    def __init__(self):
        self.lock, self.running, self.stopping, self.not_started = threading.Lock(), set(), False, 0

    def run(self, command: list[str], **options) -> int | None:
        """``command``'s exit status, or None when the grid is stopping and it was not started."""
        with self.lock:
            if self.stopping:
                self.not_started += 1
                return None
            process = subprocess.Popen(command, **options)
            self.running.add(process)
        try:
            return process.wait()
        finally:
            with self.lock:
                self.running.discard(process)

    def interrupt(self, signum=signal.SIGINT, frame=None) -> None:
        with self.lock:  # taken by the pool's threads only, never by the main thread this handler runs in
            if not self.stopping:
                log.warning("Ctrl-C: the %d running run(s) stop at their next step; no more start", len(self.running))
            self.stopping = True
            for process in self.running:
                process.send_signal(signal.SIGINT)

    @contextlib.contextmanager
    def on_ctrl_c(self) -> Iterator[None]:
        """While the block runs (in the main thread; elsewhere signals cannot be handled), SIGINT calls :meth:`interrupt`."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self.interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a SLURM allocation or ``taskset``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def core_share(jobs: int) -> int:
    """The cores each of ``jobs`` runs side by side gets: :func:`cores` // ``jobs``, at least 1."""
    return max(1, cores() // jobs)


def cap_workers(argv: list[str], cfg, share: int) -> None:
    """In place: a run's ``data.num_workers`` at most ``share`` (its config and the arguments its process gets)."""
    workers = cfg.data.get("num_workers")
    if isinstance(workers, int) and workers > share:
        cfg.data.num_workers = share
        argv.append(f"data.num_workers={share}")


def thread_environment(threads: int) -> dict[str, str]:
    """This process's environment with the OpenMP / MKL thread counts (torch's intra-op threads) set to ``threads``."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def run_one(i: int, total: int, argv: list[str], cfg, in_subprocess: bool = False) -> Outcome:
    """Run ``mixbench run <argv>`` (composed: ``cfg``), logged as run ``i + 1`` of ``total``: in this process, or as a
    subprocess writing its console output to the run folder's ``console.log`` (for runs side by side)."""
    return _in_subprocess(i, total, argv, cfg) if in_subprocess else _in_process(i, total, argv, cfg)


def _in_process(i: int, total: int, argv: list[str], cfg) -> Outcome:
    log.info("[%d/%d] mixbench run %s", i + 1, total, " ".join(argv))
    try:
        record = run(cfg, command=["mixbench", "run", *argv])
        return Outcome(argv, Path(record["run_dir"]), record)
    except RESUMABLE_STOPS:  # preempted, or the disk is full: the grid stops with this run (--resume continues it)
        raise
    except Exception as err:  # recorded as status=failed by run(); the grid goes on
        log.error("run failed: %s: %s", type(err).__name__, err)
        return Outcome(argv, None, None, f"{type(err).__name__}: {err}")


def _in_subprocess(
    i: int,
    total: int,
    argv: list[str],
    cfg,
    threads: int | None = None,
    children: Children | None = None,
    manifest: GridManifest | None = None,
) -> Outcome:
    """The run as a ``mixbench [--project P] run`` process (the project of this one); ``threads``: its torch threads
    (:func:`thread_environment`), else as ours; ``children``: the grid's processes (none started once a Ctrl-C stops
    the grid); ``manifest``: the grid's, told when the run starts and ends."""
    children = children or Children()
    if children.stopping:
        children.not_started += 1
        return Outcome(argv, None, None, "not started: the grid was interrupted")
    run_dir = run_directory(cfg, norm_spec(cfg).label())
    log.info("[%d/%d] mixbench run %s  → %s", i + 1, total, " ".join(argv), run_dir)
    if manifest is not None:
        manifest.started(i, run_dir)
    with open_append(run_dir / CONSOLE_FILE) as console:
        code = children.run(
            [sys.executable, "-m", "mixbench.cli", *project_arguments(), "run", *argv, f"run_dir={run_dir}"],
            stdout=console,
            stderr=subprocess.STDOUT,
            env=thread_environment(threads) if threads is not None else None,
        )
    outcome = _subprocess_outcome(i, argv, run_dir, code)
    if manifest is not None:
        manifest.ended(i, run_dir, outcome.record, "failed" if code is not None else "not started")
    return outcome


def _subprocess_outcome(i: int, argv: list[str], run_dir: Path, code: int | None) -> Outcome:
    if code is None:
        return Outcome(argv, run_dir, None, "not started: the grid was interrupted")
    try:
        record = json.loads((run_dir / RECORD_FILE).read_text())
    except (OSError, ValueError):
        log.error("run %d exited with %d without a record; see %s", i + 1, code, run_dir / CONSOLE_FILE)
        return Outcome(argv, run_dir, None, f"exit status {code}; see {run_dir / CONSOLE_FILE}")
    return Outcome(argv, run_dir, record)


def summarize(outcomes: list[Outcome], what: str) -> int:
    """Log the counts per status and every failed run; return the exit status (1 if any run failed)."""
    counts = {s: sum(o.status == s for o in outcomes) for s in dict.fromkeys(o.status for o in outcomes)}
    log.info("%s: %d runs, %s", what, len(outcomes), ", ".join(f"{n} {s}" for s, n in counts.items()) or "none")
    for o in outcomes:
        if o.job:
            log.info("SLURM job %s: %s (%s)", o.job, o.status, o.run_dir)
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        error = o.error or (o.record or {}).get("error")
        job = f" [SLURM job {o.job}]" if o.job else ""
        log.error("%s: %s (%s)%s%s", o.status, o.command, o.run_dir or "no run folder", job, f": {error}" if error else "")
    return 1 if failed else 0
