"""``mixbench run``: train and evaluate one configuration and write its result record."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import secrets
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from ..core.configs import read_saved_config
from ..core.errors import RESUMABLE_EXIT, ConfigError, DiskFull
from ..core.families import get_family
from ..core.reading import UnreadableFile, read_json
from ..core.run_files import CONFIG_FILE, LOCK_FILE, METRICS_FILE, RECORD_FILE
from ..core.settings import flat_settings
from ..core.storage import atomic_write_text, disk_full_under, refuse_link
from ..core.tasks import get_task
from ..layers.placements import plan_summary
from ..models import model_defaults
from ..results.provenance import git_commit, hardware, package_versions, peak_gpu_memory, reset_peak_gpu_memory
from ..results.records import SCHEMA, write_record
from .builders import build_datamodule, build_lightning_module, build_run_model, checkpoint_activations, model_options
from .callbacks import DivergenceMonitor, ExactResumeNotice, RunClock, ThroughputMonitor, ValidationHistory
from .checkpointing import CHECKPOINT_DIR, AtomicCheckpointIO, RNGStateCallback, checkpoint_callback, newest_checkpoint
from .compile import compile_model, uses_cudagraphs
from .config import compose, norm_spec, runs_root, upgrade_saved_config
from .gradnorm import GradNormMonitor
from .graph_marker import CudaGraphStepMarker
from .loggers import build_loggers
from .precision import apply_fp8, lightning_precision, runs_on_cuda
from .preemption import Preempted, PreemptionCheckpoint, interrupts_stop, preemption_note
from .preflight import preflight
from .profiling import make_profiler, stop_profiling
from .run_lock import RunLock
from .status import FINISHED, classify  # FINISHED: statuses of a run that need not run again
from .step_graph import module_obstacle, wants_capture
from .strategy import accumulation_steps, make_strategy, val_check_batches, world_size
from .weights import WeightsError, describe_model, init_from, save_weights

log = logging.getLogger(__name__)


def is_child_rank() -> bool:
    """True in every process of a distributed run but the first: those Lightning launches for DDP (they re-run the same
    command) and the other ranks that ``srun`` or ``torchrun`` start."""
    return any(int(os.environ.get(key, 0)) > 0 for key in ("LOCAL_RANK", "NODE_RANK", "RANK", "SLURM_PROCID"))


def finished_record(run_dir: Path) -> dict | None:
    """The run's record if it finished (completed, diverged or stalled); None if absent, failed or unreadable."""
    try:
        record = read_json(run_dir / RECORD_FILE)  # a regular file only: a FIFO never blocks
    except UnreadableFile:
        return None
    return record if isinstance(record, dict) and record.get("status") in FINISHED else None


LOCATION_KEYS = ("run_dir", "results_dir", "resume", "command", "slurm", "profiler")  # where and how a run runs, not what it is
# what a run may use or how it gets there, not what it computes: data workers (capped by a grid's --jobs), whether the
# model is compiled whole or block by block, whether the final validation repeats fit's last one (the same weights), and
# where the initial weights are drawn (the same distribution: a seed drawn on the GPU stands for that seed), and whether
# the blocks' activations are kept or recomputed (the same gradients)
RESOURCE_KEYS = ("data.num_workers", "compile.scope", "final_validation", "init_device", "activation_checkpointing")


def same_run_settings(theirs: dict, cfg: DictConfig | dict, defaults) -> bool:
    """Whether a run's saved settings ``theirs`` (its ``config.yaml``, or its record's ``config``) are exactly ``cfg``
    (a config, or one already converted to a resolved container),
    the run-location settings (``LOCATION_KEYS``) and resources (``RESOURCE_KEYS``) aside: a results folder that was moved
    or renamed still matches, and so does a run that a grid's ``--jobs`` gave fewer data workers.  A
    setting added to mixbench after that run was made (absent from ``theirs``) matches while ``cfg`` holds the
    setting's default (``defaults()``: the flat settings of ``cfg``'s group choices): the older code behaved as the
    default does.  Empty settings match nothing."""
    return bool(theirs) and not settings_differences(theirs, cfg, defaults)


