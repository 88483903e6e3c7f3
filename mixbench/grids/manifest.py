"""A grid's manifest: the runs a grid (``mixbench run -m``, ``mixbench reproduce``) will run, written when it starts, so
that ``mixbench status`` counts the runs that have no folder yet (:mod:`mixbench.results.progress`).

The file is ``<results_dir>/runs/.grids/<utc time>-<pid>.json`` (one in every runs folder the grid's runs go to),
replaced atomically as the grid goes on.  It holds the grid process (``host``, ``pid``), ``jobs`` (how many run side by
side) and per run: its arguments (``argv``, as the grid was given them), the folder its run folder will be made in
(``parent``), its run folder once known (``run_dir``), its ``state`` — ``planned``, ``running``, then ``ended`` with
the record's ``status`` and ``wall_time_s`` — and when it started and ended.  When the grid ends (all run, a run's
resumable stop, Ctrl-C) it gets ``ended_at``: runs still ``planned`` then will not start.  A grid stopped before any run
started (a Ctrl-C while runs are composed or checked) removes its manifest: it leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig

from ..core.errors import DiskFull
from ..core.run_files import GRID_RUN_ENDED, GRID_RUN_PLANNED, GRID_RUN_RUNNING, GRIDS_DIR
from ..core.storage import atomic_write_text
from ..training.config import norm_spec, runs_root
from ..training.run import existing_run, runs_parent

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def planned_run(argv: list[str], cfg: DictConfig) -> dict:
    """A run of the grid before it starts: its folder if it has one (``run_dir=``, or the unfinished run ``resume=auto``
    continues), else the folder its run folder will be made in."""
    label = norm_spec(cfg).label()
    run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else existing_run(cfg, label) if cfg.resume == "auto" else None
    parent = run_dir.parent if run_dir is not None else runs_parent(cfg, label)
    return {
        "argv": list(argv),
        "parent": str(parent.resolve()),
        "run_dir": str(run_dir.resolve()) if run_dir is not None else None,
        "state": GRID_RUN_PLANNED,
        "status": None,
        "wall_time_s": None,
        "started_at": None,
        "ended_at": None,
    }


class GridManifest:
    """The manifest of one grid, rewritten (under a lock: runs side by side end in threads) as its runs start and end."""

    def __init__(self, argvs: list[list[str]], configs: list[DictConfig], jobs: int):
        now = datetime.now(timezone.utc)
        name = f"{now.strftime('%Y%m%dT%H%M%S.%f')}-{os.getpid()}.json"  # two grids of one process: two names
        roots = dict.fromkeys(runs_root(cfg.results_dir).resolve() for cfg in configs)
        self.paths = [root / GRIDS_DIR / name for root in roots]
        self.made = [d for path in self.paths for d in (path.parent, *path.parent.parents) if not d.exists()]  # deepest first
        self.data = {
            "schema": 1,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": now.isoformat(timespec="seconds"),
            "jobs": jobs,
            "runs": [planned_run(argv, cfg) for argv, cfg in zip(argvs, configs)],
        }
        self.lock, self.any_started = threading.Lock(), False

    def _write(self) -> None:
        """Replace the manifest; a write that fails (a full disk) is a warning, never the grid's end."""
        text = json.dumps(self.data, indent=1) + "\n"
        for path in self.paths:
            try:
                atomic_write_text(path, text)
            except (OSError, DiskFull) as err:
                log.warning("could not write the grid's manifest %s (%s): mixbench status may miss its runs not started", path, err)

    def started(self, i: int, run_dir: Path | None = None) -> None:
        """Run ``i`` starts (in ``run_dir`` where that is known before it runs)."""
        with self.lock:
            run = self.data["runs"][i]
            run.update(state=GRID_RUN_RUNNING, started_at=_now())
            if run_dir is not None:
                run["run_dir"] = str(Path(run_dir).resolve())
            self.any_started = True
            self._write()

    def not_started(self, i: int) -> None:
        """Run ``i`` was stopped as it started (a Ctrl-C before it took Ctrl-C over): planned again."""
        with self.lock:
            self.data["runs"][i].update(state=GRID_RUN_PLANNED, started_at=None)
            self._write()

    def ended(self, i: int, run_dir: Path | None, record: dict | None, status: str = "failed") -> None:
        """Run ``i`` ended: with ``record``, else with ``status`` (it left no record)."""
        with self.lock:
            run = self.data["runs"][i]
            run.update(state=GRID_RUN_ENDED, ended_at=_now(), status=(record or {}).get("status", status))
            run["wall_time_s"] = (record or {}).get("wall_time_s")
            if run_dir is not None:
                run["run_dir"] = str(Path(run_dir).resolve())
            self._write()

    def close(self, keep: bool) -> None:
        """The grid ends: its manifest says so (``ended_at``: its runs still planned will not start), or is removed."""
        with self.lock:
            if keep:
                self.data["ended_at"] = _now()
                self._write()
            else:
                for path in self.paths:
                    path.unlink(missing_ok=True)
                for folder in self.made:  # the folders its writes made (a results folder's first grid)
                    with contextlib.suppress(OSError):
                        folder.rmdir()


@contextlib.contextmanager
def grid_manifest(argvs: list[list[str]], configs: list[DictConfig], jobs: int) -> Iterator[GridManifest]:
    """The grid's :class:`GridManifest`, written before the block.  After it, it is marked ended; it is removed when
    no run started, or a Ctrl-C came before any run took Ctrl-C over (the grid leaves nothing behind)."""
    manifest = GridManifest(argvs, configs, jobs)
    manifest._write()
    interrupted = False
    try:
        yield manifest
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        manifest.close(keep=manifest.any_started and not interrupted)
