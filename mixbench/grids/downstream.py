"""Downstream grids (``kind: downstream`` in ``configs/paper/mixln_iclr2025.yaml``; paper Table 2): pretrain → SFT → eval.

Each (size task, norm, seed) of the grid is a *chain* of three stages:

1. ``pretrain``: ``mixbench run task=<c4 size task> norm=<norm> ...`` (the Table 1 run);
2. ``sft``: ``mixbench run task=sft_commonsense model=<same> norm=<same> init_from=<pretrain run> ...``;
3. ``eval``: ``mixbench eval --run <sft run> ...`` (lm-evaluation-harness; results into the SFT run's record).

A finished stage is reused, not re-run: a pretraining or fine-tuning run under ``results_dir`` with the same task,
seed and scale, finished (``completed``, or ``diverged`` with its weights: the paper fine-tunes its diverged Post-LN
models too), whose recorded config agrees with the composed one on every setting it recorded (except where results
go and, for fine-tuning, which folder ``init_from`` names — it must be the chain's pretraining run); an evaluation is
reused when the SFT record already holds one with the same tasks, data, shots and limit.

Command-line settings go to both training stages; ``pretrain:KEY=VALUE`` / ``sft:KEY=VALUE`` to one of them, and
``eval:KEY=VALUE`` sets an evaluation option (``tasks``, ``data``, ``num_fewshot``, ``limit``, ``batch_size``,
``protocol``, ``device``, ``max_length``, ``precision``, ``max_new_tokens``; lists comma separated).
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from ..core.settings import flat_settings
from ..core.storage import open_append
from ..evaluation.formats import GENERATE_TASKS, TABLE2_TASKS
from ..evaluation.report import seeds_report, task_floors
from ..evaluation.runner import evaluate, resolve_sources
from ..results.records import load_records, model_label
from ..results.table import Cell
from ..training.config import compose, norm_spec
from .paper import grid, paper_runs
from .runner import run_one

log = logging.getLogger(__name__)
STAGES = ("pretrain", "sft", "eval")
EVAL_OPTIONS = {
    "tasks": list,
    "data": list,
    "num_fewshot": int,
    "limit": int,
    "batch_size": int,
    "protocol": str,
    "device": str,
    "max_length": int,
    "precision": str,
    "max_new_tokens": int,
}
VOLATILE = (
    "run_dir",
    "results_dir",
    "init_from",
    "resume",
    "resume_from",
    "trainer.enable_progress_bar",
    "data.num_workers",
    "data.cache_dir",
    "data.num_proc",
)
FINISHED = ("completed", "diverged")


@dataclass
class Chain:
    """One (size, norm, seed) of a downstream grid: the argument lists of its stages and the paper's numbers."""

    label: str
    pretrain: list[str]
    sft: list[str]
    eval: dict
    paper: dict | None = None
    dirs: dict = field(default_factory=dict)  # stage → run folder (found or made)


def split_overrides(extra: tuple[str, ...]) -> tuple[list[str], list[str], list[str], dict]:
    """``(common, pretrain, sft, eval options)`` of the command-line settings (see the module doc)."""
    common, pretrain, sft, options = [], [], [], {}
    for arg in extra:
        stage, sep, rest = arg.partition(":")
        if not sep or stage not in STAGES or "=" not in rest:
            common.append(arg)
            continue
        if stage == "eval":
            key, value = rest.split("=", 1)
            if key not in EVAL_OPTIONS:
                raise ConfigError(f"unknown evaluation option {key!r} in {arg!r}; valid: {', '.join(EVAL_OPTIONS)}")
            kind = EVAL_OPTIONS[key]
            options[key] = [v for v in value.split(",") if v] if kind is list else kind(value)
        else:
            (pretrain if stage == "pretrain" else sft).append(rest)
    return common, pretrain, sft, options


def _inherited(argv: list[str]) -> list[str]:
    """The model and norm choices and settings of a pretraining argument list (what fine-tuning must repeat)."""
    return [a for a in argv if a.split("=", 1)[0].split(".")[0] in ("model", "norm")]