def settings_differences(theirs: dict, cfg: DictConfig | dict, defaults, aside: tuple[str, ...] = ()) -> list[str]:
    """The dotted settings in which ``theirs`` and ``cfg`` differ, as :func:`same_run_settings` compares them (the
    dotted settings ``aside`` aside too), each as ``key: theirs → ours``; empty when they are the same run."""
    theirs = json.loads(json.dumps(theirs))  # a copy: the compile upgrade below edits it
    upgrade_saved_config(theirs)  # settings whose saved form or meaning changed since
    ours = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    for config in (theirs, ours):
        for key in LOCATION_KEYS:
            config.pop(key, None)
    skip = (*RESOURCE_KEYS, *aside)
    theirs, ours = ({key: value for key, value in flat_settings(config).items() if key not in skip} for config in (theirs, ours))
    missing = object()
    differ = [key for key, value in theirs.items() if ours.get(key, missing) != value]
    added = [key for key in ours if key not in theirs]
    if added:
        try:
            default = defaults()
        except (ConfigError, KeyError, TypeError):  # e.g. a project's task (not composable from here)
            default = {}
        differ += [key for key in added if key not in default or ours[key] != default[key]]
    return [f"{key}: {theirs.get(key, '(absent)')!r} → {ours.get(key, '(absent)')!r}" for key in differ]


def run_defaults(cfg: DictConfig):
    """``defaults()`` for :func:`same_run_settings`: the flat settings of ``cfg``'s group choices, composed once."""
    return functools.cache(
        lambda: flat_settings(OmegaConf.to_container(compose([f"{k}={v}" for k, v in cfg.choices.items()]), resolve=True))
    )


def _same_run(folder: Path, cfg: DictConfig, defaults) -> bool:
    """Whether ``folder`` holds a run of exactly ``cfg`` (:func:`same_run_settings` of its ``config.yaml``)."""
    try:
        theirs = read_saved_config(folder / CONFIG_FILE)
    except ConfigError:
        return False
    return isinstance(theirs, dict) and same_run_settings(theirs, cfg, defaults)


def runs_parent(cfg: DictConfig, label: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.=+-]+", "_", label.replace("α", "alpha")).strip("_")
    return runs_root(cfg.results_dir) / cfg.task.name / cfg.model.name / slug


def existing_run(cfg: DictConfig, label: str) -> Path | None:
    """The folder under ``results_dir`` holding a run of exactly ``cfg``: a finished one before an unfinished one
    (the newest); None when there is none.  Creates nothing."""
    defaults = run_defaults(cfg)
    same = [p for p in sorted(runs_parent(cfg, label).glob(f"seed{cfg.seed}-*")) if _same_run(p, cfg, defaults)]
    finished = [p for p in same if finished_record(p) is not None]
    return finished[0] if finished else (same[-1] if same else None)


def finished_runs(cfg: DictConfig, label: str, aside: tuple[str, ...] = ()) -> list[dict]:
    """The finished records of ``cfg`` under its ``results_dir``, of every seed and every value of the dotted settings
    ``aside`` (e.g. ``("optim.lr",)``; each of them and ``cfg.seed`` aside, the same settings), oldest first.  One
    pass over the run folders: each record is read once."""
    defaults, found, ours = run_defaults(cfg), [], {}
    for folder in sorted(runs_parent(cfg, label).glob("seed*-*")):
        record = finished_record(folder)
        if record is None:
            continue
        theirs = record.get("config") or {}
        at = (record.get("seed"), *(flat_settings(theirs).get(key) for key in aside))
        if at not in ours:  # cfg at that seed (and those values), resolved once each (a copy of the whole config)
            variant = OmegaConf.merge(cfg, {"seed": at[0]})
            for key, value in zip(aside, at[1:]):
                OmegaConf.update(variant, key, value)
            ours[at] = OmegaConf.to_container(variant, resolve=True)
        if same_run_settings(theirs, ours[at], defaults):
            found.append(record)
    return found


