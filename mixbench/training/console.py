"""What a run shows while it trains, all of it on stderr (stdout carries only data, e.g. ``--print-config`` or a table):
the progress bar, with the whole run's ETA beside Lightning's per-epoch one, and the model summary, without Lightning's
FLOPs column (it counts 0 for a model it does not trace); Lightning's own deprecation notices about its internals,
which a user cannot act on, are silenced."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings

from lightning.pytorch.callbacks import ModelSummary, RichProgressBar, TQDMProgressBar

log = logging.getLogger(__name__)

# Lightning 2.6 builds torch's deprecated LeafSpec on every batch (lightning/pytorch/utilities/_pytree.py)
LIGHTNING_INTERNAL_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)


def silence_lightning_internals() -> None:
    for message in LIGHTNING_INTERNAL_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def clock(seconds: float) -> str:
    """``h:mm:ss``."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RunETA:
    """A progress bar's items with ``run ETA``: the steps left of the whole run (:attr:`Trainer.estimated_stepping_batches`)
    at the rate of the steps this process has made, validations included; Lightning's ``v_num`` (the logger's
    version, always ``logs``) left out."""

    _since: tuple[float, int] | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._since = (time.monotonic(), trainer.global_step)

    def get_metrics(self, trainer, pl_module) -> dict:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        if self._since is not None:
            started, first = self._since
            done, total = trainer.global_step - first, trainer.estimated_stepping_batches
            if done > 0 and total != float("inf"):
                items["run ETA"] = clock((time.monotonic() - started) / done * max(0, total - trainer.global_step))
        return items


class StderrBar(RunETA, TQDMProgressBar):
    """Lightning's tqdm bar (a log file or pipe), its bars made on stderr."""

    def _on_stderr(self, make):
        with contextlib.redirect_stdout(sys.stderr):  # Lightning's bars take sys.stdout as they are made
            return make()

    def init_sanity_tqdm(self):
        return self._on_stderr(super().init_sanity_tqdm)

    def init_train_tqdm(self):
        return self._on_stderr(super().init_train_tqdm)

    def init_validation_tqdm(self):
        return self._on_stderr(super().init_validation_tqdm)


class StderrRichBar(RunETA, RichProgressBar):
    """Lightning's rich bar (a terminal), on stderr."""

    def __init__(self):
        super().__init__(console_kwargs={"stderr": True})


class LoggedSummary(ModelSummary):
    """Lightning's model summary through the log (stderr), without the FLOPs column and total."""

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, **kwargs) -> None:
        columns = [(name, [str(v) for v in values]) for name, values in summary_data if name != "FLOPs"]
        widths = [max([len(name), *map(len, values)]) for name, values in columns]
        rows = [[name for name, _ in columns], *zip(*(values for _, values in columns))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        trainable, frozen = trainable_parameters, total_parameters - trainable_parameters
        lines.append(f"{trainable:,} trainable and {frozen:,} other parameters, {model_size:.1f} MB")
        log.info("model summary:\n%s", "\n".join(lines))


def console_callbacks(trainer_kwargs: dict) -> list:
    """The progress bar (unless ``enable_progress_bar`` is off) and the model summary (unless ``enable_model_summary``
    is), both on stderr."""
    silence_lightning_internals()
    callbacks = []
    if trainer_kwargs.get("enable_progress_bar", True):
        callbacks.append(StderrRichBar() if sys.stderr.isatty() else StderrBar(refresh_rate=10))
    if trainer_kwargs.get("enable_model_summary", True):
        callbacks.append(LoggedSummary())
    return callbacks
