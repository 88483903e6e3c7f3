"""``mixbench search``: an Optuna study over per-block norm plans, with multi-fidelity pruning, then a confirmation.

A study lives in ``<results_dir>/search/<study>/``: ``study.sqlite3`` (Optuna's storage: a search resumes, and several
processes may share it), ``trials/`` (one ordinary run record per trial, ``record["search"]`` = study, trial, params,
``pruned_at_step``) and ``confirm/`` (the confirmation runs).  Every trial trains with the study's one search seed; the
pruner (successive halving or Hyperband over optimizer steps) sees the primary metric of each validation inside
``fit`` (:class:`mixbench.training.callbacks.TrialPruning`); a trial that is not pruned runs the full budget.  ``--confirm``
re-runs the best plan and the baselines ``pre`` and ``mix`` (α=0.25) with seeds the search never used.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.tasks import get_task
from ..results.records import load_records, primary_value, write_record
from ..training.callbacks import TrialPruning
from ..training.config import compose, norm_spec
from ..training.run import FINISHED, run, run_defaults, same_run_settings
from .search_space import Space

log = logging.getLogger(__name__)

BASELINES = {"pre": ["norm=pre"], "mix": ["norm=mix", "norm.alpha=0.25"]}


def baseline_plans(num_layers: int) -> dict[str, tuple[str, ...]]:
    """The per-block plans of the baseline arms (a study's trials of the same plans tell their best lr)."""
    post = int(0.25 * num_layers)  # Mix-LN: the first ⌊αL⌋ blocks Post-LN
    return {"pre": ("pre",) * num_layers, "mix": ("post",) * post + ("pre",) * (num_layers - post)}


RESERVED = ("results_dir", "run_dir", "resume", "norm", "norm.layers", "norm.num_post", "norm.alpha")  # + optim.lr with --lrs


def optuna_module():
    """Optuna, or one clear error saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ConfigError('mixbench search needs Optuna: pip install -e ".[search]"') from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def study_dir(results_dir: str | Path, study: str) -> Path:
    if not study or not all(c.isalnum() or c in "-_." for c in study) or study.startswith("."):
        raise ConfigError(f"--study {study!r}: use letters, digits, '-', '_' and '.' only")
    return Path(results_dir) / "search" / study


def storage(folder: Path):
    """The study's SQLite storage; a process that died mid-trial leaves a trial that the heartbeat marks failed."""
    optuna = optuna_module()
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the heartbeat arguments
    return optuna.storages.RDBStorage(f"sqlite:///{folder / 'study.sqlite3'}", heartbeat_interval=60, grace_period=180)


@dataclass(frozen=True)
class Settings:
    """What defines a study; stored in it, so that a resumed search, ``--confirm`` and ``--report`` use the same."""

    space: str
    kinds: tuple[str, ...]
    overrides: tuple[str, ...]
    pruner: str = "halving"
    min_steps: int | None = None
    reduction_factor: int = 3
    lrs: tuple[float, ...] = ()  # --lrs: optim.lr searched beside the plan (a category); () = the overrides' lr

    def as_attrs(self) -> dict:
        return {
            "space": self.space,
            "kinds": list(self.kinds),
            "overrides": list(self.overrides),
            "pruner": self.pruner,
            "min_steps": self.min_steps,
            "reduction_factor": self.reduction_factor,
            "lrs": list(self.lrs),
        }

    @classmethod
    def from_attrs(cls, attrs: dict) -> Settings:
        """A stored study's settings (a study made before ``--lrs`` existed tunes no lr)."""
        return cls(
            attrs["space"],
            tuple(attrs["kinds"]),
            tuple(attrs["overrides"]),
            attrs["pruner"],
            attrs["min_steps"],
            attrs["reduction_factor"],
            tuple(attrs.get("lrs") or ()),
        )


LR = "optim.lr"


def suggest_lr(settings: Settings, trial) -> list[str]:
    """The ``optim.lr`` override a trial draws from ``--lrs`` (none when the study tunes no lr)."""
    return [f"{LR}={trial.suggest_categorical(LR, list(settings.lrs))}"] if settings.lrs else []


def tuned_lr(study, space: Space, plan: tuple[str, ...]) -> float | None:
    """The lr of the best completed trial of ``plan`` in a study that tunes the lr; None when it tried no such plan."""
    optuna = optuna_module()
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if LR in t.params and space.plan_of(t.params) == plan and t.value is not None and math.isfinite(t.value)
    ]
    if not done:
        return None
    return (max if study.direction.name == "MAXIMIZE" else min)(done, key=lambda t: t.value).params[LR]


