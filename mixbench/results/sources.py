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

from ..core.project import runs_root
from ..core.text import printable
from .records import annotate_recipes, column_key, read_records, recipe_settings, results_folder, run_identity

log = logging.getLogger("mixbench")


def default_runs_dir() -> Path:
    """Where ``mixbench run`` puts its run folders (:func:`mixbench.core.project.runs_root`)."""
    return runs_root()


def unique_folders(folders: list[str | Path]) -> list[str]:
    """``folders`` as given, each once (the same folder spelled twice, ``results`` and ``./results``, counts once)."""
    seen: dict[Path, str] = {}
    for folder in folders:
        seen.setdefault(Path(folder).resolve(), str(folder))
    return list(seen.values())


def load_sources(folders: list[str | Path], check: bool = True) -> tuple[list[dict], list[str]]:
    """Every record under each of ``folders`` (``_source``: the folder it was found under; ``_folders``: all of them),
    each run once, recipes annotated over all of them; unreadable records as problem messages.  ``check``: a folder
    that is a file or does not exist is a :class:`~mixbench.core.errors.ConfigError` naming the fix
    (:func:`~.records.results_folder`)."""
    records, problems, seen, copies = [], [], set(), 0
    folders = tuple(unique_folders(folders))
    for folder in folders:
        found, unreadable = read_records(results_folder(folder) if check else folder)
        problems += unreadable
        for record in found:
            identity = run_identity(record)
            if identity in seen:
                copies += 1
                continue
            seen.add(identity)
            record["_folders"] = folders
            records.append(record)
        log.info("%s: %d record(s)", folder, len(found))
    if copies:
        log.info("%d record(s) of runs found more than once: each run counts once, where first found", copies)
    return annotate_recipes(records), problems


def source_order(records: list[dict]) -> tuple[str, ...]:
    """The folders ``records`` were read from: every folder given to :func:`load_sources` (``_folders``; one whose
    runs were all found before counts too), else each record's ``_source``, in order; records without one left out."""
    return tuple(dict.fromkeys(s for r in records if r.get("_source") for s in r.get("_folders") or (r["_source"],)))


def record_sources(records: list[dict], groups: dict) -> tuple[tuple[str, ...], dict]:
    """:func:`source_order` of ``records`` and, for each key of ``groups`` (its records), the sources among them."""
    order = source_order(records)
    return order, {key: tuple(s for s in order if any(r.get("_source") == s for r in recs)) for key, recs in groups.items()}


def source_differences(records: list[dict], ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """Column → the training settings in which its folders' records differ, e.g. ``optim.lr: src 1 0.003 | src 2
    0.001``.  A cell never pools such records (its runs would differ inside it: the column splits, labelled); this
    names what differs between the rows of one column, each placement at its own value (a follow-up at each
    placement's best lr).  Only columns with records of several folders; a setting some folder's records lack is left
    out, as in :func:`~.records.annotate_recipes`; ``ignore``: settings the table picks among (``--best-over``)."""
    order, by_column = source_order(records), {}
    if len(order) < 2:
        return {}
    for r in records:
        if r.get("_source"):
            by_column.setdefault(column_key(r), []).append(r)
    notes = {}
    for column, recs in by_column.items():
        values: dict[str, dict[str, set[str]]] = {}  # setting → source → its values there
        for r in recs:
            for key, value in recipe_settings(r, ignore).items():
                values.setdefault(key, {}).setdefault(r["_source"], set()).add(str(value))
        differing = {k: per for k, per in sorted(values.items()) if len(per) > 1 and len({frozenset(v) for v in per.values()}) > 1}
        if differing:
            notes[column] = "; ".join(
                f"{key}: " + " | ".join(f"src {order.index(s) + 1} {', '.join(sorted(per[s]))}" for s in order if s in per)
                for key, per in differing.items()
            )
    return notes


def records_of(folders: list[str] | None) -> tuple[list[dict], str]:
    """The records of ``--results-dir`` (given once or more; default: your runs, :func:`default_runs_dir`, which need
    not exist yet), each unreadable one logged as skipped, and the folders named for a message."""
    checked = folders is not None
    folders = folders or [str(default_runs_dir())]
    records, problems = load_sources(folders, check=checked)
    for problem in problems:
        log.warning("skipped unreadable record: %s", printable(problem))
    return records, " and ".join(folders)
