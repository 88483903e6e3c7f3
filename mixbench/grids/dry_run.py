"""What a ``mixbench reproduce … --dry-run`` plans, said under its command lines (on stderr): the number of runs, their
GPU time per kind of card estimated from earlier records, what they would fetch from the hub, and the data they need
that is not here — which fails the dry run (exit 2) as it would fail the real one, after the lines are printed.

The plan is read back from the ``mixbench run`` lines the dry run printed (every grid kind prints them: plain grids,
the ladder's rounds and its analyses' reruns, the downstream and RLHF chains' stages), so a new kind of grid gets the
summary without code of its own.  A stage marked ``# reuse`` is finished already and is not counted.
"""

from __future__ import annotations

import logging
import re
import shlex
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import USER_ERRORS, ConfigError, one_line
from ..evaluation.suites import OFFLINE_VARIABLES, hub_offline
from ..results.records import read_records
from ..training.builders import make_datamodule
from ..training.config import compose
from ..training.preflight import check_data_sources

log = logging.getLogger(__name__)

RUN_PREFIX = "mixbench run "
PLACEHOLDER = re.compile(r"<[^<>=]+>")  # a chain's stage names the run an earlier stage makes, e.g. init_from=<pretrain run>
COMMITTED_RESULTS = Path("results/proxy")  # the repository's committed proxy records, read where they are (a checkout)


def planned_runs(printed: str) -> list[list[str]]:
    """The argument lists of the ``mixbench run`` lines in a dry run's output (``# …`` comments dropped; a stage
    marked ``# reuse`` left out)."""
    runs = []
    for line in printed.splitlines():
        _, found, rest = line.partition(RUN_PREFIX)
        if found and "# reuse " not in rest:
            runs.append(shlex.split(rest, comments=True))
    return runs


@dataclass
class DataNeeds:
    """What the planned runs read that is not in the package: problems (a message, e.g. a path that does not exist →
    the runs it stops) and what they would fetch from the hub (a dataset streamed, a tokenizer → runs)."""

    missing: Counter = field(default_factory=Counter)
    hub: Counter = field(default_factory=Counter)


def data_needs(configs) -> DataNeeds:
    """Each configuration's data module made (nothing read) and its sources looked up as the run's preflight does; its
    ``hub_sources()`` (what it would fetch from the hub: a dataset it streams, a tokenizer), where it has that method."""
    needs = DataNeeds()
    for cfg in configs:
        try:
            datamodule = make_datamodule(cfg)
            check_data_sources(datamodule)
        except USER_ERRORS as err:
            needs.missing[one_line(err)] += 1
            continue
        for stream in getattr(datamodule, "hub_sources", list)():
            needs.hub[stream] += 1
    return needs


def _steps_of(record: dict) -> int | None:
    budget = record.get("budget") or {}
    steps = budget.get("total_steps") or record.get("steps")
    return int(steps) if isinstance(steps, (int, float)) and steps > 0 else None


def _key(config) -> tuple:
    """What a run's time a step depends on, read from its config (a record's ``config`` or a composed one): task,
    scale, data, micro-batch, model and depth."""
    model, data = config.get("model") or {}, config.get("data") or {}
    choices, layers = config.get("choices") or {}, model.get("num_layers")
    return (config["task"]["name"], config.get("scale"), choices.get("data"), data.get("batch_size"), model.get("name"), layers)


def card_seconds(folders) -> dict[tuple, dict[str, list[tuple[float, dict]]]]:
    """From the finished GPU records under ``folders``: :func:`_key` → card → [(GPU-seconds a step, trainer config)], a
    step's GPU time being the run's wall time × its GPUs / its steps."""
    found: dict = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        for record in read_records(folder)[0]:
            hardware, config = record.get("hardware") or {}, record.get("config") or {}
            steps, wall = _steps_of(record), record.get("wall_time_s")
            if record.get("status") != "completed" or not hardware.get("gpus") or not steps or not wall or "task" not in config:
                continue
            world = int((record.get("effective") or {}).get("world_size") or 1)
            found[_key(config)][hardware["gpus"][0]].append(
                (float(wall) * world / steps, {**(config.get("trainer") or {}), "_steps": steps})
            )
    return found


def _run_seconds(cfg, per_step: float, trainer: dict) -> float | None:
    """A planned run's GPU time from one record's seconds a step: its ``max_steps``, else the record's steps scaled by
    the epochs of each."""
    steps = cfg.trainer.get("max_steps")
    if isinstance(steps, int) and steps > 0:
        return per_step * steps
    epochs, theirs = cfg.trainer.get("max_epochs"), trainer.get("max_epochs")
    if epochs and theirs:
        return per_step * trainer["_steps"] * epochs / theirs
    return None


