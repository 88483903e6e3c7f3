"""``mixbench eval``: score a trained run on downstream tasks and add the result to its record.

Two protocols:

* ``harness`` (default, the paper's): lm-evaluation-harness tasks, log-likelihood of each choice; per task the
  harness's ``acc`` (and ``acc_norm`` where it reports it) with its standard error;
* ``generate`` (LLM-Adapters' ``commonsense_evaluate.py``): the Alpaca prompt of the instruction, a greedy answer of
  at most ``max_new_tokens`` tokens (LLM-Adapters: 32, 4-beam search), the first match of the task's answer pattern
  compared with the gold answer; acc = mean(correct), stderr = sqrt(acc(1 − acc)/(n − 1)) (the harness's).

``average`` is the unweighted mean of the tasks' ``acc`` (the paper's "Avg.").  The summary goes into
``<run>/eval/<protocol>.json`` and into the run's ``record.json`` (``downstream.<protocol>`` and the metrics
``eval/<task>/acc`` ... for the harness, ``eval_gen/<task>/acc`` ... for ``generate``; a later evaluation with the
same protocol replaces them).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import tempfile
import time
from pathlib import Path

from ..core.errors import ConfigError
from ..core.storage import atomic_write_text, refuse_link
from ..data.tokens import EOS_CANDIDATES, TokenizerSpec, special_id
from ..results.records import read_record, write_record
from ..sft.prompt import build_prompt
from ..training.trained import load_trained
from .formats import GENERATE_TASKS, TABLE2_TASKS, extract_answer, get_task_format
from .scoring import Scorer
from .suites import find_task_data, hub_reachable, write_harness_tasks

log = logging.getLogger(__name__)
PROTOCOLS = ("harness", "generate")
METRIC_PREFIX = {"harness": "eval", "generate": "eval_gen"}


def require_lm_eval():
    """The harness module, or a one-line error naming the install command."""
    try:
        import lm_eval
    except ImportError:
        raise ConfigError("lm-evaluation-harness is not installed: pip install -e '.[eval]'") from None
    return lm_eval


def mean_stderr(correct: list[float]) -> float:
    """Standard error of a mean of 0/1 outcomes: sample std / sqrt(n) = sqrt(p(1 − p)/(n − 1))."""
    return statistics.stdev(correct) / math.sqrt(len(correct)) if len(correct) > 1 else float("nan")


def resolve_sources(data: list[str] | None) -> list[str]:
    """``auto`` → ``hub`` when the hub can be reached, else ``embedded``."""

    data = list(data or ["auto"])
    if data == ["auto"]:
        data = ["hub"] if hub_reachable() else ["embedded"]
        log.info(
            "evaluation data: %s",
            "the harness's hub datasets" if data == ["hub"] else "the embedded sample (the hub is unreachable or offline)",
        )
    if "hub" in data and len(data) > 1:
        raise ConfigError("--data hub cannot be combined with local sources")
    if "auto" in data:
        raise ConfigError("--data auto cannot be combined with other sources")
    return data


# --------------------------------------------------------------------------- harness protocol


def _harness_metrics(results: dict, task: str) -> dict:
    row = results["results"][task]
    out = {}
    for metric in ("acc", "acc_norm"):
        if f"{metric},none" in row:
            out[metric] = float(row[f"{metric},none"])
            stderr = row.get(f"{metric}_stderr,none")
            out[f"{metric}_stderr"] = float(stderr) if isinstance(stderr, (int, float)) else None
    samples = results.get("n-samples", {})
    out["n"] = (
        samples[task]["effective"] if task in samples else sum(v["effective"] for k, v in samples.items() if k.startswith(f"{task}_"))
    )
    return out


def run_harness(trained, tasks: list[str], sources: list[str], num_fewshot: int, limit: int | None, work: Path, **scorer) -> dict:
    lm_eval = require_lm_eval()
    from lm_eval.tasks import TaskManager

    from .harness import MixbenchLM  # needs lm-eval, the optional [eval] extra

    lm = MixbenchLM(model=trained.model, tokenizer=trained.tokenizer, **scorer)
    if sources == ["hub"]:
        manager, data = TaskManager(), {t: {"source": "hub (the harness's own dataset)"} for t in tasks}
    else:
        datas = [find_task_data(t, sources) for t in tasks]
        write_harness_tasks(datas, work / "harness_tasks", num_fewshot)
        manager, data = TaskManager(include_path=str(work / "harness_tasks"), include_defaults=False), {d.task: d.describe() for d in datas}
    results = lm_eval.simple_evaluate(
        model=lm, tasks=list(tasks), num_fewshot=num_fewshot, limit=limit, task_manager=manager, log_samples=False, bootstrap_iters=1000
    )
    per_task = {t: {**_harness_metrics(results, t), "data": data[t]} for t in tasks}
    versions = {k: v for k, v in results.get("versions", {}).items() if k in tasks}
    return {
        "tasks": per_task,
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "task_versions": versions,
        "n_shot": {k: v for k, v in results.get("n-shot", {}).items() if k in tasks},
    }


# --------------------------------------------------------------------------- generate-and-match protocol


def run_generate(
    trained,
    tasks: list[str],
    sources: list[str],
    limit: int | None,
    max_new_tokens: int,
    template: str,
    batch_size: int,
    device,
    max_length,
    precision: str,
) -> dict:
    if sources == ["hub"]:
        raise ConfigError(
            "--protocol generate reads instruction-format files: give --data embedded or a folder (e.g. LLM-Adapters' dataset/)"
        )
    tokenizer = TokenizerSpec(trained.tokenizer).load()
    eos = special_id(tokenizer, EOS_CANDIDATES, "end-of-sequence")
    scorer = Scorer(trained.model, device, batch_size, max_length, precision)
    per_task = {}
    for task in tasks:
        if get_task_format(task).answers is None:
            raise ConfigError(
                f"task {task!r} has no generate-and-match format; --protocol generate takes {', '.join(GENERATE_TASKS)} "
                "(and arc_challenge, social_iqa)"
            )
        data = find_task_data(task, sources)
        items = data.instructions()[:limit] if limit else data.instructions()
        prompts = [tokenizer.encode(build_prompt(r["instruction"], r.get("input"), template), add_special_tokens=False).ids for r in items]
        outputs = scorer.generate(prompts, max_new_tokens, eos)
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
        correct = [float(extract_answer(task, text) == r["answer"].strip()) for r, text in zip(items, texts)]
        per_task[task] = {
            "acc": statistics.fmean(correct),
            "acc_stderr": mean_stderr(correct),
            "n": len(items),
            "data": data.describe(),
            "examples": [{"answer": r["answer"], "generation": t} for r, t in zip(items[:3], texts[:3])],
        }
        log.info("%s: acc %.4f (n=%d)", task, per_task[task]["acc"], len(items))
    return {"tasks": per_task, "max_new_tokens": max_new_tokens, "template": template, "decoding": "greedy"}


# --------------------------------------------------------------------------- entry point and record


def evaluate(
    run: str,
    tasks: list[str] | None = None,
    protocol: str = "harness",
    data: list[str] | None = None,
    num_fewshot: int = 0,
    limit: int | None = None,
    batch_size: int = 16,
    device: str | None = None,
    max_length: int | None = None,
    precision: str = "auto",
    max_new_tokens: int = 32,
    template: str = "alpaca",
    tokenizer: str | None = None,
    out: str | None = None,
    update_record: bool = True,
) -> dict:
    """Evaluate ``run`` (a run folder, ``.safetensors`` or ``.ckpt``); returns the summary (see the module doc)."""

    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown --protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    if protocol == "harness":
        require_lm_eval()
    tasks = list(tasks or (TABLE2_TASKS if protocol == "harness" else GENERATE_TASKS))
    for task in tasks:
        get_task_format(task)
    if num_fewshot and protocol == "generate":
        raise ConfigError("--num-fewshot applies to --protocol harness only (LLM-Adapters evaluates zero-shot)")
    sources = resolve_sources(data)
    started = time.perf_counter()
    trained = load_trained(run, tokenizer)
    out_dir = Path(out) if out else (trained.run_dir / "eval" if trained.run_dir else None)
    if out_dir is None:
        raise ConfigError(f"{run} is not in a run folder: give --out DIR for the evaluation files")
    scorer = dict(batch_size=batch_size, device=device, max_length=max_length, precision=precision)
    with tempfile.TemporaryDirectory(prefix="mixbench-eval-") as work:
        if protocol == "harness":
            result = run_harness(trained, tasks, sources, num_fewshot, limit, Path(work), **scorer)
        else:
            result = run_generate(trained, tasks, sources, limit, max_new_tokens, template, **scorer)
    summary = {
        "protocol": protocol,
        "data": sources,
        "num_fewshot": num_fewshot,
        "limit": limit,
        **result,
        "average": {"acc": statistics.fmean(v["acc"] for v in result["tasks"].values())},
        "model": {
            "source": str(trained.source),
            "model": trained.description.get("model"),
            "norm_label": trained.description.get("norm_label"),
            "tokenizer": trained.tokenizer,
        },
        "device": str(trained.model.head.weight.device) if hasattr(trained.model, "head") else None,
        "wall_time_s": round(time.perf_counter() - started, 2),
    }
    refuse_link(out_dir).mkdir(parents=True, exist_ok=True)  # eval/ planted as a link: nothing written through it
    atomic_write_text(out_dir / f"{protocol}.json", json.dumps(summary, indent=1, default=str) + "\n")
    if update_record and trained.run_dir is not None and (trained.run_dir / "record.json").is_file():
        add_to_record(trained.run_dir / "record.json", summary)
    return summary


def metrics_of(summary: dict) -> dict[str, float]:
    """Flat metrics of a summary: ``<prefix>/<task>/<acc|acc_stderr|acc_norm|acc_norm_stderr>`` and ``<prefix>/avg/acc``."""
    prefix = METRIC_PREFIX[summary["protocol"]]
    flat = {
        f"{prefix}/{task}/{k}": v
        for task, values in summary["tasks"].items()
        for k, v in values.items()
        if k.startswith("acc") and isinstance(v, (int, float))
    }
    flat[f"{prefix}/avg/acc"] = summary["average"]["acc"]
    return flat


def add_to_record(path: Path, summary: dict) -> None:
    """Put ``summary`` into the record at ``path`` (written atomically), replacing an earlier one of the same protocol."""

    record = read_record(path)
    prefix = METRIC_PREFIX[summary["protocol"]] + "/"
    previous = record.setdefault("downstream", {}).get(summary["protocol"])
    if previous is not None:
        log.info("replacing the earlier %s evaluation of %s (data %s)", summary["protocol"], path.parent, previous.get("data"))
    record["downstream"][summary["protocol"]] = {k: v for k, v in summary.items() if k != "examples"}
    record["metrics"] = {**{k: v for k, v in record["metrics"].items() if not k.startswith(prefix)}, **metrics_of(summary)}
    write_record(record, path)
    log.info("added %d %s metrics to %s", len(metrics_of(summary)), summary["protocol"], path)
