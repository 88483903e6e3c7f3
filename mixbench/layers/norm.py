"""Norm layers by name: ``rmsnorm`` (Zhang & Sennrich, 2019) and ``layernorm`` (Ba et al., 2016).

RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * g
LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch.nn as nn

from .placement import NORM_KINDS, NormConfigError


def norm_factory(kind: str, eps: float = 1e-6, bias: bool = True, family: str = "torch") -> Callable[[int], nn.Module]:
    """Return ``f(dim) -> nn.Module`` for the norm ``kind``.

    ``family='timm'`` uses timm's LayerNorm / RmsNorm (so ViT state_dicts match timm's);
    ``family='torch'`` uses ``torch.nn`` modules (fused kernels under torch.compile).
    ``bias`` only applies to LayerNorm.
    """
    if kind not in NORM_KINDS:
        raise NormConfigError(f"unknown norm.kind {kind!r}; valid: {', '.join(NORM_KINDS)}")
    if family == "timm":
        from timm.layers import LayerNorm, RmsNorm

        return partial(LayerNorm, eps=eps) if kind == "layernorm" else partial(RmsNorm, eps=eps)
    if kind == "layernorm":
        return partial(nn.LayerNorm, eps=eps, bias=bias)
    return partial(nn.RMSNorm, eps=eps)
