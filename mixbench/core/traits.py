"""What a norm placement may need to know of the model it is placed in (:class:`ModelTraits`), supplied by the model's
family, and the DyT authors' α0 table for LLaMA models that the ``lm`` family supplies.  Kept in the core, free of
torch, so that the family specs register without importing torch (``mixbench reclassify``); re-exported from
:mod:`mixbench.layers.placements`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class ModelTraits:
    """What a placement may need to know of the model it is placed in, supplied by the model's family (the layers
    below the families know no family by name).

    token_embeddings: the model embeds tokens (DyT's learnable √d embedding gain applies; a ViT's patches do not).
    dyt_alpha0: ``width -> (attention α0, other α0)``, the DyT authors' table for this kind of model (LLaMA:
        :func:`dyt_llm_alpha0`), or ``None`` for DyT's 0.5 everywhere (its ViT setting)."""

    token_embeddings: bool = False
    dyt_alpha0: Callable[[int], tuple[float, float]] | None = None


# DyT paper (Zhu et al., CVPR 2025), Table 12: α0 of LLaMA models by width, (attention norms, other norms) — the
# FFN-input and final norms are "other".  Table 11 gives the same per model size (7B 0.8/0.2, 13B 0.6/0.15, 34B/70B
# 0.2/0.05).  The paper's ViT value is 0.5 for every norm (:data:`mixbench.layers.placements.DYT_VIT_ALPHA0`).
DYT_LLM_ALPHA0 = ((1024, 1.0, 1.0), (2048, 1.0, 0.5), (4096, 0.8, 0.2), (8192, 0.2, 0.05))


def dyt_llm_alpha0(width: int) -> tuple[float, float]:
    """DyT's LLaMA α0 (attention, other) for hidden ``width``: Table 12 of the DyT paper, linear in log2(width) between
    its rows and the end rows' values outside them (so width 512 → 1.0 / 1.0).  The interpolation reproduces Table 11's
    13B row (width 5120 → 0.61 / 0.15 against the paper's 0.6 / 0.15)."""
    if not isinstance(width, int) or width < 1:
        raise ConfigError(f"DyT needs a positive model width, got {width!r}")
    rows = DYT_LLM_ALPHA0
    if width <= rows[0][0]:
        return rows[0][1], rows[0][2]
    if width >= rows[-1][0]:
        return rows[-1][1], rows[-1][2]
    for (w0, a0, o0), (w1, a1, o1) in zip(rows, rows[1:]):
        if w0 <= width <= w1:
            t = (math.log2(width) - math.log2(w0)) / (math.log2(w1) - math.log2(w0))
            return a0 + t * (a1 - a0), o0 + t * (o1 - o0)
    raise AssertionError("unreachable: the rows cover every width between their ends")
