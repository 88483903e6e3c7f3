"""``mixbench run``: train and evaluate one configuration and write its result record."""
from __future__ import annotations

import logging
import math
import re
import secrets
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, norm_spec
from .data import get_datamodule_class
from .lit import CausalLMModule, ImageClassifierModule, OptimConfig
from .models import build_model
from .provenance import git_commit, hardware, package_versions
from .results import SCHEMA, write_record
from .tasks import get_task

log = logging.getLogger(__name__)


def run_directory(cfg: DictConfig, label: str) -> Path:
    """A new folder ``<results_dir>/runs/<task>/<model>/<norm>/seed<k>-<utc time>-<random>``; never reused."""
    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label.replace("α", "alpha")).strip("_")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = Path(cfg.results_dir) / "runs" / cfg.task.name / cfg.model.name / slug / f"seed{cfg.seed}-{stamp}-{secrets.token_hex(2)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    options = OmegaConf.to_container(cfg.data, resolve=True)
    return get_datamodule_class(options.pop("loader"))(**options)


def check_data_fits_model(cfg: DictConfig, datamodule) -> None:
    if cfg.task.family == "lm" and datamodule.vocab_size > cfg.model.vocab_size:
        raise ConfigError(f"the tokenizer has {datamodule.vocab_size} tokens but model.vocab_size={cfg.model.vocab_size}; "
                          f"set model.vocab_size={datamodule.vocab_size} (or larger)")
    if cfg.task.family == "vision" and datamodule.num_classes != cfg.model.num_classes:
        raise ConfigError(f"the dataset has {datamodule.num_classes} classes but model.num_classes={cfg.model.num_classes}; "
                          f"set model.num_classes={datamodule.num_classes}")


def build_lightning_module(cfg: DictConfig, model, datamodule) -> L.LightningModule:
    optim = OptimConfig(**OmegaConf.to_container(cfg.optim, resolve=True))
    if cfg.task.family == "lm":
        return CausalLMModule(model, optim)
    return ImageClassifierModule(model, optim, num_classes=datamodule.num_classes, label_smoothing=cfg.loss.label_smoothing)


def build_trainer(cfg: DictConfig, run_dir: Path) -> L.Trainer:
    from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar, TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    if kwargs.get("precision") is None:
        kwargs["precision"] = "bf16-mixed" if torch.cuda.is_available() and kwargs.get("accelerator") in ("auto", "gpu", "cuda") else "32-true"
    callbacks = [LearningRateMonitor(logging_interval="step")]
    if kwargs.get("enable_progress_bar", True):
        callbacks.append(RichProgressBar() if sys.stdout.isatty() else TQDMProgressBar(refresh_rate=5))
    return L.Trainer(
        **kwargs,
        default_root_dir=str(run_dir),
        logger=CSVLogger(str(run_dir), name="", version="logs"),
        callbacks=callbacks,
        enable_checkpointing=False,
    )


def run(cfg: DictConfig) -> dict:
    """Train + evaluate ``cfg`` (from :func:`mixbench.config.compose`); returns the written record."""
    started, t0 = datetime.now(timezone.utc), time.perf_counter()
    spec = norm_spec(cfg)
    task = get_task(cfg.task.name)
    task.load_plugin()
    run_dir = run_directory(cfg, spec.label())
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    record = {
        "schema": SCHEMA, "run_id": run_dir.name, "run_dir": str(run_dir), "status": "failed",
        "task": cfg.task.name, "family": cfg.task.family, "scale": cfg.scale, "seed": cfg.seed,
        "model": {"name": cfg.model.name, "options": OmegaConf.to_container(cfg.model)},
        "norm": {"label": spec.label(), **OmegaConf.to_container(cfg.norm)},
        "dataset": {"name": cfg.choices.data}, "metrics": {},
        "primary_metric": {"name": task.primary_metric.name, "higher_is_better": task.primary_metric.higher_is_better, "value": None},
        "metric_specs": OmegaConf.to_container(cfg.task.metrics),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "versions": package_versions(), "git": git_commit(), "hardware": hardware(),
        "started_at": started.isoformat(), "finished_at": None, "wall_time_s": None, "error": None,
    }
    try:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule = build_datamodule(cfg)
        datamodule.setup("fit")
        record["dataset"] = datamodule.describe()
        check_data_fits_model(cfg, datamodule)
        options = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "name"}
        model = build_model(cfg.model.name, spec, seed=cfg.seed, **options)
        record["norm"]["plan"] = list(model.plan)
        record["model"]["num_params"] = sum(p.numel() for p in model.parameters())
        log.info("%s | %s | %s: plan %s, %.2fM parameters", cfg.task.name, cfg.model.name, spec.label(),
                 _plan_summary(model.plan), record["model"]["num_params"] / 1e6)
        if cfg.compile:
            model.compile()
        module = build_lightning_module(cfg, model, datamodule)
        trainer = build_trainer(cfg, run_dir)
        trainer.fit(module, datamodule=datamodule)
        metrics = trainer.validate(module, datamodule=datamodule, verbose=False)[0]
        record["metrics"] = {k: float(v) for k, v in metrics.items()}
        record["steps"] = trainer.global_step
        value = record["metrics"].get(task.primary_metric.name)
        record["primary_metric"]["value"] = value
        record["status"] = "completed" if value is not None and math.isfinite(value) else "diverged"
        if cfg.save_weights:
            torch.save(model.state_dict(), run_dir / "model.pt")
    except BaseException as err:
        record["error"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        record["finished_at"] = datetime.now(timezone.utc).isoformat()
        record["wall_time_s"] = round(time.perf_counter() - t0, 2)
        write_record(record, run_dir / "record.json")
        log.info("record written to %s", run_dir / "record.json")
    return record


def _plan_summary(plan: list[str]) -> str:
    """['post','post','pre','pre','pre'] → 'post×2 pre×3'."""
    parts, prev, count = [], None, 0
    for p in [*plan, None]:
        if p == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(f"{prev}×{count}")
        prev, count = p, 1
    return " ".join(parts)
