"""Lightning callbacks: divergence detection, the validation history, search-trial pruning, throughput / MFU logging,
where a run's wall time goes (:class:`RunClock`), and the silencing of Lightning's "dataloader is not resumable"
warning where the resume is exact."""

from __future__ import annotations

import math
import re
import statistics
import time
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from ..data.samplers import resumes_exactly
from ..results.table import BUDGET_TOLERANCE  # a validation this close to the end counts as the full budget (table --at)

# dense bf16 tensor-core peaks (FLOP/s) by GPU name substring; H200 has the H100's tensor cores
PEAK_BF16_FLOPS = (("H200", 989e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12), ("A10G", 70e12), ("4090", 165e12))


def peak_flops(device_name: str) -> float | None:
    return next((flops for key, flops in PEAK_BF16_FLOPS if key in device_name), None)


class DivergenceMonitor(Callback):
    """Stops training when the loss is NaN/inf or blows up, and records where.

    Every ``check_every_n_steps`` optimizer steps the mean training loss of the window is compared
    with the best smoothed (EMA) loss so far: a non-finite mean, or ``patience`` consecutive windows
    more than ``blowup_nats`` above the best, mark the run diverged (``self.diverged_at_step``).
    The decision is taken jointly by all ranks.  Losses are accumulated on the device, so checking
    costs one host sync per window.
    """

    def __init__(self, blowup_nats: float = 1.5, check_every_n_steps: int = 10, patience: int = 3, ema: float = 0.9):
        self.blowup_nats, self.every, self.patience, self.ema_decay = blowup_nats, check_every_n_steps, patience, ema
        self.diverged_at_step: int | None = None
        self.reason: str | None = None
        self.last_finite_val: dict = {}
        self.history: list[list[float]] = []  # [step, mean training loss of the window] at every check
        self._sum = self._count = None
        self._ema, self._best, self._strikes, self._last_check = None, math.inf, 0, 0

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        loss = loss.detach().float() * trainer.accumulate_grad_batches  # Lightning hands hooks loss / accumulation steps
        self._sum = loss if self._sum is None else self._sum + loss
        self._count = 1 if self._count is None else self._count + 1
        if trainer.global_step - self._last_check < self.every:
            return
        self._last_check = trainer.global_step
        mean = (self._sum / self._count).item()
        self._sum = self._count = None
        reason = None
        self.history.append([trainer.global_step, mean])
        if not math.isfinite(mean):
            reason = f"non-finite training loss ({mean})"
        else:
            self._ema = mean if self._ema is None else self.ema_decay * self._ema + (1 - self.ema_decay) * mean
            self._best = min(self._best, self._ema)
            self._strikes = self._strikes + 1 if mean > self._best + self.blowup_nats else 0
            if self._strikes >= self.patience:
                reason = f"training loss {mean:.3f} stayed > {self.blowup_nats} nats above its best ({self._best:.3f})"
        if trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
            self.diverged_at_step = trainer.global_step
            self.reason = reason or "diverged on another rank"
            trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        if metrics and all(math.isfinite(v) for v in metrics.values()):
            self.last_finite_val = {"step": trainer.global_step, **metrics}

    _STATE = ("history", "last_finite_val", "_ema", "_best", "_strikes", "_last_check")

    def state_dict(self) -> dict:  # saved in checkpoints, so a resumed run judges the whole run
        return {key: getattr(self, key) for key in self._STATE}

    def load_state_dict(self, state_dict: dict) -> None:
        for key in self._STATE:
            if key in state_dict:
                setattr(self, key, state_dict[key])


