"""Result records: one JSON per run (written atomically, read and checked against the schema) and what one record
says — its outcome, its primary value, and the row and column it belongs to in a table."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from ..core.errors import ConfigError, MixbenchError
from ..core.reading import UnreadableFile, read_json
from ..core.settings import flat_settings
from ..core.storage import atomic_write_text
from .schema import SCHEMA, Record, problem  # noqa: F401 (SCHEMA: imported from here by the writers)


class RecordError(MixbenchError):
    """A results file is malformed."""


def write_record(record: dict, path: str | Path) -> Path:
    """Write ``record`` as JSON atomically (:func:`mixbench.core.storage.atomic_write_text`): readers never see half a
    file, and a write that fails (a full disk: :class:`mixbench.core.errors.DiskFull`) leaves the old record as it was.
    What reading added (``_path``, ``_source``, ``_recipe``…: top-level keys that start with ``_``) is not written."""
    stored = {k: v for k, v in record.items() if not k.startswith("_")}
    text = json.dumps(stored, indent=2, sort_keys=False, default=str, allow_nan=True) + "\n"
    return atomic_write_text(path, text)


def read_record(path: str | Path) -> dict:
    """The record in ``path``, checked against the record schema (:class:`mixbench.results.schema.Record`); a
    :class:`RecordError` naming the file and the reason when it is not a regular file, too large or too deep
    (:mod:`mixbench.core.reading`), not JSON, or off the schema."""
    try:
        record = read_json(path)
    except UnreadableFile as err:
        raise RecordError(str(err)) from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: expected a JSON object")
    why = problem(Record, record)
    if why is not None:
        raise RecordError(f"{path}: {why} (off the record schema)")
    return record


def results_folder(results_dir: str | Path) -> Path:
    """``results_dir`` as a folder to read records from; a :class:`ConfigError` naming the fix when it is a file or
    does not exist (:func:`load_records` itself finds nothing there and says nothing)."""
    path = Path(results_dir)
    if path.is_file():
        raise ConfigError(f"--results-dir {path} is a file; give the folder that holds record.json files, e.g. --results-dir {path.parent}")
    if not path.is_dir():
        raise ConfigError(
            f"--results-dir {path}: no such folder; give a folder holding record.json files (e.g. results/proxy/placements), "
            "or make runs first with `mixbench run task=...` (they go to results/runs)"
        )
    return path


def read_records(results_dir: str | Path) -> tuple[list[dict], list[str]]:
    """Every ``record.json`` under ``results_dir``, with ``_path`` (its file) and ``_source`` (``results_dir`` as
    given) set but no ``_recipe`` yet; unreadable ones are returned as problem messages."""
    records, problems = [], []
    for path in sorted(Path(results_dir).rglob("record.json")):
        try:
            record = read_record(path)
        except RecordError as err:
            problems.append(str(err))
            continue
        record["_path"] = str(path)
        record["_source"] = str(results_dir)
        records.append(record)
    return records, problems


def load_records(results_dir: str | Path) -> tuple[list[dict], list[str]]:
    """Every ``record.json`` under ``results_dir`` (:func:`read_records`), recipes annotated; unreadable ones are
    returned as problem messages.  Several folders at once: :func:`mixbench.results.sources.load_sources`."""
    records, problems = read_records(results_dir)
    return annotate_recipes(records), problems


def run_identity(record: dict):
    """One run's identity across copies of its record (a folder copied beside its original, a confirmation run reused
    with ``mixbench search --reuse-from``, two ``--results-dir`` that overlap): its ``run_id``, seed and start time;
    without a ``run_id``, its config, seed and start time; without a start time, the record file itself.  A run folder's
    name alone is not unique (``run_dir=`` is free)."""
    seed, started = json.dumps(record.get("seed"), default=str), record.get("started_at")
    if record.get("run_id") and started:
        return ("run", record["run_id"], seed, started)
    if started:
        return ("config", json.dumps(record.get("config"), sort_keys=True, default=str), seed, started)
    if record.get("_path"):
        return ("file", str(Path(record["_path"]).resolve()))
    return ("object", id(record))


# ---------------------------------------------------------------- one record → its outcome and value


def primary_value(record: dict):
    """The record's primary metric as stored in ``metrics`` (else ``primary_metric.value``); may be None or NaN."""
    name = record["primary_metric"]["name"]
    metrics = record["metrics"] if isinstance(record["metrics"], dict) else {}
    return metrics.get(name, record["primary_metric"].get("value"))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def outcome(record: dict) -> str:
    """``completed`` (with a finite primary metric), ``diverged``, ``stalled``, ``failed`` (crashed), ``interrupted``
    (stopped by Ctrl-C) or ``pruned``.  A record that says ``completed`` without a finite primary metric counts as
    ``diverged``."""
    status = record["status"]
    if status == "completed":
        return "completed" if _finite(primary_value(record)) else "diverged"
    return status


def _seed_key(seed):
    try:
        hash(seed)
    except TypeError:
        return json.dumps(seed, sort_keys=True, default=str)
    return seed


def _time_order(record: dict) -> tuple[str, str]:
    """Records in the order they were made: ``started_at`` (ISO, UTC), then the file path."""
    return str(record.get("started_at") or record.get("finished_at") or ""), str(record.get("_path", ""))


# ---------------------------------------------------------------- one record → its row and column in a table


