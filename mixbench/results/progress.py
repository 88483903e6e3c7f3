"""What the runs under a results folder are doing (``mixbench status``), read from their files while they are written.

A run folder is one holding a record, a config, a run lock or a grid's console log (:mod:`mixbench.core.run_files`).
Its state:

* ``running``: a live process holds its lock.  On this host the kernel's lock table (``/proc/locks``) says so, or where
  there is none, whether the holder's pid is alive; a holder on another host (a shared file system) counts as running
  while the run's files changed within :data:`REMOTE_SILENCE_S`;
* ``starting``: a grid made the folder and started its process, which has not taken the lock yet (for
  :data:`STARTING_S` at most);
* from its record: ``finished`` (completed, with a finite metric), ``diverged``, ``stalled``, ``pruned`` (a search
  trial), ``interrupted`` (Ctrl-C), ``failed``; a failed record of a preemption or a full disk is ``stopped``;
* ``stopped`` (``resume=auto`` continues it): no record and no live process (killed, or its machine lost).

A grid writes a manifest of its runs as it starts (:mod:`mixbench.grids.manifest`, in ``<runs folder>/.grids/``, found
in the folder shown, its parents and the folders under it).  Its runs that have no folder yet are ``planned`` — or
``planned (grid stopped)`` when the grid has ended or its process is gone (they will not start) — counted where their
folder will be made.  A stopped grid's planned run that a later grid lists again is left to the later one.

A finished run's steps come from its record.  Otherwise the step is the newest of the step checkpoints and the last
complete line of ``logs/metrics.csv`` (flushed every 100 steps), against ``trainer.max_steps`` of its ``config.yaml``.
A budget in epochs is converted with the steps per epoch that the logged (epoch, step) pairs bound, known from the
second epoch on and marked inexact.  A running run's rate is in steps/s, from the times its files were written since
its attempt began (its checkpoints, its metrics log, and what earlier refreshes of ``--watch`` saw); its ETA is the
remaining steps at that rate.

Nothing is written or locked.  A file being appended (a partial last line), replaced or removed mid-read counts as not
written yet.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import socket
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from ..core.reading import UnreadableFile, read_capped, read_json, read_text_capped
from ..core.run_files import (
    CHECKPOINT_DIR,
    CHECKPOINT_STEP,
    CONFIG_FILE,
    CONSOLE_FILE,
    GRID_RUN_ENDED,
    GRID_RUN_PLANNED,
    GRIDS_DIR,
    HOLDER_FILE,
    LOCK_FILE,
    METRICS_FILE,
    RECORD_FILE,
)
from ..core.storage import TMP_MARK
from ..core.text import printable
from .records import outcome
from .schema import Manifest, Record, problem

log = logging.getLogger(__name__)

PLANNED, GRID_STOPPED = "planned", "planned (grid stopped)"  # a grid's run with no folder yet; of a grid that ended
STATES = ("running", "starting", PLANNED, "stopped", "interrupted", "failed", "diverged", "stalled", "pruned", "finished", GRID_STOPPED,
          "unreadable")  # fmt: skip
FULL_RUNS = ("completed", "stalled")  # record statuses of runs that ran their whole budget: their times estimate a planned run's
REMOTE_SILENCE_S = 3600.0  # a holder on another host whose run wrote nothing for this long is taken for gone
STARTING_S = 120.0  # how long a grid's new run folder may wait for its process to take the lock
METRICS_MAX_BYTES = 256 * 1024 * 1024  # logs/metrics.csv of a long run: a few MB; a larger file is not read
ATTEMPT_GAP_S = 1.0  # a config.yaml this much newer than the record: a later attempt began (and left no record)
RUN_MARKERS = (RECORD_FILE, CONFIG_FILE, LOCK_FILE, HOLDER_FILE, CONSOLE_FILE)

Observations = dict[Path, set[tuple[float, int]]]  # per run folder: (file time, step) pairs seen by earlier refreshes


@dataclass
class RunProgress:
    """One run folder's state; ``step`` / ``total`` in optimizer steps (``exact_total`` False: estimated from
    epochs), ``rate`` in steps/s, ``eta_s`` from now, ``updated``: when its files last changed (epoch seconds)."""

    run_dir: Path
    state: str
    step: int | None = None
    total: int | None = None
    exact_total: bool = True
    rate: float | None = None
    eta_s: float | None = None
    updated: float | None = None
    note: str = ""


@dataclass
class GridPlan:
    """The runs of one grid still ``planned`` under the folder shown: ``jobs`` at a time, each expected to take
    ``median_s`` (of the grid's runs that ran their whole budget; None: none has yet)."""

    name: str
    planned: int
    jobs: int
    median_s: float | None

    def remaining_s(self) -> float | None:
        """Until its planned runs are done, once its running ones are: rounds of ``jobs`` runs."""
        return -(-self.planned // self.jobs) * self.median_s if self.median_s is not None else None


@dataclass
class FolderProgress:
    """Every run under ``root`` at ``taken_at``; ``plans``: the grids whose planned runs go under ``root``."""

    root: Path
    runs: list[RunProgress]
    taken_at: float
    plans: list[GridPlan] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Runs per state, in :data:`STATES` order (states that no run has left out)."""
        counts = {state: sum(r.state == state for r in self.runs) for state in STATES}
        return {state: n for state, n in counts.items() if n}

    def remaining_steps(self) -> int | None:
        """Steps the running runs have left (those with a known budget); None when none is known."""
        left = [r.total - r.step for r in self.runs if r.state == "running" and r.total is not None and r.step is not None]
        return sum(max(0, n) for n in left) if left else None

    def running_eta_s(self) -> float | None:
        """Until every running run is done (they run side by side): the longest ETA; None when none is known."""
        etas = [r.eta_s for r in self.runs if r.state == "running" and r.eta_s is not None]
        return max(etas) if etas else None

    def planned_s(self) -> float | None:
        """Until the planned runs are done, after the running ones (grids run side by side: the longest); None when a
        grid's planned runs have no expected time yet (or there are none)."""
        times = [plan.remaining_s() for plan in self.plans]
        return max(times) if times and None not in times else None

    def eta_s(self) -> float | None:
        """Until every running and planned run is done; None when any of these is unknown."""
        running = any(r.state == "running" for r in self.runs)
        parts = [self.running_eta_s() if running else 0.0, self.planned_s() if self.plans else 0.0]
        return sum(parts) if None not in parts and (running or self.plans) else None


# ---------------------------------------------------------------- reading files that may change under us


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _json(path: Path) -> dict | None:
    """``path``'s JSON object; None when absent, unreadable (not a regular file, too large or deep: never blocks) or
    not (yet) a whole JSON object."""
    try:
        data = read_json(path)
    except UnreadableFile:
        return None
    return data if isinstance(data, dict) else None


def _record(path: Path) -> tuple[dict | None, str]:
    """The run's record if it is one (on the record schema), else None and why not ("" when there is no file)."""
    try:
        data = read_json(path)
    except UnreadableFile as err:
        return None, "" if not os.path.lexists(path) else str(err).removeprefix(f"{path}: ")
    why = problem(Record, data) if isinstance(data, dict) else "not a JSON object"
    return (None, f"off the record schema: {why}") if why else (data, "")


def _config(run_dir: Path, record: dict | None) -> dict:
    """The run's config: its record's, else its ``config.yaml`` (written as each attempt starts; every attempt of a
    run folder has the same config)."""
    config = (record or {}).get("config")
    if isinstance(config, dict):
        return config
    try:
        config = yaml.load(read_text_capped(run_dir / CONFIG_FILE), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (UnreadableFile, yaml.YAMLError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


def _positive_int(value) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):  # absent, null, or an unresolved ${...}
        return None
    return number if number > 0 else None


@dataclass
class MetricsLog:
    """The complete lines of a run's ``logs/metrics.csv``: when it was last written, the last step logged, and per
    epoch the (lowest, highest) step logged in it."""

    mtime: float
    step: int
    epochs: dict[int, tuple[int, int]]


def read_metrics_log(run_dir: Path) -> MetricsLog | None:
    """:class:`MetricsLog` of ``run_dir``; None when it has no complete line yet.  A line still being appended (no
    newline yet) and lines of another width (a header rewritten mid-read) are left out."""
    try:
        data, status = read_capped(run_dir / METRICS_FILE, METRICS_MAX_BYTES)
    except UnreadableFile:
        return None
    mtime = status.st_mtime
    lines = data.decode("utf-8", "replace").split("\n")[:-1]  # the last piece has no newline: partial, or empty
    if len(lines) < 2:
        return None
    header = next(csv.reader(lines[:1]))
    if "step" not in header:
        return None
    at_step, at_epoch = header.index("step"), header.index("epoch") if "epoch" in header else None
    last, epochs = None, {}
    for row in csv.reader(lines[1:]):
        if len(row) != len(header):
            continue
        try:
            step = int(float(row[at_step]))
            epoch = int(float(row[at_epoch])) if at_epoch is not None and row[at_epoch] else None
        except ValueError:
            continue
        last = step if last is None else max(last, step)
        if epoch is not None:
            low, high = epochs.get(epoch, (step, step))
            epochs[epoch] = (min(low, step), max(high, step))
    return MetricsLog(mtime, last, epochs) if last is not None else None


def steps_per_epoch(epochs: dict[int, tuple[int, int]]) -> tuple[int, bool] | None:
    """The steps of one epoch that the logged steps bound, and whether the bounds meet; None before the second epoch.

    A step logged as ``s`` in epoch ``e`` is the optimizer step ``s + 1`` of that epoch (Lightning logs the step
    before its count goes up), so ``e·n < s + 1 <= (e + 1)·n`` for ``n`` steps an epoch."""
    if not any(e >= 1 for e in epochs):
        return None
    low = max((high + 1) / (e + 1) for e, (_, high) in epochs.items())
    high = min(first / e for e, (first, _) in epochs.items() if e >= 1)
    if high < low:  # bounds from a log that does not fit the rule (e.g. several logs): the lower one
        return round(low), False
    return round((low + high) / 2), int(low) == low and low == high


def checkpoints(run_dir: Path) -> list[tuple[float, int]]:
    """(mtime, step) of the run's step checkpoints (``...step=S.ckpt``; temporary files of a write in progress left
    out), oldest first."""
    found = []
    try:
        entries = list(os.scandir(run_dir / CHECKPOINT_DIR))
    except OSError:
        return []
    for entry in entries:
        match = CHECKPOINT_STEP.search(entry.name)
        if match is None or TMP_MARK in entry.name or not entry.name.endswith(".ckpt"):
            continue
        try:
            found.append((entry.stat().st_mtime, int(match.group(1))))
        except OSError:  # removed since (a newer one pruned it)
            continue
    return sorted(found)


# ---------------------------------------------------------------- is a process holding the run's lock?


def locked_files() -> set[tuple[int, int, int]] | None:
    """(device major, minor, inode) of every file a process holds a lock on, on this host (``/proc/locks``: flock, and
    the POSIX locks that flock becomes on NFS); None where there is no such table."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    held = set()
    for line in text.splitlines():
        fields = line.split()
        if "->" in fields[:2]:  # a process waiting for the lock, not holding it
            continue
        where = next((f for f in fields if f.count(":") == 2), None)
        try:
            major, minor, inode = where.split(":")
            held.add((int(major, 16), int(minor, 16), int(inode)))
        except (AttributeError, ValueError):
            continue
    return held


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def lock_held(run_dir: Path, holder: dict | None, locked: set | None, host: str) -> bool | None:
    """Whether a live process holds ``run_dir``'s lock; None when its holder runs on another host (not knowable here)."""
    if holder is not None and holder.get("host") not in (None, host):
        return None
    if locked is not None:
        try:
            st = os.stat(run_dir / LOCK_FILE)
        except OSError:
            return False
        return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in locked
    return holder is not None and _pid_alive(holder.get("pid"))


def _since(holder: dict | None, run_dir: Path) -> float | None:
    """When the current attempt took the lock: the holder's ``since``."""
    try:
        return datetime.fromisoformat(str(holder["since"])).timestamp()
    except (TypeError, KeyError, ValueError):  # not written yet: the lock's or this attempt's config's time
        return max(filter(None, (_mtime(run_dir / LOCK_FILE), _mtime(run_dir / CONFIG_FILE))), default=None)


# ---------------------------------------------------------------- one run


def _entry(record: dict, key: str) -> dict:
    """``record[key]`` where it is a mapping, else empty."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def record_state(record: dict) -> tuple[str, str]:
    """(state, note) of a run that is not running, from its record."""
    status, error = record.get("status"), str(record.get("error") or "")
    if status in ("completed", "diverged", "stalled", "pruned"):
        try:
            decided = outcome(record)
        except (KeyError, TypeError, AttributeError):
            return "unreadable", f"a {status} record without its primary metric"
        if decided == "completed":
            return "finished", ""
        return decided, str(_entry(record, "divergence").get("reason") or ("no finite metric" if status == "completed" else ""))
    stop = _entry(record, "interrupted") or _entry(record, "preempted")  # training/preemption.py: a resumable stop
    if stop:
        ctrl_c = status == "interrupted" or stop.get("signal") == "SIGINT"
        how = "Ctrl-C" if ctrl_c else f"preempted by {stop.get('signal')}"
        where = f"at step {stop['step']}" if stop.get("step") is not None else "before training"
        return ("interrupted" if ctrl_c else "stopped"), f"{how} {where}; resume=auto continues it"
    if status == "interrupted":
        return "interrupted", error
    if status == "failed":
        return ("stopped" if error.startswith("DiskFull") else "failed"), error
    return "unreadable", f"unknown status {status!r}"


def _resume_note(newest: int | None) -> str:
    return f"resume=auto continues from step {newest}" if newest is not None else "no checkpoint: resume=auto starts it over"


def _rate(points: list[tuple[float, int]], start: tuple[float, int] | None) -> float | None:
    """Steps/s between the first and last (time, step) observation of this attempt, else from its start to the last."""
    if len(points) >= 2 and points[-1][0] > points[0][0] and points[-1][1] > points[0][1]:
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    if points and start is not None and points[-1][0] > start[0] and points[-1][1] > start[1]:
        return (points[-1][1] - start[1]) / (points[-1][0] - start[0])
    return None


class _Files:
    """One read of a run folder; the config and the metrics log are read when first needed (a finished run's record
    says all)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        (self.record, self.record_problem), self.holder = _record(run_dir / RECORD_FILE), _json(run_dir / HOLDER_FILE)
        self.saved = checkpoints(run_dir)  # step checkpoints: (mtime, step), oldest first
        times = [_mtime(run_dir / name) for name in (*RUN_MARKERS, METRICS_FILE)] + [t for t, _ in self.saved]
        self.updated = max((t for t in times if t is not None), default=None)  # the newest file time

    @property
    def newest(self) -> int | None:
        return self.saved[-1][1] if self.saved else None

    @functools.cached_property
    def log(self) -> MetricsLog | None:
        return read_metrics_log(self.run_dir)

    @functools.cached_property
    def budget(self) -> tuple[int | None, bool]:
        """(total steps, whether exact) of ``trainer.max_steps`` / ``max_epochs`` (:func:`steps_per_epoch`)."""
        trainer = _config(self.run_dir, self.record).get("trainer")
        trainer = trainer if isinstance(trainer, dict) else {}
        total, epochs = _positive_int(trainer.get("max_steps")), _positive_int(trainer.get("max_epochs"))
        per_epoch = steps_per_epoch(self.log.epochs) if epochs and self.log else None
        if per_epoch is not None and (total is None or per_epoch[0] * epochs < total):
            return per_epoch[0] * epochs, per_epoch[1]
        return total, True


def _running(run_dir: Path, files: _Files, now: float, seen: Observations | None, note: str) -> RunProgress:
    """A running run's step, rate and ETA from the (file time, step) pairs of its current attempt."""
    since = _since(files.holder, run_dir)
    start = (since, max([step for t, step in files.saved if t < since], default=0)) if since is not None else None
    points = {(t, step) for t, step in files.saved if since is None or t >= since}
    if files.log and (since is None or files.log.mtime >= since):
        points.add((files.log.mtime, files.log.step))
    if seen is not None:
        known = seen.setdefault(run_dir, set())
        known |= points
        points |= {(t, step) for t, step in known if since is None or t >= since}
    ordered = sorted(points)
    step = max([s for _, s in ordered] + ([start[1]] if start else []), default=None)
    (total, exact), rate, eta = files.budget, _rate(ordered, start), None
    if rate and total is not None and step is not None:
        eta = max(0.0, (total - step) / rate - (now - (ordered[-1][0] if ordered else now)))
    return RunProgress(run_dir, "running", step, total, exact, rate, eta, files.updated, note)


def _not_running(run_dir: Path, files: _Files, now: float, note: str) -> RunProgress:
    """A run no live process holds: its record's outcome, or stopped (no record of its last attempt) or starting."""
    record, newest = files.record, files.newest
    config_time, record_time = _mtime(run_dir / CONFIG_FILE), _mtime(run_dir / RECORD_FILE)
    state, reason = record_state(record) if record is not None else (None, "")
    if state in ("finished", "diverged", "stalled", "pruned"):
        budget = _entry(record, "budget")
        step = _positive_int(record.get("steps")) or _positive_int(budget.get("steps"))
        total = _positive_int(budget.get("total_steps")) or files.budget[0]
        return RunProgress(run_dir, state, step, total, True, updated=files.updated, note=reason)
    if record is not None and not (config_time and record_time and config_time > record_time + ATTEMPT_GAP_S):
        stop = _entry(record, "interrupted") or _entry(record, "preempted")
        step = newest if newest is not None else _positive_int(stop.get("step"))
        return RunProgress(run_dir, state, step, *files.budget, updated=files.updated, note=reason)
    if record is None and record_time is not None:
        state, reason = "unreadable", f"{RECORD_FILE}: {files.record_problem or 'not a JSON object'}"
    elif record is not None:  # an attempt began after this record was written, and left none
        state, reason = "stopped", f"its last attempt left no record (killed, or its machine lost); {_resume_note(newest)}"
    elif (run_dir / LOCK_FILE).exists() or config_time is not None:
        state, reason = "stopped", f"no record (killed, or its machine lost); {_resume_note(newest)}"
    elif files.updated is not None and now - files.updated < STARTING_S:
        state, reason = "starting", "its process has not taken the lock yet"
    else:
        state, reason = "stopped", f"its process never took the lock; see its {CONSOLE_FILE}"
    return RunProgress(run_dir, state, newest, *files.budget, updated=files.updated, note="; ".join(filter(None, (note, reason))))


def run_progress(
    run_dir: Path, locked: set | None = None, host: str | None = None, now: float | None = None, seen: Observations | None = None
) -> RunProgress | None:
    """The state of the run in ``run_dir``; None when the folder is gone.  ``locked``: :func:`locked_files` (read
    once for many runs; None: the holder's pid decides); ``seen``: observations of earlier refreshes, extended with
    this one's."""
    now, host = time.time() if now is None else now, host or socket.gethostname()
    files = _Files(run_dir)
    if not run_dir.is_dir():
        return None
    live, note = lock_held(run_dir, files.holder, locked, host), ""
    if live is None:  # held on another host: believed while its files change
        live = files.updated is not None and now - files.updated < REMOTE_SILENCE_S
        where = files.holder.get("host")
        note = f"on {where}" if live else f"its holder on {where} wrote nothing for {REMOTE_SILENCE_S / 60:.0f} min"
    return _running(run_dir, files, now, seen, note) if live else _not_running(run_dir, files, now, note)


# ---------------------------------------------------------------- a folder of runs


def walk(root: Path) -> tuple[list[Path], list[Path]]:
    """Every run folder under ``root`` (``root`` itself if it is one), in path order, and the grid manifest folders
    (``.grids``) among them; folders that vanish while they are walked are left out."""
    found, grids = [], []
    for folder, subfolders, files in os.walk(root):
        if any(name in files for name in RUN_MARKERS):
            found.append(Path(folder))
            subfolders.clear()  # a run's own folders (checkpoints, logs) hold no runs
        else:
            grids += [Path(folder) / name for name in subfolders if name == GRIDS_DIR]
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
    return sorted(found), grids


# ---------------------------------------------------------------- a grid's runs that have no folder yet


def manifests(root: Path, grids: list[Path]) -> list[tuple[str, dict]]:
    """(name, content) of every grid manifest in ``grids`` and in the ``.grids`` of ``root``'s parents, oldest first; a
    grid writing into several runs folders has one of the same name in each, read once."""
    folders = [*grids, *(parent / GRIDS_DIR for parent in root.resolve().parents)]
    found = {}
    for folder in folders:
        try:
            files = sorted(folder.glob("*.json"))
        except OSError:
            continue
        for path in files:
            if path.name in found:
                continue
            try:
                data = read_json(path)
                why = problem(Manifest, data) if isinstance(data, dict) else "not a JSON object"
            except UnreadableFile as err:
                data, why = None, str(err).removeprefix(f"{path}: ")
            if why is None:
                found[path.name] = data
            elif path not in _SKIPPED:  # named once, not at every refresh of status --watch
                _SKIPPED.add(path)
                log.warning("skipping the grid manifest %s: %s", printable(path), printable(why))
    return sorted(found.items())  # by name: the grid's start time first


_SKIPPED: set[Path] = set()  # manifests already named as skipped in this process


def grid_live(manifest: dict, host: str) -> bool:
    """Whether the grid may still start runs: it has not ended and its process lives (on another host: believed)."""
    if manifest.get("ended_at"):
        return False
    return manifest.get("host") not in (None, host) or _pid_alive(manifest.get("pid"))


def _under(path, root: Path) -> bool:
    return isinstance(path, str) and (Path(path) == root or root in Path(path).parents)


def planned_runs(root: Path, grids: list[Path], host: str) -> tuple[list[RunProgress], list[GridPlan]]:
    """The runs of the grids' manifests that will be made under ``root`` and have no folder yet, and per grid that may
    still start them its :class:`GridPlan`."""
    root, found, plans = root.resolve(), [], []
    listed = manifests(root, grids)
    for i, (name, manifest) in enumerate(listed):
        live, runs = grid_live(manifest, host), [run for run in manifest["runs"] if isinstance(run, dict)]
        later = {json.dumps(run.get("argv")) for _, other in listed[i + 1 :] for run in other["runs"] if isinstance(run, dict)}
        waiting = [
            run
            for run in runs
            if run.get("state") == GRID_RUN_PLANNED
            and _under(run.get("parent"), root)
            and not (isinstance(run.get("run_dir"), str) and Path(run["run_dir"]).is_dir())
            and (live or json.dumps(run.get("argv")) not in later)
        ]
        times = [run["wall_time_s"] for run in runs if run.get("state") == GRID_RUN_ENDED and run.get("status") in FULL_RUNS
                 and isinstance(run.get("wall_time_s"), (int, float))]  # fmt: skip
        median = statistics.median(times) if times else None
        jobs = _positive_int(manifest.get("jobs")) or 1
        for run in waiting:
            argv = " ".join(str(a) for a in run.get("argv") or [])
            note = f"grid {Path(name).stem}: mixbench run {argv}" + (
                "" if live else "; its grid stopped before it started: the grid's command with --resume runs it"
            )
            found.append(RunProgress(Path(run["parent"]), PLANNED if live else GRID_STOPPED, note=note))
        if live and waiting:
            plans.append(GridPlan(Path(name).stem, len(waiting), jobs, median))
    return found, plans


def folder_progress(root: str | Path, seen: Observations | None = None, now: float | None = None) -> FolderProgress:
    """:class:`FolderProgress` of every run under ``root``, and of the grids' runs planned there; ``seen``: see
    :func:`run_progress`."""
    root, now = Path(root), time.time() if now is None else now
    locked, host = locked_files(), socket.gethostname()
    folders, grids = walk(root)
    runs = [run for run in (run_progress(folder, locked, host, now, seen) for folder in folders) if run is not None]
    planned, plans = planned_runs(root, grids, host)
    return FolderProgress(root, runs + planned, now, plans)