RESUME_ASIDE = ("resume_from",)  # rewritten into config.yaml by each attempt: which checkpoint it started from


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` already holds (part of) a run: its config, record or checkpoints."""
    return any((Path(folder) / name).exists() for name in (CONFIG_FILE, RECORD_FILE, CHECKPOINT_DIR))


def check_same_config(cfg: DictConfig, folder: Path, what: str) -> None:
    """A resume continues only its own config: :class:`ConfigError` naming the settings in which ``cfg`` differs from
    ``folder``'s ``config.yaml`` (run-location settings aside, as :func:`same_run_settings`); nothing if it has none."""
    if not os.path.lexists(Path(folder) / CONFIG_FILE):  # a special file is read (and refused), not passed over
        return
    differ = settings_differences(read_saved_config(Path(folder) / CONFIG_FILE), cfg, run_defaults(cfg), aside=RESUME_ASIDE)
    if differ:
        shown = "; ".join(differ[:5]) + (f"; and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise ConfigError(
            f"{what}: {folder} holds a run of another config ({shown}); a resume continues only its own config: "
            "give the run's own settings, or leave resume unset and choose another run_dir to start a new run"
        )


def run_directory(cfg: DictConfig, label: str) -> Path:
    """``run_dir`` if given; with ``resume=auto`` the newest unfinished folder of the same config; else a new
    ``<results_dir>/runs/<task>/<model>/<norm>/seed<k>-<utc time>-<id>``.  A resume (``resume=auto``,
    ``resume_from=``) of another config's run folder, and a new run into a folder that holds a run, are
    :class:`ConfigError` before anything is written."""
    if cfg.resume_from is not None and not is_child_rank() and Path(cfg.resume_from).parent.name == CHECKPOINT_DIR:
        check_same_config(cfg, Path(cfg.resume_from).parent.parent, f"resume_from={cfg.resume_from}")
    if cfg.run_dir is not None:
        path = Path(cfg.run_dir)
        resumes = cfg.resume == "auto" or cfg.resume_from is not None
        if is_child_rank():
            pass
        elif finished_record(path) is not None and cfg.resume != "auto":
            raise ConfigError(f"run_dir {path} already holds a finished run; choose another run_dir, leave it unset, or add resume=auto")
        elif resumes:
            check_same_config(cfg, path, f"run_dir={path}")
        elif holds_run(path):
            raise ConfigError(
                f"run_dir {path} already holds another run (its config, record or checkpoints), which a new run would "
                "replace; add resume=auto to continue it, or choose another run_dir"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"cannot create the run folder {path} ({err.strerror}); set run_dir= to a writable folder") from None
        return path
    parent = runs_parent(cfg, label)
    if cfg.resume == "auto":  # the same config's folder: a finished one (nothing to do) before an unfinished one
        folder = existing_run(cfg, label)
        if folder is not None:
            log.info("resume=auto: %s", folder)
            return folder
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    for _ in range(100):  # concurrent runs of one config each get their own folder
        path = parent / f"seed{cfg.seed}-{stamp}-{secrets.token_hex(3)}"
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
        except OSError as err:
            raise ConfigError(f"cannot create the run folder {path} ({err.strerror}); set results_dir= to a writable folder") from None
    raise ConfigError(f"could not create a new run folder under {parent}")


def resume_checkpoint(cfg: DictConfig, run_dir: Path) -> str | None:
    """The checkpoint to resume: ``resume_from`` if set; with ``resume=auto`` the newest complete one in ``run_dir``."""
    if cfg.resume_from is not None:
        return cfg.resume_from
    if cfg.resume == "auto":
        newest = newest_checkpoint(run_dir)
        log.info("resume=auto: %s", f"continuing from {newest}" if newest else "no checkpoint yet, starting")
        return str(newest) if newest else None
    return None


def throughput_monitor(cfg: DictConfig, model) -> ThroughputMonitor:
    family = get_family(cfg.task.family)
    return ThroughputMonitor(family.items, family.flops_per_item(cfg, model), cfg.trainer.log_every_n_steps)


def build_trainer(cfg: DictConfig, run_dir: Path, callbacks: list, block_class: type | None = None, resume: str | None = None) -> L.Trainer:
    from lightning.pytorch.callbacks import LearningRateMonitor

    from .console import console_callbacks

    kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    kwargs["precision"] = lightning_precision(kwargs.get("precision"), kwargs.get("accelerator"))
    kwargs["strategy"] = make_strategy(cfg, block_class, kwargs["precision"])
    kwargs["accumulate_grad_batches"] = accumulation_steps(cfg.data.get("global_batch_size"), cfg.data.batch_size, world_size(cfg.trainer))
    kwargs["val_check_interval"] = val_check_batches(kwargs.get("val_check_interval"), kwargs["accumulate_grad_batches"])
    callbacks = [
        *callbacks,
        LearningRateMonitor(logging_interval="step"),
        RNGStateCallback(),
        ExactResumeNotice(),
        PreemptionCheckpoint(run_dir / CHECKPOINT_DIR, cfg.checkpoint.preempt_agree_every_n_steps),
        *console_callbacks(kwargs),
    ]
    every = cfg.checkpoint.every_n_steps
    if every:
        callbacks.append(checkpoint_callback(run_dir, every, cfg.checkpoint.keep_last, resume))
    try:
        return L.Trainer(
            **kwargs,
            default_root_dir=str(run_dir),
            logger=build_loggers(
                cfg.logger,
                OmegaConf.to_container(cfg.logger_options, resolve=True),
                run_dir,
                f"{cfg.task.name}-{norm_spec(cfg).label()}-seed{cfg.seed}",
            ),
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO(run_dir)],
            profiler=make_profiler(cfg.profiler, run_dir, on_gpu=runs_on_cuda(kwargs.get("accelerator"))),
            enable_checkpointing=bool(every),
            use_distributed_sampler=get_family(cfg.task.family).distributed_sampler,
        )
    except (ValueError, TypeError, MisconfigurationException) as err:  # a trainer.* value Lightning rejects
        raise ConfigError(f"Lightning rejected the trainer.* settings: {err}") from None


def new_record(cfg: DictConfig, spec, task, run_dir: Path, started: datetime) -> dict:
    return {
        "schema": SCHEMA,
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "status": "failed",
        "task": cfg.task.name,
        "family": cfg.task.family,
        "scale": cfg.scale,
        "seed": cfg.seed,
        "model": {"name": cfg.model.name, "options": OmegaConf.to_container(cfg.model)},
        "norm": {"label": spec.label(), **OmegaConf.to_container(cfg.norm)},
        "dataset": {"name": cfg.choices.data},
        "metrics": {},
        "primary_metric": {"name": task.primary_metric.name, "higher_is_better": task.primary_metric.higher_is_better, "value": None},
        "metric_specs": OmegaConf.to_container(cfg.task.metrics),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "versions": package_versions(),
        "git": git_commit(),
        "hardware": hardware(),
        "started_at": started.isoformat(),
        "finished_at": None,
        "wall_time_s": None,
        "error": None,
    }


def run(
    cfg: DictConfig,
    command: list[str] | None = None,
    callbacks: tuple = (),
    record_extra: dict | None = None,
    before_run_s: float | None = None,
) -> dict:
    """Train + evaluate ``cfg`` (from :func:`mixbench.training.config.compose`); returns the record (written by rank 0).
    ``command``: the command line that asked for it, stored in the record (None from the Python API).
    ``callbacks``: extra Lightning callbacks of this run; one with an ``annotate(record)`` method may amend the record
    after its status is decided (e.g. a search trial stopped by its pruner).  ``record_extra``: fields added to the
    record (e.g. ``{"search": {...}}``).  ``before_run_s``: the seconds its process spent before this call (a
    command-line run: Python, imports, the config), for ``time_parts``."""
    started, t0 = datetime.now(timezone.utc), time.perf_counter()
    spec = norm_spec(cfg)
    task = get_task(cfg.task.name)
    task.load_plugin()
    preflight(cfg)
    run_dir = run_directory(cfg, spec.label())
    try:
        with nullcontext() if is_child_rank() else RunLock(run_dir), interrupts_stop() as interrupt:
            return _run_locked(cfg, command, run_dir, spec, task, started, t0, callbacks, record_extra, interrupt, before_run_s)
    except WeightsError:  # init_from's weights refused: no run took place, and the folder made for it goes again
        if cfg.run_dir is None and not is_child_rank():
            with contextlib.suppress(OSError):
                (run_dir / LOCK_FILE).unlink(missing_ok=True)
                run_dir.rmdir()  # only if nothing else is in it
        raise
    except Exception as err:  # a full disk met outside the run's own writes (e.g. the lock's holder file)
        full = disk_full_under(err, run_dir)
        if full is None or full is err:
            raise
        raise full from None


RESUMABLE_STOPS = (Preempted, DiskFull)  # a run stopped before its end, to be continued with resume=auto


def report_stop(err: Exception) -> int:
    """Log a resumable stop as one line (a preemption or Ctrl-C: a warning; a full disk: an error) and return its exit
    status: :data:`RESUMABLE_EXIT`, or 130 for Ctrl-C (:class:`mixbench.training.preemption.Interrupted`)."""
    log.log(logging.WARNING if isinstance(err, Preempted) else logging.ERROR, "%s", err)
    return err.exit_status if isinstance(err, Preempted) else RESUMABLE_EXIT


def run_and_report(cfg: DictConfig, command: list[str], before_run_s: float | None = None) -> int:
    """``mixbench run``'s body: :func:`run` ``cfg``, log its outcome, return the exit status (0, or
    :data:`RESUMABLE_EXIT` when a signal or a full disk stopped it: :data:`RESUMABLE_STOPS`)."""
    try:
        record = run(cfg, command=command, before_run_s=before_run_s)
    except RESUMABLE_STOPS as err:
        return report_stop(err)
    pm = record["primary_metric"]
    log.info(
        "%s: %s = %s on %s (%s, %.0f s)",
        record["status"],
        pm["name"],
        f"{pm['value']:.4g}" if pm["value"] is not None else "n/a",
        record["dataset"].get("label", record["dataset"]["name"]),
        record["norm"]["label"],
        record["wall_time_s"],
    )
    return 0


def _run_locked(
    cfg: DictConfig,
    command: list[str] | None,
    run_dir: Path,
    spec,
    task,
    started: datetime,
    t0: float,
    callbacks: tuple = (),
    record_extra: dict | None = None,
    interrupt=None,
    before_run_s: float | None = None,
) -> dict:
    """:func:`run` in its run folder, whose lock this process holds; ``interrupt``: the run's Ctrl-C handler
    (:func:`mixbench.training.preemption.interrupts_stop`), told the step a Ctrl-C outside training stops at."""
    logs = run_dir / Path(METRICS_FILE).parent  # Lightning's CSV logger opens its files there, following links
    for path in (run_dir / RECORD_FILE, run_dir / CONFIG_FILE, run_dir / CHECKPOINT_DIR, logs, *logs_entries(logs)):
        refuse_link(path)  # before any training, not when the file is written
    done = finished_record(run_dir) if cfg.resume == "auto" else None
    if done is not None:
        log.info("resume=auto: %s already finished (%s); nothing to do", run_dir, done["status"])
        return done
    relaunches = world_size(cfg.trainer) > 1 and "spawn" not in str(cfg.trainer.strategy)
    if relaunches and cfg.run_dir is None and "run_dir=" not in " ".join(sys.argv):
        sys.argv.append(f"run_dir={run_dir}")  # DDP processes Lightning launches re-run this command: share the folder
    primary = not is_child_rank()
    checkpoint = resume_checkpoint(cfg, run_dir)  # before anything is written: every checkpoint damaged is an error
    fresh, refused = not holds_run(run_dir), False  # refused: init_from's weights do not fit (no record is left)
    if primary:
        atomic_write_text(run_dir / CONFIG_FILE, OmegaConf.to_yaml(cfg))
    record = new_record(cfg, spec, task, run_dir, started)
    record["command"] = command
    record.update(record_extra or {})
    trainer = None
    if interrupt is not None:
        interrupt.step = lambda: trainer.global_step if trainer is not None else None
    reset_peak_gpu_memory()  # this run's own peak (a grid runs its runs one after another in one process)
    try:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule = build_datamodule(cfg)
        record["dataset"] = datamodule.describe()
        options = model_options(cfg, datamodule)
        model, admin_omegas = build_run_model(cfg, spec, datamodule, options)
        if admin_omegas is not None:
            record["norm"]["admin_omegas"] = admin_omegas  # Admin's profiled init, one ω per sub-layer
        description = describe_model(cfg.task.family, cfg.model.name, options, model)
        if cfg.init_from is not None:
            record["init_from"] = init_from(model, cfg.init_from, description)
        record["norm"]["plan"] = list(model.plan)
        record["model"]["num_params"] = sum(p.numel() for p in model.parameters())
        record["model"]["label"] = model_label(cfg.model.name, options)
        log.info(
            "%s | %s | %s: plan %s, %.2fM parameters",
            cfg.task.name,
            cfg.model.name,
            spec.label(),
            plan_summary(model.plan),
            record["model"]["num_params"] / 1e6,
        )
        monitor_options = {k: v for k, v in cfg.divergence.items() if k not in ("unigram_floor", "stall_nats")}
        divergence, throughput, history = DivergenceMonitor(**monitor_options), throughput_monitor(cfg, model), ValidationHistory()
        clock = RunClock(t0)
        extra = [GradNormMonitor(cfg.grad_norm_every_n_steps)] if cfg.grad_norm_every_n_steps else []
        if (fp8 := apply_fp8(cfg, model)) is not None:
            record["fp8"] = fp8
        if checkpoint_activations(cfg, model):
            record["activation_checkpointing"] = True
        if (compiled := compile_model(cfg, model)) is not None:
            record["compile"] = compiled
        module = build_lightning_module(cfg, model, datamodule)
        capture, obstacle = wants_capture(cfg)
        if capture and (obstacle := module_obstacle(module, datamodule)) is not None:
            capture = False
        if not capture and cfg.cuda_graph_step == "auto" and runs_on_cuda(cfg.trainer.accelerator):
            log.info("cuda_graph_step: the training step runs uncaptured (%s)", obstacle)
        module.capture_step = capture
        record.update(getattr(module, "record_extra", {}))  # e.g. the reward model a ReMax run optimises
        markers = [CudaGraphStepMarker()] if uses_cudagraphs(cfg) else []
        trainer = build_trainer(
            cfg,
            run_dir,
            [divergence, throughput, history, clock, *extra, *markers, *callbacks],
            block_class=type(model.blocks[0]),
            resume=checkpoint,
        )
        trainer.fit(module, datamodule=datamodule, ckpt_path=checkpoint, weights_only=True)  # AtomicCheckpointIO: + allowlist
        fit_validation = dict(divergence.last_finite_val)  # the last validation inside fit, with its step
        stop_profiling(trainer)  # the report covers fit; the evaluation below is not profiled
        final_t0 = time.perf_counter()
        if (reused := reusable_fit_validation(cfg, history.validations, trainer.global_step)) is not None:
            metrics = reused
            record["final_validation"] = {"reused_fit_validation_at_step": trainer.global_step}
        else:
            metrics = trainer.validate(module, datamodule=datamodule, verbose=False)[0]
        final_validation_s = time.perf_counter() - final_t0
        if trainer.received_sigterm:  # noted by Lightning's handler, which stops only between validation batches
            raise Preempted("SIGTERM", trainer.global_step, None, False)
        record["metrics"] = {k: float(v) for k, v in metrics.items()}
        record["dataset"] = datamodule.describe()  # again: e.g. images skipped while training
        record["fit_last_validation"] = fit_validation
        check_final_validation(record, fit_validation, task.primary_metric.name, trainer.global_step)
        record["steps"] = trainer.global_step
        record["effective"] = {
            "world_size": trainer.world_size,
            "accumulate_grad_batches": trainer.accumulate_grad_batches,
            "precision": str(trainer.precision),
            "micro_batch_size": cfg.data.batch_size,
            "lr": getattr(module, "effective_lr", None),
            "global_batch_size": cfg.data.batch_size * trainer.world_size * trainer.accumulate_grad_batches,
        }
        record["throughput"] = throughput.summary
        record["cuda_graph_step"] = module.step_graph_status or {"captured": False, "reason": obstacle}
        value = record["metrics"].get(task.primary_metric.name)
        record["primary_metric"]["value"] = value
        record["budget"] = {
            "max_steps": cfg.trainer.max_steps,
            "max_epochs": cfg.trainer.max_epochs,
            "steps": trainer.global_step,
            "total_steps": int(trainer.estimated_stepping_batches),
            "epochs": trainer.current_epoch,
            "stopped_early": bool(trainer.should_stop),
        }
        record["validations"] = history.validations  # inside fit, at their budget fractions (the final one is "metrics")
        family = get_family(cfg.task.family)
        floor = family.learning_floor(datamodule) if cfg.divergence.unigram_floor else None
        if floor:
            record["learning_floor"] = floor
        problem = family.learning_check(record["metrics"], floor) if floor else None
        record["train_loss_history"] = divergence.history
        status, reason = classify(
            divergence.reason if divergence.diverged_at_step is not None else None,
            value,
            problem,
            divergence.history,
            cfg.divergence.stall_nats,
        )
        record["status"] = status
        if status in ("diverged", "stalled"):
            record["divergence"] = {
                "step": divergence.diverged_at_step,
                "reason": reason,
                "last_finite_validation": divergence.last_finite_val,
            }
        elif reason:
            log.warning("%s", reason)
            record.setdefault("warnings", []).append(reason)
        for callback in callbacks:
            if hasattr(callback, "annotate"):
                callback.annotate(record)
        if cfg.save_weights and primary:
            record["weights"] = str(save_weights(model, run_dir, description).name)
        for monitor in extra:
            if primary:
                monitor.save(run_dir / "gradnorm.json")
        record["time_parts"] = clock.parts(trainer.global_step, final_validation_s, time.perf_counter() - t0, before_run_s)
    except BaseException as err:
        refused = isinstance(err, WeightsError) and trainer is None
        stop = resumable_stop(err, run_dir, trainer.global_step if trainer is not None else 0)
        # also after its status was decided (e.g. its weights found no space): not finished; Ctrl-C: interrupted
        record["status"] = (stop or err).status if isinstance(stop or err, Preempted) else "failed"
        record["error"] = f"{type(stop or err).__name__}: {stop or err}"
        record.update(preemption_note(stop or err))
        if stop is not None and stop is not err:
            raise stop from None
        raise
    finally:
        record["finished_at"] = datetime.now(timezone.utc).isoformat()
        record["wall_time_s"] = round(time.perf_counter() - t0, 2)
        if (peak := peak_gpu_memory()) is not None:  # also of a run that failed (out of memory: how far it got)
            record["peak_gpu_memory"] = peak
        if primary and refused and fresh:
            (run_dir / CONFIG_FILE).unlink(missing_ok=True)  # the config this attempt wrote: the folder as it was
        elif primary and not refused:
            save_record(record, run_dir)
    return record


def logs_entries(folder: Path) -> list[Path]:
    """The files of the logger's folder (none if it is not a folder)."""
    return list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []


def resumable_stop(err: BaseException, run_dir: Path, step: int) -> Exception | None:
    """The :data:`RESUMABLE_STOPS` error that ``err`` amounts to: :class:`Preempted` for Lightning's own SIGTERM stop
    (a signal outside a training step, e.g. in the final validation), :class:`DiskFull` for a write that found no
    space; None for any other error."""
    if isinstance(err, SIGTERMException):
        return Preempted("SIGTERM", step, None, False)
    return disk_full_under(err, run_dir)


def save_record(record: dict, run_dir: Path) -> None:
    """Write the run's ``record.json``.  A failing run (``record["error"]`` set) that finds no space for it leaves
    the folder as it was — an earlier record intact, the run unfinished for ``resume=auto`` — and its own error, not
    this one, ends the run (a full disk: already the one line that says so)."""
    try:
        write_record(record, run_dir / RECORD_FILE)
    except DiskFull as full:
        if record["error"] is None:
            raise
        if not record["error"].startswith(DiskFull.__name__):
            log.warning("the record of this failed run was not written: %s", full)
        return
    log.info("record written to %s", run_dir / RECORD_FILE)


def reusable_fit_validation(cfg: DictConfig, validations: list[dict], step: int) -> dict | None:
    """With ``final_validation=reuse_fit``, the metrics of the validation inside fit at ``step`` (the run's last): the
    same weights a final ``trainer.validate`` would evaluate, one full pass over the validation set less.  None (the
    final validation runs) where the setting is ``always`` or fit's last validation was at another step (a run stopped
    early, a ``val_check_interval`` that does not divide the steps)."""
    if cfg.get("final_validation", "always") != "reuse_fit" or not validations or validations[-1]["step"] != step:
        return None
    return dict(validations[-1]["metrics"]) or None


def check_final_validation(record: dict, fit_validation: dict, metric: str, step: int, rel_tol: float = 0.005) -> None:
    """The final ``validate`` and a validation inside ``fit`` at the same step evaluate the same weights; when
    they disagree by more than ``rel_tol`` (relative), say so in the log and in ``record["warnings"]``."""
    before, after = fit_validation.get(metric), record["metrics"].get(metric)
    if fit_validation.get("step") != step or before is None or after is None:
        return
    if abs(after - before) > rel_tol * max(abs(before), 1e-12):
        message = (
            f"final validation {metric}={after:.4g} differs from the validation inside fit at the same step "
            f"({before:.4g}); the record keeps the final one"
        )
        log.warning(message)
        record.setdefault("warnings", []).append(message)


# model options that pick a kernel, not the function computed: left out of the model's label (a table still gives runs
# of one norm that differ in them columns of their own: mixbench.results.records.annotate_recipes)
KERNEL_ONLY_OPTIONS = ("attention_backend",)


def model_label(name: str, options: dict) -> str:
    """``llama_71m[num_layers=24]``: the preset name plus every architecture option changed from it (kernel choices,
    :data:`KERNEL_ONLY_OPTIONS`, left out)."""

    changed = {k: v for k, v in options.items() if model_defaults(name).get(k) != v and k not in KERNEL_ONLY_OPTIONS}
    return name + ("[" + ",".join(f"{k}={v}" for k, v in sorted(changed.items())) + "]" if changed else "")