class ValidationHistory(Callback):
    """Keeps every validation inside ``fit``: ``[{"step", "fraction", "metrics"}]``, ``fraction`` = step / the
    run's total optimizer steps (``trainer.estimated_stepping_batches``), so ``mixbench table --at 0.25,0.5,1.0``
    can show a placement's metric at 25 / 50 / 100 % of its budget.  Saved in checkpoints (a resumed run keeps its
    history)."""

    def __init__(self):
        self.validations: list[dict] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":  # the final trainer.validate is the run's own metrics
            return
        total = trainer.estimated_stepping_batches
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val")}
        step = trainer.global_step
        fraction = round(step / total, 4) if total and math.isfinite(total) else None
        self.validations = [v for v in self.validations if v["step"] != step]  # a resumed run may validate a step again
        self.validations.append({"step": step, "fraction": fraction, "metrics": metrics})

    def state_dict(self) -> dict:
        return {"validations": self.validations}

    def load_state_dict(self, state_dict: dict) -> None:
        self.validations = list(state_dict.get("validations", []))


class TrialPruning(Callback):
    """A search trial's multi-fidelity hook (``mixbench search``): reports the primary ``metric`` of every validation
    inside ``fit`` to the Optuna ``trial`` (step = optimizer step) and stops training where its pruner says so — never
    at the full budget (within ``BUDGET_TOLERANCE`` of it).  :meth:`annotate` then records the run as ``pruned`` at
    that step (a run that diverged first stays diverged).  Unlike optuna-integration's callback it does not raise
    inside ``fit`` (``run`` would record a crash), so the run ends normally and writes an ordinary record."""

    def __init__(self, trial, metric: str):
        self.trial, self.metric = trial, metric
        self.pruned_at_step: int | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or self.pruned_at_step is not None:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None or not math.isfinite(float(value)):
            return
        step = trainer.global_step
        self.trial.report(float(value), step)

        if step < (1 - BUDGET_TOLERANCE) * trainer.estimated_stepping_batches and self.trial.should_prune():
            self.pruned_at_step = step
            trainer.should_stop = True

    def annotate(self, record: dict) -> None:
        record.setdefault("search", {})["pruned_at_step"] = self.pruned_at_step
        if self.pruned_at_step is not None and record["status"] == "completed":
            record["status"] = "pruned"


class ThroughputMonitor(Callback):
    """Logs ``perf/items_per_sec`` (tokens or images, all ranks), ``perf/flops_per_sec`` and ``perf/mfu``
    at every multiple of ``every_n_steps`` optimizer steps; ``items_fn(batch)`` counts a micro-batch's items and
    ``flops_per_item`` is the training FLOPs (forward + backward) of one item.

    ``summary["epochs"]``: per training epoch its steps, items (this rank × world size), seconds and items/s, the
    seconds counted from the end of the previous epoch (so an epoch-start stall counts) without validation time."""

    def __init__(self, items_fn, flops_per_item: float | None, every_n_steps: int = 50):
        self.items_fn, self.flops_per_item, self.every = items_fn, flops_per_item, every_n_steps
        self.items, self.t0, self.last_step = 0, None, 0
        self.summary: dict = {}
        self.epochs: list[dict] = []
        self._epoch_t0 = self._epoch_items = self._epoch_steps = self._val_t0 = None
        self._val_s = 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        name = torch.cuda.get_device_name() if trainer.strategy.root_device.type == "cuda" else "cpu"
        self.peak = peak_flops(name)
        self.device_name = name
        self._epoch_t0, self._epoch_items, self._epoch_steps = time.perf_counter(), 0, 0

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._epoch_t0 is None:
            return
        _sync(trainer)
        now = time.perf_counter()
        seconds = now - self._epoch_t0 - self._val_s
        items = self._epoch_items * trainer.world_size
        self.epochs.append(
            {
                "epoch": trainer.current_epoch,
                "steps": self._epoch_steps,
                "items": items,
                "seconds": seconds,
                "items_per_sec": items / seconds if seconds > 0 else None,
            }
        )
        self.summary["epochs"] = self.epochs
        self._epoch_t0, self._epoch_items, self._epoch_steps, self._val_s = now, 0, 0, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._epoch_t0 is not None:
            self._epoch_items += self.items_fn(batch)
            self._epoch_steps += 1
        if self.t0 is None:  # start timing after the first (compiling) step
            _sync(trainer)
            self.t0, self.last_step = time.perf_counter(), trainer.global_step
            return
        self.items += self.items_fn(batch)
        # windows end at multiples of every_n_steps, the steps where DivergenceMonitor (and the preemption agreement)
        # already wait for the device: one host wait there instead of a second one a step later
        if trainer.global_step % self.every or trainer.global_step == self.last_step:
            return
        _sync(trainer)
        elapsed = time.perf_counter() - self.t0
        per_sec = self.items * trainer.world_size / elapsed
        metrics = {"perf/items_per_sec": per_sec}
        if self.flops_per_item:
            metrics["perf/flops_per_sec"] = per_sec * self.flops_per_item
            if self.peak:
                metrics["perf/mfu"] = per_sec * self.flops_per_item / (self.peak * trainer.world_size)
        pl_module.log_dict(metrics, rank_zero_only=True)
        self.summary = {**metrics, "device": self.device_name, "world_size": trainer.world_size, "epochs": self.epochs}
        self.items, self.t0, self.last_step = 0, time.perf_counter(), trainer.global_step

    def on_validation_start(self, trainer, pl_module) -> None:  # exclude evaluation: restart the window
        self.t0, self.items = None, 0
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._val_t0 is not None and trainer.state.fn == "fit":
            _sync(trainer)
            self._val_s += time.perf_counter() - self._val_t0
        self._val_t0 = None