def base_config(overrides: tuple[str, ...], lrs: tuple[float, ...] = ()):
    """The composed config every trial shares (the plan and a searched lr aside); rejects settings the search owns."""

    reserved = RESERVED + ((LR,) if lrs else ())
    owned = [o for o in overrides if o.split("=", 1)[0].lstrip("+") in reserved]
    if owned:
        raise ConfigError(
            f"mixbench search sets {', '.join(owned)} itself (the plan comes from --space, the lr from --lrs; runs go to "
            "<--results-dir>/search/<study>/); leave them out"
        )
    if any(isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0 for lr in lrs):
        raise ConfigError(f"--lrs takes positive learning rates, e.g. 3e-4,1e-3,3e-3; got {list(lrs)}")
    return compose(list(overrides))


def make_pruner(settings: Settings, max_steps: int):
    optuna = optuna_module()
    if settings.pruner == "none":
        return optuna.pruners.NopPruner()
    if settings.min_steps is None or settings.min_steps < 1:
        raise ConfigError(f"--pruner {settings.pruner} needs --min-steps N ≥ 1: the first rung, e.g. the first validation step")
    if settings.reduction_factor < 2:
        raise ConfigError(f"--reduction-factor must be at least 2, got {settings.reduction_factor}")
    if settings.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=settings.min_steps, reduction_factor=settings.reduction_factor)
    return optuna.pruners.HyperbandPruner(
        min_resource=settings.min_steps, max_resource=max_steps if max_steps > 0 else "auto", reduction_factor=settings.reduction_factor
    )


def open_study(results_dir, name: str, settings: Settings | None = None, seed: int = 0):
    """``(study, settings, space, base config)``: create the study with ``settings`` or load it (``settings`` None:
    it must exist; given for an existing study: they must be the ones it was created with)."""
    optuna = optuna_module()

    folder = study_dir(results_dir, name)
    exists = (folder / "study.sqlite3").is_file()
    if settings is None and not exists:
        raise ConfigError(f"no study {name!r} under {folder.parent} (start one with mixbench search --study {name} ...)")
    if exists:
        stored = Settings.from_attrs(stored_study(name, folder).user_attrs)
        if settings is not None and settings != stored:
            raise ConfigError(
                f"study {name!r} was created with {stored.as_attrs()}; resume it with the same settings "
                f"(given: {settings.as_attrs()}) or start another --study"
            )
        settings = stored
    cfg = base_config(settings.overrides, settings.lrs)
    space = Space(settings.space, int(cfg.model.num_layers), settings.kinds)
    pruner = make_pruner(settings, int(cfg.trainer.max_steps))
    higher = get_task(cfg.task.name).primary_metric.higher_is_better
    folder.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=name,
        storage=storage(folder),
        load_if_exists=True,
        pruner=pruner,
        direction="maximize" if higher else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=4),
    )
    if not exists:
        for key, value in settings.as_attrs().items():
            study.set_user_attr(key, value)
    return study, settings, space, cfg


def stored_study(name: str, folder: Path, wait_s: int = 60):
    """The study in ``folder``'s storage once its settings are stored: a process started beside the one creating it
    waits up to ``wait_s`` seconds for them."""
    optuna = optuna_module()
    for _ in range(wait_s):
        try:
            study = optuna.load_study(study_name=name, storage=storage(folder))
            if "space" in study.user_attrs:
                return study
        except KeyError:  # the storage exists, the study not yet
            pass
        time.sleep(1)
    raise ConfigError(
        f"{folder / 'study.sqlite3'} holds no study {name!r} with mixbench's settings; remove the file or choose another --study"
    )


def plan_label(settings: Settings, space: Space, plan: tuple[str, ...]) -> str:
    """The table row (norm label) of ``plan`` under the study's settings (e.g. with its ``norm.kind``)."""

    return norm_spec(compose([*settings.overrides, *space.overrides(plan)])).label()


def repeat_of(study, trial) -> tuple[int, float] | None:
    """A completed earlier trial with the same plan (the search seed is fixed, so it would train the same run)."""
    optuna = optuna_module()
    for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if other.params == trial.params and other.number != trial.number:
            return other.number, other.value
    return None


