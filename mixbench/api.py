"""The Python API for notebooks — the same steps as the command line.

Example::

    import mixbench
    cfg = mixbench.compose(task="vit_tiny", norm="mix", **{"norm.alpha": 0.5, "trainer.max_epochs": 1})
    record = mixbench.run(cfg)                       # trains, evaluates, writes and returns the result record
    df = mixbench.load_records("results")            # one row per run, numeric metric columns (what `mixbench table` reads)
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)


def compose(args: list[str] | None = None, /, *, project: str | Path | None = None, **settings) -> DictConfig:
    """The resolved config of ``mixbench run``: ``compose(["task=vit_tiny", "norm=mix"])`` or, equivalently,
    ``compose(task="vit_tiny", norm="mix", **{"norm.alpha": 0.5})`` (keyword values are written as on the command
    line: strings are parsed as YAML, other values formatted as YAML)."""
    from omegaconf import OmegaConf

    from .training.config import compose as compose_args  # compose/run/load_records import their stack on first use

    def as_text(value) -> str:
        return value if isinstance(value, str) else OmegaConf.to_yaml(OmegaConf.create({"v": value})).strip()[3:]

    arguments = list(args or []) + [f"{key}={as_text(value)}" for key, value in settings.items()]
    return compose_args(arguments, root=project)


def run(cfg: DictConfig) -> dict:
    """Train and evaluate one composed config; returns its result record (also written to its run folder)."""
    from .training.run import run as run_config

    return run_config(cfg)


def load_records(results_dir: str | Path = "results"):
    """Every result record under ``results_dir`` as a pandas DataFrame, one row per run (unreadable records are
    logged and skipped, as ``mixbench table`` does)."""
    from .results.frames import load_records_frame

    frame, problems = load_records_frame(results_dir)
    for problem in problems:
        log.warning("skipped unreadable record: %s", problem)
    return frame
