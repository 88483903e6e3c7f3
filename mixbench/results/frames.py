"""pandas views of result records: one row per run (wide) or per run × metric (tidy)."""

from __future__ import annotations

import math
from pathlib import Path

from .records import _seed_key, _time_order, column_key, dataset_name, load_records, model_label, primary_value, row_key, with_recipes
from .sources import source_order

RUN_FIELDS = (
    "task",
    "family",
    "model",
    "dataset",
    "scale",
    "norm",
    "seed",
    "repeat",
    "status",
    "primary_metric",
    "primary_value",
    "higher_is_better",
    "wall_time_s",
    "run_dir",
    "source",
)


def _repeat_index(records: list[dict]) -> list[int]:
    """For each record, how many earlier records (by ``started_at``) share its norm, column and seed: 0 = the first."""
    records = with_recipes(records)
    order = sorted(range(len(records)), key=lambda i: _time_order(records[i]))
    seen: dict = {}
    index = [0] * len(records)
    for i in order:
        key = (row_key(records[i]), column_key(records[i]), _seed_key(records[i]["seed"]))
        index[i] = seen.get(key, 0)
        seen[key] = index[i] + 1
    return index


def _run_fields(record: dict, repeat: int, several: bool) -> dict:
    pm = record["primary_metric"]
    value = primary_value(record)
    path = record.get("_path")
    return {
        "task": record["task"],
        "family": record.get("family"),
        "model": model_label(record),
        "dataset": dataset_name(record),
        "scale": record["scale"],
        "norm": row_key(record),
        "seed": record["seed"],
        "repeat": repeat,
        "status": record["status"],
        "primary_metric": pm["name"],
        "primary_value": _float(value),
        "higher_is_better": bool(pm["higher_is_better"]),
        "wall_time_s": _float(record.get("wall_time_s")),
        "run_dir": str(Path(path).parent) if path else record.get("run_dir"),
        "source": record.get("_source") if several else None,
    }


def _float(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _typed(frame, numeric: tuple[str, ...]):
    for name in numeric:
        frame[name] = frame[name].astype("float64")
    for name in ("seed", "repeat"):
        if name in frame:
            frame[name] = frame[name].astype("Int64")
    if "higher_is_better" in frame:
        frame["higher_is_better"] = frame["higher_is_better"].astype("boolean")
    return frame


def records_frame(records: list[dict]):
    """A pandas DataFrame, one row per run: :data:`RUN_FIELDS` (``repeat``: 0 for the first record of its norm,
    column and seed, 1… for re-runs; ``run_dir``: the folder holding the record; ``source``: the results folder it was
    read from where several were read, else blank) and one float column per metric of ``record["metrics"]`` (NaN where
    a run lacks it)."""
    import pandas as pd

    repeats, several = _repeat_index(records), len(source_order(records)) > 1
    metric_names = sorted({m for r in records if isinstance(r["metrics"], dict) for m in r["metrics"]})
    columns = {m: (m if m not in RUN_FIELDS else f"metrics.{m}") for m in metric_names}
    rows = []
    for r, repeat in zip(records, repeats):
        row = _run_fields(r, repeat, several)
        metrics = r["metrics"] if isinstance(r["metrics"], dict) else {}
        row.update({columns[m]: _float(metrics.get(m)) for m in metric_names})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[*RUN_FIELDS, *columns.values()])
    return _typed(frame, ("primary_value", "wall_time_s", *columns.values()))


TIDY_FIELDS = (*RUN_FIELDS[:9], "metric", "value", "primary", "higher_is_better", "wall_time_s", "run_dir", "source")


def tidy_frame(records: list[dict]):
    """Long format: one row per run and metric (``metric``, ``value``, ``primary``, ``higher_is_better`` of that
    metric); a run without metrics (crashed) keeps one row, its primary metric with a blank value."""
    import pandas as pd

    rows = []
    several = len(source_order(records)) > 1
    for r, repeat in zip(records, _repeat_index(records)):
        base = _run_fields(r, repeat, several)
        primary = r["primary_metric"]["name"]
        specs = {s.get("name"): s.get("higher_is_better") for s in r.get("metric_specs") or [] if isinstance(s, dict)}
        specs[primary] = bool(r["primary_metric"]["higher_is_better"])
        metrics = dict(r["metrics"]) if isinstance(r["metrics"], dict) and r["metrics"] else {primary: None}
        for name, value in metrics.items():
            hib = specs.get(name)
            rows.append(
                {
                    **base,
                    "metric": name,
                    "value": _float(value),
                    "primary": name == primary,
                    "higher_is_better": None if hib is None else bool(hib),
                }
            )
    frame = pd.DataFrame(rows, columns=list(TIDY_FIELDS))
    frame["primary"] = frame["primary"].astype("bool")
    return _typed(frame, ("value", "wall_time_s"))


def load_records_frame(results_dir: str | Path):
    """``(records_frame(records), problems)`` of :func:`load_records`: one DataFrame row per run."""
    records, problems = load_records(results_dir)
    return records_frame(records), problems