def search(results_dir, name: str, settings: Settings, trials: int, max_trials: int | None = None) -> None:
    """Run ``trials`` more trials of study ``name`` in this process (others may run beside it on the same storage),
    stopping early once the study holds ``max_trials`` finished trials (all processes together)."""
    optuna = optuna_module()

    if trials < 1 or (max_trials is not None and max_trials < 1):
        raise ConfigError(f"--trials and --max-trials must be at least 1, got {trials} and {max_trials}")
    study, settings, space, cfg = open_study(results_dir, name, settings, seed=sampler_seed(results_dir, name))
    metric = get_task(cfg.task.name).primary_metric.name
    folder = study_dir(results_dir, name)

    def objective(trial) -> float:
        plan = space.suggest(trial)
        lr = suggest_lr(settings, trial)
        if (earlier := repeat_of(study, trial)) is not None:
            trial.set_user_attr("repeat_of", earlier[0])
            log.info("trial %d: plan of trial %d, already trained with the search seed: %.4g", trial.number, *earlier)
            return earlier[1]
        argv = [*settings.overrides, *space.overrides(plan), *lr, f"results_dir={folder / 'trials'}"]
        pruning = TrialPruning(trial, metric)
        info = {"study": name, "trial": trial.number, "space": settings.space, "params": dict(trial.params)}
        try:
            record = run(compose(argv), command=["mixbench", "run", *argv], callbacks=(pruning,), record_extra={"search": info})
        except Exception as error:  # Optuna records the trial as failed; the report names why (e.g. out of GPU memory)
            trial.set_user_attr("status", f"failed ({type(error).__name__})")
            raise
        trial.set_user_attr("run_dir", str(Path(record["run_dir"]).relative_to(folder)))
        trial.set_user_attr("status", record["status"])
        if record["status"] == "pruned":
            trial.set_user_attr("pruned_at_step", pruning.pruned_at_step)
            raise optuna.TrialPruned(f"pruned at step {pruning.pruned_at_step}")
        value = primary_value(record)
        if record["status"] != "completed" or value is None or not math.isfinite(value):
            log.warning("trial %d %s: recorded as a failed trial", trial.number, record["status"])
            return float("nan")  # Optuna records a NaN objective as a failed trial
        return float(value)

    log.info(
        "study %s: %d trial(s) so far; %d more (%s space, %d plans, %s pruner)",
        name,
        len(study.trials),
        trials,
        settings.space,
        len(space.plans()),
        settings.pruner,
    )
    if max_trials is not None and len([t for t in study.trials if t.state.is_finished()]) >= max_trials:
        log.info("study %s already holds %d finished trials (--max-trials %d): nothing to do", name, len(study.trials), max_trials)
        return
    finished = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL
    stop = [optuna.study.MaxTrialsCallback(max_trials, states=finished)] if max_trials is not None else []
    study.optimize(objective, n_trials=trials, catch=(Exception,), callbacks=stop)  # a crashed trial: recorded failed, the search goes on


def sampler_seed(results_dir, name: str) -> int:
    """The sampler's seed: the number of trials the study holds and this process's id, so that a resumed search and
    processes started side by side on one storage draw different plans (the draws are not reproducible; the trials'
    training seed is)."""
    folder = study_dir(results_dir, name)
    held = len(stored_study(name, folder).trials) if (folder / "study.sqlite3").is_file() else 0
    return held * 100_003 + os.getpid() % 100_003


def best_trial(study):
    optuna = optuna_module()
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.value is not None and math.isfinite(t.value)
    ]
    if not done:
        raise ConfigError(f"study {study.study_name!r} has no completed full-budget trial yet; run more trials first")
    return (max if study.direction.name == "MAXIMIZE" else min)(done, key=lambda t: t.value)


def confirmation_seeds(search_seed: int, count: int) -> list[int]:
    """The ``count`` smallest non-negative seeds other than the search's."""
    if count < 2:
        raise ConfigError(f"--seeds must be at least 2 for an interval (3 or more recommended), got {count}")
    return [s for s in range(count + 1) if s != search_seed][:count]


def confirmation_runs(results_dir, name: str, seeds: int) -> list[list[str]]:
    """The ``mixbench run`` arguments of the confirmation: the best plan, ``pre`` and ``mix`` (α=0.25), each seed
    (``resume=auto``: a second ``--confirm`` skips finished runs and continues interrupted ones)."""
    study, settings, space, cfg = open_study(results_dir, name)
    best = best_trial(study)
    arms = {"best": space.overrides(space.plan_of(best.params)), **BASELINES}
    if settings.lrs:  # every arm at its own best lr: the best plan at its trial's, each baseline at the study's best for its plan
        arms["best"] = [*arms["best"], f"{LR}={best.params[LR]}"]
        for arm, plan in baseline_plans(space.num_layers).items():
            lr = tuned_lr(study, space, plan)
            if lr is None:
                log.warning("the study tried no trial of %s's plan: it is confirmed at the study's base lr %s", arm, cfg.optim.lr)
            else:
                arms[arm] = [*arms[arm], f"{LR}={lr}"]
    folder = study_dir(results_dir, name) / "confirm"
    log.info(
        "confirming trial %d (%s) against pre and mix(α=0.25): %s",
        best.number,
        plan_label(settings, space, space.plan_of(best.params)),
        "; ".join(f"{arm} {' '.join(a for a in argv if a.startswith(LR)) or 'base lr'}" for arm, argv in arms.items()),
    )
    return [
        [*settings.overrides, *arm, f"seed={seed}", f"results_dir={folder}", "resume=auto"]
        for seed in confirmation_seeds(int(cfg.seed), seeds)
        for arm in arms.values()
    ]