def row_key(record: dict) -> str:
    norm = record["norm"]
    return norm.get("label", norm.get("placement", "?")) if isinstance(norm, dict) else str(norm)


def model_label(record: dict) -> str:
    """The model's label, plus ``+fp8(<recipe>)`` for a run whose matmuls were float8: its numbers differ from the
    bf16 run of the same seed, so the two never share a table cell as repeats."""
    model = record["model"]
    label = model.get("label", model.get("name", "?")) if isinstance(model, dict) else str(model)
    fp8 = record.get("fp8")
    return label + (f"+fp8({fp8.get('recipe', '?')})" if isinstance(fp8, dict) else "")


def dataset_name(record: dict) -> str:
    data = record["dataset"]
    return data.get("name", "?") if isinstance(data, dict) else str(data)


# config settings that say where and how a run ran, not what it trained: never a reason to split a column, nor to keep
# the runs of two results folders (mixbench table --results-dir A --results-dir B) apart
NOT_RECIPE = (
    "seed",
    "run_dir",
    "results_dir",
    "resume",
    "resume_from",
    "command",
    "slurm",
    "save_weights",
    "final_validation",
    "init_device",
    "activation_checkpointing",
    "checkpoint",
    "checkpoint_every_n_steps",  # the key before checkpoint.every_n_steps
    "logger",
    "logger_options",
    "grad_norm_every_n_steps",
    "profiler",
    "divergence",
    "compile",
    "cuda_graph_step",
    "init_from",
    "rlhf.reward_model",  # like init_from: the run it reads (each chain its own), whose recipe is in that run's record
    "norm",
    "choices",
    "task",
    "ddp",
    "fsdp",
    "data.path",
    "data.num_workers",
    "data.cache_dir",
    "data.num_proc",
    "data.eval_batch_size",
    "data.pin_memory",
    "data.persistent_workers",
    "data.prefetch_factor",
    "data.pipeline",
    "trainer.enable_progress_bar",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.log_every_n_steps",
    "trainer.deterministic",
    "trainer.benchmark",
)


# what a run resolved at its start (record["effective"]) that its config may leave open: trainer.precision=null is
# bf16-mixed on a GPU and 32-true on a CPU; the global batch is data.batch_size × devices × accumulation
EFFECTIVE = ("global_batch_size", "precision")


@functools.lru_cache(maxsize=4096)  # the same few hundred keys in every record
def _is_recipe(key: str) -> bool:
    return not any(key == k or key.startswith(k + ".") for k in NOT_RECIPE)


def recipe_settings(record: dict, ignore: tuple[str, ...] = ()) -> dict:
    """The settings of ``record`` that decide what it trained: its config's training settings (dotted keys; not
    :data:`NOT_RECIPE`, not ``ignore``) and ``effective.<k>`` of :data:`EFFECTIVE` where the record has them.  Kept
    in the record (``_settings``) for the next call: a table asks several times."""
    settings = record.get("_settings")
    if settings is None:
        settings = {k: v for k, v in flat_settings(record.get("config") or {}).items() if _is_recipe(k)}
        effective = record.get("effective") if isinstance(record.get("effective"), dict) else {}
        settings.update({f"effective.{k}": effective[k] for k in EFFECTIVE if effective.get(k) is not None})
        record["_settings"] = settings
    return {k: v for k, v in settings.items() if k not in ignore} if ignore else settings


def annotate_recipes(records: list[dict], ignore: tuple[str, ...] = ()) -> list[dict]:
    """Set each record's ``_recipe``: the training settings (``optim.lr=0.008``, ``model.attention_backend=math``…)
    that differ between runs of one norm in one column, so that such runs get columns of their own instead of being
    averaged as if they were seeds of one configuration.  Settings that differ only between norms (a placement's own
    options) do not split a column; a setting a record lacks (written before it existed) is left out of its label.
    Settings in ``ignore`` never split a column (``table --best-over optim.lr`` picks among their values in a cell)."""
    settings = [recipe_settings(r, ignore) for r in records]
    varying: dict[str, set[str]] = {}  # base column → settings that differ inside one of its cells
    cells: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(records):
        cells.setdefault((row_key(r), _base_column_key(r)), []).append(i)
    for (_, column), members in cells.items():
        keys = set().union(*(settings[i].keys() for i in members))
        for key in keys:
            values = {repr(settings[i][key]) for i in members if key in settings[i]}
            if len(values) > 1:
                varying.setdefault(column, set()).add(key)
    for r, mine in zip(records, settings):
        keys = sorted(varying.get(_base_column_key(r), ()))
        r["_recipe"] = ", ".join(f"{k}={mine[k]}" for k in keys if k in mine)
    return records


def with_recipes(records: list[dict]) -> list[dict]:
    """``records`` as :func:`load_records` returns them (``_recipe`` set); records built elsewhere are annotated as
    copies."""
    return records if all("_recipe" in r for r in records) else annotate_recipes([dict(r) for r in records])


def _base_column_key(record: dict) -> str:
    return f"{record['task']} · {model_label(record)} · {dataset_name(record)} [{record['scale']}]"


def column_key(record: dict) -> str:
    """task · model · dataset [scale], then the training settings that set this run apart (:func:`annotate_recipes`)
    and the budget fraction of a ``--at`` view."""
    budget = record.get("_at_budget")
    recipe = record.get("_recipe")
    return _base_column_key(record) + (f" · {recipe}" if recipe else "") + (f" @{budget:.2f}" if budget is not None else "")
