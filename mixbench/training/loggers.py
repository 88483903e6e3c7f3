"""Experiment loggers: Lightning's own, chosen with ``logger=csv,tensorboard,wandb,mlflow``.

The CSV logger (``<run>/logs/metrics.csv``) is always on: result records and ``mixbench plot curves`` read it.
The others write into the run folder by default and work without a network: TensorBoard event files in
``<run>/tensorboard``, Weights & Biases in offline mode (``logger_options.wandb.offline=true``, files in
``<run>/wandb``; ``wandb sync`` uploads them later), MLflow to a local file store ``<run>/mlruns`` unless
``logger_options.mlflow.tracking_uri`` names a server.  ``logger_options.<name>`` passes keyword arguments to the
Lightning logger class.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..core.errors import ConfigError

LOGGERS = {  # name → (Lightning logger class, the package it needs)
    "csv": ("CSVLogger", None),
    "tensorboard": ("TensorBoardLogger", "tensorboard"),
    "wandb": ("WandbLogger", "wandb"),
    "mlflow": ("MLFlowLogger", "mlflow"),
}


def logger_names(setting) -> list[str]:
    """``'csv,tensorboard'`` or ``['csv', 'tensorboard']`` → the validated names, ``csv`` always first."""
    names = [n.strip() for n in setting.split(",")] if isinstance(setting, str) else [str(n) for n in (setting or [])]
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(f"unknown logger(s) {unknown}; valid: {', '.join(LOGGERS)} (e.g. logger=csv,tensorboard)")
    return ["csv", *dict.fromkeys(n for n in names if n != "csv")]


def check_installed(names: list[str]) -> None:
    missing = [LOGGERS[n][1] for n in names if LOGGERS[n][1] and importlib.util.find_spec(LOGGERS[n][1]) is None]
    if missing:
        raise ConfigError(f"logger needs {', '.join(missing)}: pip install {' '.join(missing)} (or pip install -e '.[loggers]')")


def build_loggers(setting, options: dict, run_dir: Path, run_name: str) -> list:
    """The Lightning loggers of a run, each writing into ``run_dir`` unless its options say otherwise."""
    from lightning.pytorch import loggers

    names = logger_names(setting)
    check_installed(names)
    defaults = {
        "csv": dict(save_dir=str(run_dir), name="", version="logs"),
        "tensorboard": dict(save_dir=str(run_dir), name="", version="tensorboard", default_hp_metric=False),
        "wandb": dict(save_dir=str(run_dir), name=run_name, project="mixbench", offline=True),
        "mlflow": dict(experiment_name="mixbench", run_name=run_name, tracking_uri=(run_dir / "mlruns").resolve().as_uri()),
    }
    built = []
    for name in names:
        kwargs = {**defaults[name], **{k: v for k, v in (options.get(name) or {}).items() if v is not None}}
        try:
            built.append(getattr(loggers, LOGGERS[name][0])(**kwargs))
        except TypeError as err:
            raise ConfigError(f"logger_options.{name}: {err}") from None
    return built