def gpu_estimate(configs, folders) -> tuple[dict[str, tuple[float, int]], int, int]:
    """Estimated GPU hours a card kind: {card: (hours, runs estimated)}, the runs with no record of their task and
    model on any card, and the number of records it is based on.  Each run takes the median over that card's records of its
    task, scale, data, micro-batch, model and depth (:func:`card_seconds`)."""
    seconds = card_seconds(folders)
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
    unknown, matched = 0, set()
    for cfg in configs:
        by_card = seconds.get(_key(cfg), {})
        matched.add(_key(cfg))
        estimated = False
        for card, samples in by_card.items():
            values = [s for s in (_run_seconds(cfg, per_step, trainer) for per_step, trainer in samples) if s is not None]
            if values:
                totals[card][0] += statistics.median(values) / 3600
                totals[card][1] += 1
                estimated = True
        unknown += not estimated
    used = sum(len(samples) for key in matched for samples in seconds.get(key, {}).values())
    return {card: (hours, n) for card, (hours, n) in totals.items()}, unknown, used


def record_folders(configs) -> list[Path]:
    """Where earlier records are looked for: the planned runs' ``results_dir`` and the committed proxy results, those
    that exist, none inside another."""
    folders = [f for f in dict.fromkeys([*(Path(str(cfg.results_dir)) for cfg in configs), COMMITTED_RESULTS]) if f.is_dir()]
    return [f for f in folders if not any(o != f and f.resolve().is_relative_to(o.resolve()) for o in folders)]  # read once


def summarize_plan(name: str, printed: str, data_here: bool = True) -> None:
    """Log the plan's total, GPU-time estimate and data needs; a :class:`ConfigError` (exit 2) naming every piece of
    data the runs need that is not here (a path that does not exist; anything from the hub while it is off) — a
    warning instead where the runs read their data elsewhere (``data_here`` false: a plan made for a GPU lease)."""
    argvs, configs, unusable = planned_runs(printed), [], Counter()
    for argv in argvs:  # a chain's later stages are composed here first (their data may be what is missing)
        try:
            configs.append(compose(argv))
        except USER_ERRORS as err:
            if not any(placeholder in str(err) for placeholder in PLACEHOLDER.findall(" ".join(argv))):
                unusable[one_line(err)] += 1  # an error about <a run an earlier stage makes> is the real run's to check
    log.info("%s: %d run(s) planned", name, len(argvs))
    if not argvs:
        return
    _log_estimate(configs, len(argvs))
    try:
        _check_data(name, configs, unusable)
    except ConfigError as err:
        if data_here:
            raise
        log.warning("%s (the runs read their data elsewhere: --data-elsewhere)", err)


def _log_estimate(configs, total: int) -> None:
    folders = record_folders(configs)
    hours, unknown, used = gpu_estimate(configs, folders)
    unknown += total - len(configs)  # runs that do not compose here (their data missing) are not estimated
    where = ", ".join(map(str, folders)) or "no folder"
    for card, (hours_on_card, runs) in sorted(hours.items()):
        log.info("estimated GPU time on %s: %.1f h for %d of %d run(s)", card, hours_on_card, runs, total)
    if hours:
        log.info(
            "the estimate: each run's steps × the median GPU-seconds a step (wall time × GPUs / steps) of %d finished GPU "
            "record(s) of the same task, scale, data, micro-batch, model and depth in %s; %d run(s) have none: not estimated",
            used,
            where,
            unknown,
        )
    else:
        log.info("no GPU time estimated: no finished GPU record of the same task, scale, data, micro-batch, model and depth in %s", where)


def _check_data(name: str, configs, unusable: Counter) -> None:
    needs = data_needs(configs)
    missing = dict(unusable + needs.missing)
    off = f"would come from the Hugging Face hub, off here ({'/'.join(OFFLINE_VARIABLES)}): give local ones (data.path=, data.tokenizer=)"
    for fetched, runs in needs.hub.items():
        if hub_offline():
            missing[f"{fetched} {off}"] = runs
        else:
            log.warning("%d run(s) fetch %s from the Hugging Face hub", runs, fetched)
    if missing:
        problems = "; ".join(f"{message} [{runs} run(s)]" for message, runs in missing.items())
        raise ConfigError(f"{name}: the planned runs need data that is not here: {problems}")