def chains(name: str, scale: str = "paper", seeds: tuple[int, ...] = (0,), extra: tuple[str, ...] = (), root=None) -> list[Chain]:
    """The chains of grid ``name`` at ``scale`` (``paper`` or ``proxy``)."""

    spec = grid(name, root)
    common, pre_extra, sft_extra, eval_extra = split_overrides(extra)
    stages = spec["stages"]
    out = []
    for task, norm, overrides, scale_args, proxy, paper in combos(name, scale, root):
        sft_scale, eval_scale = proxy.get("sft_overrides", []), proxy.get("eval", {})
        for seed in seeds:
            pretrain = [f"task={task}", f"norm={norm}", *scale_args, *overrides, f"seed={seed}", *common, *pre_extra]
            cfg = compose(pretrain, root)
            sft = [*follow_up(stages["sft"], pretrain, cfg), *sft_scale, *common, *sft_extra]
            options = {**stages.get("eval", {}), **eval_scale, **eval_extra}
            label = f"{task}{_variant(scale_args)} · {norm_spec(cfg).label()} · seed {seed}"
            out.append(Chain(label, pretrain, sft, options, paper))
    return out


def combos(name: str, scale: str, root=None) -> list[tuple]:
    """``(pretraining task, norm, norm overrides, scale overrides, proxy block or {}, paper numbers)`` of every
    configuration of a chained grid; at proxy scale the placements are the paper runs' or the block's ``norms``."""
    spec = grid(name, root)
    if scale == "paper":
        return [(r.task, r.norm, list(r.overrides), [], {}, r.paper) for r in paper_runs(name, root)]
    if scale != "proxy":
        raise ConfigError(f"unknown --scale {scale!r}; valid: paper, proxy")
    blocks = spec["proxy"] if isinstance(spec["proxy"], list) else [spec["proxy"]]  # one proxy block, or several
    out = []
    for proxy in blocks:
        placements = (
            [(n, ()) for n in proxy["norms"]]
            if "norms" in proxy
            else list(dict.fromkeys((r.norm, tuple(r.overrides)) for r in paper_runs(name, root)))
        )
        out += [
            (task, norm, list(overrides), [*proxy.get("overrides", []), *variant], proxy, None)
            for task in proxy["tasks"]
            for variant in proxy["variants"]
            for norm, overrides in placements
        ]
    return out


def follow_up(stage: dict, pretrain: list[str], cfg) -> list[str]:
    """The arguments of a stage after pretraining (``stage``: ``{task, overrides}``): its task, the pretraining run's
    model and norm settings, scale and seed, then the stage's own overrides."""
    inherited = _inherited(pretrain)
    if not any(a.startswith("model=") for a in inherited):
        inherited.insert(0, f"model={cfg.model.name}")
    return list(dict.fromkeys([f"task={stage['task']}", *inherited, f"scale={cfg.scale}", f"seed={cfg.seed}", *stage.get("overrides", [])]))


def _variant(args: list[str]) -> str:
    model = [a for a in args if a.startswith("model.")]
    return f"[{','.join(a.split('.', 1)[1] for a in model)}]" if model else ""


# --------------------------------------------------------------------------- finding finished stages


def same_settings(recorded: dict, composed: dict) -> bool:
    """Every setting ``recorded`` holds (except where results go) has the same value in ``composed``."""
    new = flat_settings(composed)
    old = flat_settings(recorded)
    skip = set(VOLATILE)
    if old.get("data.tokenizer") == old.get("init_from"):
        skip.add("data.tokenizer")  # fine-tuning: the pretraining run's folder
    return all(k in new and new[k] == v for k, v in old.items() if k not in skip and not any(k.startswith(f"{s}.") for s in skip))


def find_finished(records: list[dict], cfg, init_from: Path | None = None) -> Path | None:
    """The newest finished run of ``cfg`` among ``records`` (with weights), or None."""
    from omegaconf import OmegaConf

    composed = OmegaConf.to_container(cfg, resolve=True)
    for r in sorted(records, key=lambda r: str(r.get("started_at")), reverse=True):
        run_dir = Path(r.get("run_dir", ""))
        if (
            r["task"] != cfg.task.name
            or r["seed"] != cfg.seed
            or r["scale"] != cfg.scale
            or r["status"] not in FINISHED
            or not (run_dir / "model.safetensors").is_file()
        ):
            continue
        if init_from is not None and Path((r.get("init_from") or {}).get("source", "")).resolve() != init_from.resolve():
            continue
        if same_settings(r.get("config", {}), composed):
            return run_dir
    return None