class RunClock(Callback):
    """Where a run's wall time goes, for its record (``time_parts``) and ``bench/speed/run_overhead.py``.

    Counted from ``t0`` (the run's start, ``time.perf_counter``): ``before_fit_s`` (data, model build, trainer) up to
    ``on_fit_start``; ``setup_s`` from there to the first training batch (Lightning's setup, sanity checks, loaders);
    ``first_steps_s``, the first :data:`WINDOW` training batches (compilation and the step's capture happen here; the
    whole loop in a shorter run); ``validations_s``, each validation inside fit; ``later_steps_s``, the rest of the
    training loop outside validations, to ``on_train_end``; ``steady_step_s``, the median over the later windows of
    :data:`WINDOW` batches that hold no validation, per batch (an optimizer step without gradient accumulation; a window
    starts after the first batches and again after each validation, and ends when the device has finished its
    batches); ``steady_s`` = steady step × the batches this process ran (``batches``: fewer than ``steps`` in a
    resumed run), what they would take at the steady rate with nothing else; ``step_excess_s`` = later steps − steady
    step × their count (waits on data, the first batches after a validation).  The caller adds the final validation,
    the wall time and, for a command-line run, ``before_run_s`` (the process's start to ``t0``: Python, imports, the
    config); ``after_fit_s`` is the rest (Lightning's teardown — the model and optimizer state moved to the CPU — and
    the record).  So wall = before fit + setup + first steps + validations + later steps + final validation + after
    fit (:meth:`parts`), when no validation falls inside the first batches."""

    WINDOW = 10

    def __init__(self, t0: float):
        self.t0 = t0
        self.fit_start = self.train_start = self.first_steps_end = self.train_end = None
        self.batches = 0  # training batches this process ran
        self.validations: list[float] = []
        self.later_validations_s = 0.0  # the validations after the first batches (inside later_steps_s's span)
        self.windows: list[float] = []  # seconds per batch of each full window without a validation
        self._window_t0, self._window_steps, self._val_t0 = None, 0, None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.fit_start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.train_start is None:
            self.train_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.batches += 1
        self._window_steps += 1
        if self._window_steps < self.WINDOW:
            return
        _sync(trainer)  # the window ends when the device has done its batches, not when the host queued them
        now = time.perf_counter()
        if self.first_steps_end is None:
            self.first_steps_end = now
        else:  # a validation inside the window restarted it (on_validation_end): this one holds none
            self.windows.append((now - self._window_t0) / self.WINDOW)
        self._start_window(now)

    def _start_window(self, now: float) -> None:
        self._window_t0, self._window_steps = now, 0

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        _sync(trainer)
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._val_t0 is not None and trainer.state.fn == "fit":
            _sync(trainer)
            now = time.perf_counter()
            self.validations.append(now - self._val_t0)
            if self.first_steps_end is not None:
                self.later_validations_s += now - self._val_t0
                self._start_window(now)  # the next WINDOW batches make a clean window
        self._val_t0 = None

    def on_train_end(self, trainer, pl_module) -> None:  # before Lightning's teardown (on_fit_end comes after it)
        _sync(trainer)
        self.train_end = time.perf_counter()

    def parts(self, steps: int, final_validation_s: float | None, wall_s: float, before_run_s: float | None = None) -> dict:
        """The record's ``time_parts``: the pieces above, the final validation, the run's ``steps`` (its optimizer steps,
        ``trainer.global_step``) and ``batches``, its wall time, and the run against its steady time (``wall_over_steady``)."""
        steady = statistics.median(self.windows) if self.windows else None
        first_end = self.first_steps_end or self.train_end  # a run of fewer than WINDOW batches: its whole loop
        first_steps = first_end - self.train_start if first_end and self.train_start else None
        later = self.train_end - self.first_steps_end - self.later_validations_s if self.train_end and self.first_steps_end else None
        train_end_s = self.train_end - self.t0 if self.train_end else None
        out = {
            "before_run_s": _round(before_run_s),
            "before_fit_s": _round(self.fit_start - self.t0 if self.fit_start else None),
            "setup_s": _round(self.train_start - self.fit_start if self.train_start and self.fit_start else None),
            "first_steps": min(self.WINDOW, self.batches),
            "first_steps_s": _round(first_steps),
            "validations_s": [_round(v) for v in self.validations],
            "later_steps_s": _round(later if later is not None else (0.0 if first_steps is not None else None)),
            "final_validation_s": _round(final_validation_s),
            "after_fit_s": _round(wall_s - train_end_s - (final_validation_s or 0.0) if train_end_s is not None else None),
            "steady_step_s": _round(steady, 5),
            "steps": steps,
            "batches": self.batches,
            "steady_s": _round(steady * self.batches if steady else None),
            "wall_s": _round(wall_s),
        }
        if steady:
            out["first_steps_over_steady_s"] = _round(first_steps - steady * self.WINDOW if first_steps is not None else None)
            out["step_excess_s"] = _round(later - steady * (self.batches - self.WINDOW) if later is not None else None)
            out["wall_over_steady"] = _round(wall_s / (steady * self.batches), 3)
        return out


def _sync(trainer) -> None:
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# the start of the warning Lightning gives on a resume mid-epoch when the training DataLoader has no state_dict
NOT_RESUMABLE = re.escape("You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable")


class ExactResumeNotice(Callback):
    """During training, ignore Lightning's "your dataloader is not resumable" warning when the data module restores its
    position itself (:func:`mixbench.data.samplers.resumes_exactly`): Lightning looks for ``state_dict`` on the
    DataLoader, ours is on the data module, and the resume continues exactly.  Where it does not (DALI's pipeline),
    the warning stays.  The filter is scoped to that message and to the fit."""

    def __init__(self):
        self._scope: warnings.catch_warnings | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        if resumes_exactly(trainer.datamodule):
            self._scope = warnings.catch_warnings()
            self._scope.__enter__()
            warnings.filterwarnings("ignore", message=NOT_RESUMABLE)

    def _leave(self) -> None:
        if self._scope is not None:
            self._scope.__exit__(None, None, None)
            self._scope = None

    def on_train_end(self, trainer, pl_module) -> None:
        self._leave()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._leave()