def reusable_runs(configs: list, sources: list) -> dict[int, dict]:
    """``{i: record}``: for the confirmation run ``configs[i]`` (composed), the newest finished record under the
    ``sources`` folders (earlier runs, e.g. a placements grid) of exactly its settings and seed, by the test
    ``resume=auto`` uses (:func:`~mixbench.training.run.same_run_settings`: only the run's location may differ).  Such a
    run is an independent sample the search never used, so the confirmation need not repeat it."""
    records = [r for source in sources for r in _readable_records(source)]
    records.sort(key=lambda r: str(r.get("started_at")), reverse=True)
    found = {}
    for i, cfg in enumerate(configs):
        defaults = run_defaults(cfg)
        for r in records:
            if (
                r["task"] == cfg.task.name
                and r["seed"] == cfg.seed
                and r["status"] in FINISHED
                and same_run_settings(r.get("config") or {}, cfg, defaults)
            ):
                found[i] = r
                break
    return found


def split_confirmation(results_dir, name: str, argvs: list[list[str]], reuse_from: list | None) -> tuple[dict, dict, list]:
    """``(done, reused, todo)`` of the confirmation runs ``argvs``: ``{i: record}`` of those the study's ``confirm/``
    already holds (run or copied there before), ``{i: record}`` of those a ``reuse_from`` folder holds, and the argvs
    still to run.  Each run's settings are composed once for both lookups."""
    configs = [compose(argv) for argv in argvs]
    confirm = study_dir(results_dir, name) / "confirm"
    done = reusable_runs(configs, [confirm]) if confirm.is_dir() else {}
    found = reusable_runs(configs, reuse_from) if reuse_from else {}
    reused = {i: record for i, record in found.items() if i not in done}
    return done, reused, [argv for i, argv in enumerate(argvs) if i not in done and i not in reused]


def _readable_records(source) -> list[dict]:
    if not Path(source).is_dir():
        raise ConfigError(f"--reuse-from {source}: no such folder (give a folder of earlier runs, e.g. results/proxy/placements)")
    records, problems = load_records(source)
    for problem in problems:
        log.warning("--reuse-from: skipped unreadable record: %s", problem)
    return records


def adopt_reused(results_dir, name: str, records: list[dict]) -> list[Path]:
    """Copy each reused record (record.json with ``reused_from`` naming the original folder, config.yaml,
    logs/metrics.csv) into ``<study>/confirm/reused/<its run folder>``; a copy made before is kept."""
    import json
    import shutil

    copies = []
    for record in records:
        source = Path(record["_path"]).parent
        target = study_dir(results_dir, name) / "confirm" / "reused" / source.name
        if not (target / "record.json").is_file():
            for extra in ("config.yaml", "logs/metrics.csv"):
                if (source / extra).is_file():
                    (target / extra).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source / extra, target / extra)
            original = json.loads((source / "record.json").read_text())
            write_record({**original, "reused_from": str(source)}, target / "record.json")
            log.info("confirmation: reused %s", source)
        copies.append(target)
    return copies


def open_plan(settings: Settings) -> str:
    """``--dry-run``: the space's plans (checked), one line each, as the ``mixbench run`` arguments a trial would get."""
    cfg = base_config(settings.overrides, settings.lrs)
    space = Space(settings.space, int(cfg.model.num_layers), settings.kinds)
    make_pruner(settings, int(cfg.trainer.max_steps))
    lrs = [f" {LR}={lr}" for lr in settings.lrs] or [""]
    lines = [
        f"# {len(space.plans())} plans ({settings.space} space, {space.num_layers} blocks) × {len(lrs)} lr(s), {settings.pruner} pruner"
    ]
    lines += [" ".join(space.overrides(plan)) + lr for plan in space.plans() for lr in lrs]
    return "\n".join(lines) + "\n"