def evaluated(record: dict, options: dict, sources: list[str]) -> bool:
    """Whether ``record`` already holds an evaluation with these options."""

    protocol = options.get("protocol", "harness")
    done = (record.get("downstream") or {}).get(protocol)
    tasks = options.get("tasks") or (TABLE2_TASKS if protocol == "harness" else GENERATE_TASKS)
    return (
        bool(done)
        and set(done["tasks"]) == set(tasks)
        and done.get("data") == sources
        and done.get("num_fewshot") == options.get("num_fewshot", 0)
        and done.get("limit") == options.get("limit")
    )


# --------------------------------------------------------------------------- running


def _eval_argv(run: str, options: dict) -> list[str]:
    argv = ["eval", "--run", run]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    return argv


def _train(argv: list[str], subprocesses: bool, outcomes: list, total: int) -> Path | None:
    """Run one training stage through :mod:`mixbench.grids.runner` (logged as run k of the ``total`` training runs of the
    grid); its run folder if it finished (completed, or diverged with its weights)."""

    outcomes.append(None)  # reserve this run's number (chains run in threads)
    number = len(outcomes) - 1
    outcome = run_one(number, total, argv, compose(argv), in_subprocess=subprocesses)
    outcomes[number] = outcome
    if outcome.status not in FINISHED or outcome.run_dir is None or not (outcome.run_dir / "model.safetensors").is_file():
        log.error("%s: %s; the chain stops here", outcome.command, outcome.status)
        return None
    return outcome.run_dir


def run_chain(chain: Chain, records: list[dict], subprocesses: bool, resume: bool, outcomes: list, total: int) -> dict | None:
    """Run the stages of ``chain`` that are not finished yet; the SFT record (with its evaluation) or None."""

    extra = ["resume=auto"] if resume else []
    pretrain = find_finished(records, compose(chain.pretrain)) or _train([*chain.pretrain, *extra], subprocesses, outcomes, total)
    if pretrain is None:
        return None
    sft_argv = [*chain.sft, f"init_from={pretrain}"]
    sft = find_finished(records, compose(sft_argv), pretrain) or _train([*sft_argv, *extra], subprocesses, outcomes, total)
    if sft is None:
        return None
    chain.dirs.update(pretrain=pretrain, sft=sft)
    record = json.loads((sft / "record.json").read_text())
    sources = resolve_sources(chain.eval.get("data"))
    if evaluated(record, chain.eval, sources):
        log.info("%s: evaluation already done", chain.label)
    elif subprocesses:
        argv = _eval_argv(str(sft), {**chain.eval, "data": sources})
        with open_append(sft / "console.log") as console:
            done = subprocess.run([sys.executable, "-m", "mixbench.cli", *argv], stdout=console, stderr=subprocess.STDOUT)
        if done.returncode:
            log.error("mixbench %s failed (exit %d); see %s", " ".join(argv), done.returncode, sft / "console.log")
    else:
        try:
            evaluate(str(sft), **{**chain.eval, "data": sources})
        except Exception as err:  # the grid goes on
            log.error("evaluation of %s failed: %s: %s", sft, type(err).__name__, err)
    return json.loads((sft / "record.json").read_text())


def plan(chain: Chain, records: list[dict]) -> str:
    """The dry-run listing of one chain: each stage's command and whether it is reused."""

    pretrain = find_finished(records, compose(chain.pretrain))
    pre_ref = str(pretrain) if pretrain else "<pretrain run>"
    sft_argv = [*chain.sft, f"init_from={pre_ref}"]
    sft = find_finished(records, compose(sft_argv), pretrain) if pretrain else None
    q = lambda argv: " ".join(shlex.quote(a) for a in argv)  # noqa: E731
    lines = [
        f"# {chain.label}",
        f"[pretrain] mixbench run {q(chain.pretrain)}" + (f"   # reuse {pretrain}" if pretrain else ""),
        f"[sft]      mixbench run {q(sft_argv)}" + (f"   # reuse {sft}" if sft else "   # after [pretrain]"),
        f"[eval]     mixbench {q(_eval_argv(str(sft) if sft else '<sft run>', chain.eval))}   # after [sft]",
    ]
    if compose(sft_argv).data.get("path") is None:
        lines.append("           !! the sft stage needs its data: add sft:data.path=<Commonsense170K-format JSON>")
    return "\n".join(lines) + "\n"


