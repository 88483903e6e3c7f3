"""LR sensitivity (Wortsman et al. 2023, *Small-scale proxies for large-scale Transformer training instabilities*, §2.2)
and the loss at initialisation it needs.

    S = mean over the swept values η of [min(ℓ(η), ℓ₀) − ℓ*],   ℓ* = min over η of min(ℓ(η), ℓ₀),

ℓ(η) is the validation loss (``val/loss``) at η, ℓ₀ the loss at initialisation.  As in the paper, a loss is used as
measured, capped at ℓ₀, whatever the run's outcome (a run that stalled keeps the loss it ended at); only a loss that
is not finite (NaN, inf, none recorded) counts as ℓ₀.  S is 0 for a method whose loss is the same at every η and
grows as the curve of loss against η rises away from its minimum (in nats: the mean excess loss over the sweep).
"""

from __future__ import annotations

import math
import re
import statistics

from .records import _finite

LOSS = "val/loss"  # the metric S is computed on, whatever the table's primary metric is


def init_loss(record: dict) -> float | None:
    """ℓ₀, the validation loss of ``record``'s model at initialisation, or None where it cannot be told:

    - measured: the ``val/loss`` of a validation at step 0 in ``record["validations"]`` (no run records one today);
    - a language model trained from scratch (its model options have a ``vocab_size``): ln V, V = that vocabulary size
      (the cross-entropy of the uniform prediction over the vocabulary, which a small-σ init starts near);
    - a classifier trained from scratch: ln C, C = ``model.options.num_classes`` or, where that came from the data (null
      in the options), the ``num_classes=C`` of the model's label;
    - a run started from trained weights (``init_from``: SFT, reward models, RLHF): None, its loss at init is not chance.
    """
    at_start = [v.get("metrics") or {} for v in record.get("validations") or [] if v.get("step") == 0]
    if at_start and _finite(at_start[0].get(LOSS)):
        return float(at_start[0][LOSS])
    if (record.get("config") or {}).get("init_from"):
        return None
    model = record["model"] if isinstance(record["model"], dict) else {}
    options = model.get("options") or {}
    if _count(options.get("vocab_size")):  # a language model's (a classifier has num_classes instead)
        return math.log(options["vocab_size"])
    classes = options.get("num_classes")
    if not _count(classes):
        found = re.search(r"\bnum_classes=(\d+)", str(model.get("label", "")))
        classes = int(found.group(1)) if found else None
    return math.log(classes) if _count(classes) else None


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


def capped(loss, init: float) -> float:
    """One measured loss as S counts it: ``min(loss, ℓ₀)``, and ℓ₀ (``init``) where ``loss`` is not finite."""
    return min(float(loss), init) if _finite(loss) else init


def lr_sensitivity(losses: list, init: float) -> float:
    """S over the swept values: ``losses`` holds ℓ(η) for each η, each counted as :func:`capped` (a loss that is not
    finite as ℓ₀ = ``init``)."""
    counted = [capped(loss, init) for loss in losses]
    best = min(counted)
    return statistics.fmean(c - best for c in counted)
