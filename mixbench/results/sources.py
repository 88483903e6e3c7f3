"""Several results folders read as one (``mixbench table --results-dir A --results-dir B``): your runs beside the
committed reference records.

Each record remembers the folder it was found under (``_source``, as given).  A run found under two folders (an
overlap such as ``results`` and ``results/runs``, or a copied run folder) counts once, as found first.  The recipes are
annotated over all folders together, so that a cell pools only records that differ in nothing but the seed and how and
where they ran (:data:`~.records.NOT_RECIPE`), and runs that differ in a training setting get columns of their own,
labelled with it, whichever folder they came from.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .records import annotate_recipes, read_records, results_folder, run_identity

log = logging.getLogger("mixbench")


def default_runs_dir() -> Path:
    """Where ``mixbench run`` puts its run folders, ``<results_dir>/runs`` with the ``results_dir`` of the project's
    ``configs/defaults.yaml``: what :func:`mixbench.training.config.runs_root` says, without importing the training
    stack (``mixbench table`` starts without torch)."""
    from omegaconf import OmegaConf

    from ..core.project import config_file

    path = config_file("defaults.yaml")
    return Path(OmegaConf.load(path).results_dir if path else "results") / "runs"


def unique_folders(folders: list[str | Path]) -> list[str]:
    """``folders`` as given, each once (the same folder spelled twice, ``results`` and ``./results``, counts once)."""
    seen: dict[Path, str] = {}
    for folder in folders:
        seen.setdefault(Path(folder).resolve(), str(folder))
    return list(seen.values())


def load_sources(folders: list[str | Path], check: bool = True) -> tuple[list[dict], list[str]]:
    """Every record under each of ``folders`` (``_source``: the folder it was found under), each run once, recipes
    annotated over all of them; unreadable records as problem messages.  ``check``: a folder that is a file or does not
    exist is a :class:`~mixbench.core.errors.ConfigError` naming the fix (:func:`~.records.results_folder`)."""
    records, problems, seen, copies = [], [], set(), 0
    for folder in unique_folders(folders):
        found, unreadable = read_records(results_folder(folder) if check else folder)
        problems += unreadable
        for record in found:
            identity = run_identity(record)
            if identity in seen:
                copies += 1
                continue
            seen.add(identity)
            records.append(record)
        log.info("%s: %d record(s)", folder, len(found))
    if copies:
        log.info("%d record(s) of runs found more than once: each run counts once, where first found", copies)
    return annotate_recipes(records), problems


def record_sources(records: list[dict], groups: dict) -> tuple[tuple[str, ...], dict]:
    """The sources of ``records`` in their order (``_source``, records without one left out) and, for each key of
    ``groups`` (its records), the sources among its records."""
    order = tuple(dict.fromkeys(r["_source"] for r in records if r.get("_source")))
    return order, {key: tuple(s for s in order if any(r.get("_source") == s for r in recs)) for key, recs in groups.items()}


def records_of(folders: list[str] | None) -> tuple[list[dict], str]:
    """The records of ``--results-dir`` (given once or more; default: your runs, :func:`default_runs_dir`, which need
    not exist yet), each unreadable one logged as skipped, and the folders named for a message."""
    checked = folders is not None
    folders = folders or [str(default_runs_dir())]
    records, problems = load_sources(folders, check=checked)
    for problem in problems:
        log.warning("skipped unreadable record: %s", problem)
    return records, " and ".join(folders)
