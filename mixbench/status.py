"""What a finished run's status means, decided in one place (also for re-classifying older records).

* ``diverged``: the loss became NaN/inf or blew up (:class:`mixbench.callbacks.DivergenceMonitor`), or the final
  metric is not finite;
* ``stalled``: the model family's learning check failed (e.g. an LM's final validation loss is not below the
  unigram entropy of the validation tokens: it never learned beyond token frequencies) **and** the training loss
  stopped improving — the smoothed loss of the last quarter of the run is less than ``min_gain`` nats below that of
  the quarter before;
* ``completed``: everything else — including a run that ended above that floor while still improving (its budget
  simply ended early; the record keeps a warning and its budget).
"""
from __future__ import annotations

import math
import statistics


def loss_gain(history: list[tuple[float, float]]) -> float | None:
    """Mean training loss of the second-to-last quarter minus that of the last quarter of ``history`` ([step, loss]
    pairs in step order); None with fewer than 8 finite points (too short to judge)."""
    losses = [loss for _, loss in history if math.isfinite(loss)]
    if len(losses) < 8:
        return None
    quarter = len(losses) // 4
    return statistics.fmean(losses[-2 * quarter : -quarter]) - statistics.fmean(losses[-quarter:])


def classify(diverged_reason: str | None, final_value: float | None, learning_problem: str | None,
             history: list[tuple[float, float]], min_gain: float = 0.01) -> tuple[str, str | None]:
    """``(status, reason)`` of a finished run; see the module docstring."""
    if diverged_reason is not None:
        return "diverged", diverged_reason
    if final_value is None or not math.isfinite(final_value):
        return "diverged", "non-finite final metric"
    if learning_problem is None:
        return "completed", None
    gain = loss_gain(history)
    if gain is not None and gain < min_gain:
        return "stalled", f"{learning_problem}; the training loss stopped improving ({gain:+.4f} nats over the last quarter)"
    still = "too short to judge its progress" if gain is None else f"still improving ({gain:+.4f} nats over the last quarter)"
    return "completed", f"ended early: {learning_problem}, {still}"