def reproduce_downstream(
    name: str,
    scale: str,
    seeds: tuple[int, ...],
    extra: tuple[str, ...],
    dry_run: bool,
    jobs: int = 1,
    resume: bool = False,
    only: tuple[str, ...] = (),
) -> list | None:
    """``mixbench reproduce <downstream grid>``: list (``dry_run``, returns None) or run every chain (``jobs`` chains at a
    time, as subprocesses when more than one; ``only``: the chains whose pretraining arguments include all these
    ``key=value`` items); returns the :class:`mixbench.grids.launchers.Outcome` of every training run made, and prints the
    downstream table of the finished chains."""

    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    todo = [c for c in chains(name, scale, seeds, extra) if all(item in c.pretrain for item in only)]
    if not todo:
        raise ConfigError(f"--only {' '.join(only)} matches no chain of {name}; see mixbench reproduce {name} --dry-run")
    results_dir = compose(todo[0].pretrain).results_dir
    records = load_records(results_dir)[0] if Path(results_dir).is_dir() else []
    if dry_run:
        sys.stdout.write("".join(plan(c, records) for c in todo))
        return None
    missing = [c.label for c in todo if compose([*c.sft, "init_from=<pretrain run>"]).data.get("path") is None]
    if missing:
        raise ConfigError(
            "the sft stage needs its data: add sft:data.path=<Commonsense170K-format JSON> "
            f"(e.g. LLM-Adapters' commonsense_170k.json); missing for {len(missing)} chain(s)"
        )
    outcomes: list = []
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda c: run_chain(c, records, jobs > 1, resume, outcomes, 2 * len(todo)), todo))
    sys.stdout.write(downstream_table([r for r in done if r is not None], grid(name)["tasks"]))
    return [o for o in outcomes if o is not None]


# --------------------------------------------------------------------------- tables


def as_primary(record: dict, metric: str, value: float) -> dict:
    """``record`` seen through ``value``, named ``metric``, as its only and primary metric (higher is better)."""
    return {**record, "metrics": {metric: value}, "primary_metric": {"name": metric, "higher_is_better": True, "value": value}}


def _view(record: dict, metric: str, scale: float = 100.0) -> dict | None:
    """``record`` seen through one downstream metric (×``scale``) as its primary metric; None if it lacks it."""
    value = record.get("metrics", {}).get(metric)
    return None if value is None else as_primary(record, metric, scale * value)


def _cells(records: list[dict], columns: list[str]) -> dict:
    return {col: Cell.from_records([v for r in records if (v := _view(r, f"eval/{col}/acc")) is not None]) for col in columns}


def paper_rows(name: str, stage: str, records: list[dict], root=None) -> list[tuple[str, str, str, object, list[dict]]]:
    """Per paper run of a chained grid: ``(row "<model> · <norm>", model, norm label, the run, the paper-scale records of
    ``stage``'s task with that model and norm)``."""

    task = grid(name, root)["stages"][stage]["task"]
    out = []
    for run in paper_runs(name, root):
        cfg = compose([f"task={run.task}", f"norm={run.norm}", *run.overrides], root)
        model, label = cfg.model.name, norm_spec(cfg).label()
        matching = [
            r
            for r in records
            if r["scale"] == "paper" and r["task"] == task and r["model"]["name"] == model and r["norm"].get("label") == label
        ]
        out.append((f"{model} · {label}", model, label, run, matching))
    return out


def paper_comparison(name: str, records: list[dict], root=None) -> tuple[list[str], list[str], dict]:
    """``mixbench table --paper <downstream grid>``: rows ``<model> · <norm>``, columns the tasks and ``avg``, cells
    ``(ours: Cell of the paper-scale SFT records' harness accuracy in %, the paper's number)``."""
    columns = [*grid(name, root)["tasks"], "avg"]
    rows, cells = [], {}
    for row, _, _, run, matching in paper_rows(name, "sft", records, root):
        rows.append(row)
        for col, cell in _cells(matching, columns).items():
            cells[(row, col)] = (cell, (run.paper or {}).get(col))
    return rows, columns, cells


