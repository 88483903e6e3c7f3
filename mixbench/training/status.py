"""What a finished run's status means, decided in one place (also for re-classifying older records).

* ``diverged``: the loss became NaN/inf or blew up (:class:`mixbench.training.callbacks.DivergenceMonitor`), or the final
  metric is not finite;
* ``stalled``: the model family's learning check failed — the run never beat chance: an LM's final validation loss
  is not below the unigram entropy of the validation tokens (it never learned beyond token frequencies), a
  classifier's is within a margin of ln(num_classes) or its top-1 within a margin of chance.  The reason says
  whether the training loss had stopped improving (the mean of the run's last quarter less than ``min_gain`` nats
  below that of the quarter before) or was still falling when the budget ended;
* ``completed``: everything else.

A run that did not finish keeps the status it was recorded with: ``failed`` (a crash; a preemption or a full disk,
with its ``preempted`` entry or error), ``interrupted`` (Ctrl-C: :class:`mixbench.training.preemption.Interrupted`),
``pruned`` (a search trial); ``resume=auto`` continues the first two.
"""

from __future__ import annotations

import math
import statistics

from ..core.errors import MixbenchError, one_line
from ..core.families import get_family
from ..results.curves import read_metrics
from ..results.records import load_records, write_record


def loss_gain(history: list[tuple[float, float]]) -> float | None:
    """Mean training loss of the second-to-last quarter minus that of the last quarter of ``history`` ([step, loss]
    pairs in step order); None with fewer than 8 finite points (too short to judge)."""
    losses = [loss for _, loss in history if math.isfinite(loss)]
    if len(losses) < 8:
        return None
    quarter = len(losses) // 4
    return statistics.fmean(losses[-2 * quarter : -quarter]) - statistics.fmean(losses[-quarter:])


def classify(
    diverged_reason: str | None,
    final_value: float | None,
    learning_problem: str | None,
    history: list[tuple[float, float]],
    min_gain: float = 0.01,
) -> tuple[str, str | None]:
    """``(status, reason)`` of a finished run; see the module docstring."""
    if diverged_reason is not None:
        return "diverged", diverged_reason
    if final_value is None or not math.isfinite(final_value):
        return "diverged", "non-finite final metric"
    if learning_problem is None:
        return "completed", None
    gain = loss_gain(history)
    if gain is None:
        trend = "too short to judge its progress"
    elif gain < min_gain:
        trend = f"the training loss stopped improving ({gain:+.4f} nats over the last quarter)"
    else:
        trend = f"the training loss was still falling when the budget ended ({gain:+.4f} nats over the last quarter)"
    return "stalled", f"{learning_problem}; {trend}"


FINISHED = ("completed", "diverged", "stalled")  # statuses of a run that trained to its end (the others keep theirs)
# how the families' learning checks begin their reasons (a diverged/stalled record with one of these did not blow up)
LEARNING_PROBLEMS = ("never learned beyond token frequencies", "never beat chance")


def history_of(record: dict) -> list[tuple[float, float]]:
    """The run's training-loss history: the record's own, else ``train/loss`` of its ``logs/metrics.csv``."""
    if record.get("train_loss_history"):
        return [tuple(point) for point in record["train_loss_history"]]
    from pathlib import Path

    try:
        return read_metrics(Path(record["run_dir"])).get("train/loss", [])
    except Exception:  # no run folder or log beside the record: judge without a history
        return []


def reclassify(record: dict) -> tuple[str, str | None]:
    """The status of a finished record under the current rules (failed records keep theirs).  The learning check is
    re-run by the record's family on its metrics, against the floor stored in the record (``learning_floor``) or,
    for records written before floors were stored, the one the family derives from the record."""

    if record["status"] not in FINISHED:
        return record["status"], (record.get("divergence") or {}).get("reason")
    reason = (record.get("divergence") or {}).get("reason")
    blew_up = (
        reason
        if record["status"] == "diverged" and reason and not reason.startswith(LEARNING_PROBLEMS) and reason != "non-finite final metric"
        else None
    )
    family = get_family(record.get("family", "lm"))
    floor = record.get("learning_floor") or family.record_floor(record)
    learning_problem = family.learning_check(record["metrics"], floor) if floor else None
    value = record["metrics"].get(record["primary_metric"]["name"])
    return classify(blew_up, value, learning_problem, history_of(record))


def reclassify_records(results_dir, dry_run: bool = False) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Re-derive the status of every readable record under ``results_dir`` (rewritten atomically); returns the changes
    ``(path, old, new)`` and why each unreadable record was left untouched (:func:`load_records`' problems)."""

    changes = []
    records, problems = load_records(results_dir)
    for record in records:
        path = record.pop("_path")
        try:
            status, reason = reclassify(record)
        except (MixbenchError, LookupError, TypeError, ValueError) as err:  # e.g. a family no task registers here
            problems.append(f"{path}: cannot be re-classified here ({one_line(err)})")
            continue
        if status == record["status"]:
            continue
        changes.append((path, record["status"], status))
        if dry_run:
            continue
        record.setdefault("reclassified", []).append({"from": record["status"], "to": status, "reason": reason})
        record["status"] = status
        if status in ("diverged", "stalled"):
            record["divergence"] = {**(record.get("divergence") or {}), "reason": reason}
        else:
            record.pop("divergence", None)
            if reason:
                record.setdefault("warnings", []).append(reason)
        write_record(record, path)
    return changes, problems
