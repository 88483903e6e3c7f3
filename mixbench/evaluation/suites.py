"""Where the evaluation items come from, and the harness task folder that reads local ones.

``--data`` names one or more sources, searched in order for each task:

* ``hub``: the harness's own task definitions and datasets, downloaded from the Hugging Face hub;
* ``embedded``: the small sample shipped in ``mixbench/assets/eval`` (see its NOTICE.md: registry-derived items in
  the tasks' formats; only MMLU and SocialIQA items are the benchmarks' own);
* a folder holding ``<task>.jsonl`` (or ``.json``; or the shared registry's ``<task>_like.jsonl``) in the harness's
  fields, optionally ``<task>.fewshot.jsonl`` as the few-shot pool; or LLM-Adapters folders
  ``<Folder>/test.json`` (+ ``train.json``) in the instruction format (e.g. ``boolq/``, ``ARC-Easy/``).

Local items are evaluated through the harness's own YAML: :func:`write_harness_tasks` writes one file per task that
``include``s the installed harness's task file and replaces only the data source (``dataset_path: json``, the items
as the ``test`` split; few-shot examples from ``fewshot`` or, without one, from the other test items) — same
prompts, choices and metrics.  MMLU becomes one task per subject plus the ``mmlu`` group (size-weighted mean).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.jsonitems import read_items
from ..data import ASSETS_DIR
from .formats import get_task_format, to_harness, to_instruction

log = logging.getLogger(__name__)
EMBEDDED_DIR = ASSETS_DIR / "eval"


@dataclass(frozen=True)
class TaskData:
    """The items of one task: ``file`` in ``format`` (``harness`` or ``instruction``) and an optional few-shot pool."""

    task: str
    file: Path
    format: str
    fewshot: Path | None = None

    def _convert(self, path: Path, want: str) -> list[dict]:
        rows = read_items(path)
        if not all(isinstance(r, dict) for r in rows):
            raise ConfigError(f"{path}: every item must be a JSON object")
        if self.format == want:
            return rows
        convert = to_harness if want == "harness" else to_instruction
        out, bad = [], 0
        for row in rows:
            try:
                out.append(convert(self.task, row))
            except (ValueError, KeyError, TypeError):
                bad += 1
        if bad:
            log.warning("%s: %d of %d items do not parse as %s items and are left out", path, bad, len(rows), self.task)
        return out

    def harness_docs(self) -> list[dict]:
        return self._convert(self.file, "harness")

    def fewshot_docs(self) -> list[dict] | None:
        return self._convert(self.fewshot, "harness") if self.fewshot else None

    def instructions(self) -> list[dict]:
        return self._convert(self.file, "instruction")

    def describe(self) -> dict:
        where = f"embedded/{self.file.name}" if self.file.is_relative_to(EMBEDDED_DIR) else str(self.file)
        return {"file": where, "format": self.format, "fewshot": str(self.fewshot) if self.fewshot else None}


def _folder(source: str) -> Path:
    folder = EMBEDDED_DIR if source == "embedded" else Path(source).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"--data {source}: no such folder (give 'hub', 'embedded' or a folder of task files)")
    return folder


def find_task_data(task: str, sources: list[str]) -> TaskData:
    """The first source of ``sources`` (folders or ``embedded``) that holds items of ``task``."""
    fmt = get_task_format(task)
    for source in sources:
        folder = _folder(source)
        for stem in dict.fromkeys((task, fmt.registry)):
            for ext in (".jsonl", ".json"):
                if (folder / f"{stem}{ext}").is_file():
                    pool = next(
                        (folder / f"{stem}.fewshot{e}" for e in (".jsonl", ".json") if (folder / f"{stem}.fewshot{e}").is_file()), None
                    )
                    return TaskData(task, folder / f"{stem}{ext}", "harness", pool)
        if fmt.adapters_dir and (folder / fmt.adapters_dir / "test.json").is_file():
            train = folder / fmt.adapters_dir / "train.json"
            return TaskData(task, folder / fmt.adapters_dir / "test.json", "instruction", train if train.is_file() else None)
    expected = f"<folder>/{task}.jsonl (harness fields)" + (
        f" or <folder>/{fmt.adapters_dir}/test.json (LLM-Adapters)" if fmt.adapters_dir else ""
    )
    raise ConfigError(
        f"no items of task {task!r} in --data {' '.join(sources)}: expected {expected}; '--data embedded' has every Table 2 task"
    )


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off here (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set)."""
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in OFFLINE_VARIABLES)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub can be used (not when it is switched off: :func:`hub_offline`)."""
    if hub_offline():
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def harness_tasks_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


def _harness_file(relative: str) -> Path:
    path = harness_tasks_dir() / relative
    if not path.is_file():
        import lm_eval

        raise ConfigError(
            f"the installed lm-eval ({getattr(lm_eval, '__version__', '?')}) has no tasks/{relative}; "
            "mixbench needs lm-eval 0.4.x: pip install -e '.[eval]'"
        )
    return path


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _task_yaml(out: Path, name: str, include: Path, docs: list[dict], pool: list[dict] | None, num_fewshot: int) -> None:
    import yaml

    available = len(pool) if pool else len(docs) - 1  # without a pool, the other items of the task
    if num_fewshot > available:
        raise ConfigError(
            f"task {name} has {available} possible few-shot examples, fewer than --num-fewshot {num_fewshot}: "
            f"give a pool <task>.fewshot.jsonl beside its items, or fewer shots"
        )

    files = {"test": str(_write_jsonl(out / "data" / f"{name}.test.jsonl", docs))}
    if pool:
        files["fewshot"] = str(_write_jsonl(out / "data" / f"{name}.fewshot.jsonl", pool))
    config = {
        "include": str(include),
        "task": name,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
        "training_split": None,
        "validation_split": None,
        "test_split": "test",
        "fewshot_split": "fewshot" if pool else "test",
    }
    (out / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def write_harness_tasks(datas: list[TaskData], out: Path, num_fewshot: int = 0) -> None:
    """One harness YAML per task in ``out`` (MMLU: per subject, plus the ``mmlu`` group), reading the local items."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    for data in datas:
        fmt = get_task_format(data.task)
        docs, pool = data.harness_docs(), data.fewshot_docs()
        if not docs:
            raise ConfigError(f"{data.file}: no {data.task} items")
        if data.task != "mmlu":
            _task_yaml(out, data.task, _harness_file(fmt.harness_yaml), docs, pool, num_fewshot)
            continue
        subjects = sorted({d["subject"] for d in docs})
        names = []
        for subject in subjects:
            include = harness_tasks_dir() / fmt.harness_yaml.format(subject=subject)
            if not include.is_file():
                log.warning("MMLU subject %r is not a harness task; its items are left out", subject)
                continue
            _task_yaml(
                out,
                f"mmlu_{subject}",
                include,
                [d for d in docs if d["subject"] == subject],
                [d for d in pool if d["subject"] == subject] if pool else None,
                num_fewshot,
            )
            names.append(f"mmlu_{subject}")
        group = {
            "group": "mmlu",
            "task": names,
            "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}],
            "metadata": {"version": 2.0},
        }
        (out / "_mmlu_group.yaml").write_text(yaml.safe_dump(group, sort_keys=False))