def downstream_table(records: list[dict], tasks: list[str], results_dir: Path | None = None) -> str:
    """A Markdown table of SFT records: one row per model label · norm · scale, harness accuracy (%) per task and
    the average (mean ± std over seeds), with the pretraining run's final validation perplexity and status (a
    pretraining run no longer where ``init_from`` says is looked up by its folder name under ``results_dir``)."""

    columns = [*tasks, "avg"]
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(f"{model_label(r)} · {r['norm']['label']} · {r['scale']}", []).append(r)
    lines = ["| model · norm · scale | pretrain ppl (status) | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for row, recs in groups.items():
        cells = _cells(recs, columns)
        lines.append(f"| {row} | {_pretrain_summary(recs, results_dir)} | " + " | ".join(cells[c].summary() or "–" for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _pretrain_record(record: dict, results_dir: Path | None) -> Path | None:
    """The record.json of the run ``record`` was initialised from: where ``init_from`` says, else (results moved or
    copied) the run folder of the same name under ``results_dir``."""
    source = (record.get("init_from") or {}).get("source")
    if not source:
        return None
    if (Path(source) / "record.json").is_file():
        return Path(source) / "record.json"
    found = sorted(results_dir.rglob(f"{Path(source).name}/record.json")) if results_dir is not None else []
    return found[0] if found else None


def _pretrain_summary(records: list[dict], results_dir: Path | None = None) -> str:
    out = []
    for r in records:
        path = _pretrain_record(r, results_dir)
        if path is not None:
            pre = json.loads(path.read_text())
            ppl = pre.get("metrics", {}).get("val/ppl")
            out.append(f"{ppl:.2f} ({pre['status']})" if isinstance(ppl, (int, float)) else pre["status"])
    return "; ".join(dict.fromkeys(out)) or "–"


def seeds_text(records: list[dict], tasks: list[str], sources: list[str], baseline: str) -> str:
    """The floors and seed statistics (:mod:`mixbench.evaluation.report`) of each model label · scale of ``records``."""

    try:
        floors = {t: task_floors(t, list(sources)) for t in tasks}
    except FileNotFoundError as err:  # the evaluated items are elsewhere: the seed statistics still stand
        floors, missing = {}, f"(no chance/majority levels: {err}; pass --data)\n\n"
    else:
        missing = ""
    models: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        model = f"{model_label(r)} · {r['scale']}"
        models.setdefault(model, {}).setdefault(r["norm"]["label"], []).append(r)
    return "".join(
        f"### {model}: floors and what the seeds support\n\n{missing}" + seeds_report(groups, [*tasks, "avg"], floors, baseline)
        for model, groups in models.items()
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m mixbench.grids.downstream --results-dir DIR [--grid table2] [--scale proxy] [--out FILE]``: the table."""
    import argparse

    parser = argparse.ArgumentParser(description="downstream results (SFT records with their evaluation) as a Markdown table")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--grid", default="table2")
    parser.add_argument("--scale", default=None, help="only records of this scale (paper, proxy, embedded)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--baseline", default="pre", help="placement label the others are compared with (Welch 95 %% intervals)")
    parser.add_argument(
        "--data",
        nargs="+",
        default=None,
        help="where the evaluated items are, for the chance and majority levels (default: as the evaluations recorded)",
    )
    args = parser.parse_args(argv)
    spec = grid(args.grid)
    records = [
        r
        for r in load_records(args.results_dir)[0]
        if r["task"] == spec["stages"]["sft"]["task"]
        and (args.scale is None or r["scale"] == args.scale)
        and (r.get("downstream") or {}).get("harness")
    ]
    text = f"{spec['title']}: ours, harness accuracy (%), mean ± std over seeds\n\n" + downstream_table(
        records, spec["tasks"], Path(args.results_dir)
    )
    sources = args.data or next((r["downstream"]["harness"].get("data") for r in records if r["downstream"]["harness"].get("data")), None)
    if records and sources:
        text += "\n" + seeds_text(records, spec["tasks"], sources, args.baseline)
    emit(text, args.out)
    return 0


def emit(text: str, out: str | None) -> None:
    """``text`` on stdout, and into the file ``out`` when given."""
    if out:
        Path(out).write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
