"""Norm layers by name.

rmsnorm:   x / sqrt(mean(x^2) + eps) * g                              (Zhang & Sennrich, 2019)
layernorm: (x - mean(x)) / sqrt(var(x) + eps) * g + b                 (Ba et al., 2016)
groupnorm: LayerNorm within each of G channel groups of a token, then per-channel g, b
           (Wu & He, 2018, applied per token as the "Group-LN" of Mix-LN Table 6 / Megalodon)
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .placement import NORM_KINDS, NormConfigError


class TokenGroupNorm(nn.Module):
    """GroupNorm over the channels of each token: input (..., C), C split into ``groups`` groups."""

    def __init__(self, dim: int, groups: int = 8, eps: float = 1e-6, bias: bool = True, device=None, dtype=None):
        super().__init__()
        if dim % groups:
            raise NormConfigError(f"norm.groups={groups} does not divide the width {dim}")
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(dim, device=device, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grouped = x.unflatten(-1, (self.groups, -1))
        y = F.layer_norm(grouped, grouped.shape[-1:], eps=self.eps).flatten(-2)
        y = y * self.weight
        return y + self.bias if self.bias is not None else y


def norm_factory(kind: str, eps: float = 1e-6, bias: bool = True, family: str = "torch", groups: int = 8) -> Callable[[int], nn.Module]:
    """Return ``f(dim) -> nn.Module`` for the norm ``kind``.

    ``family='timm'`` uses timm's LayerNorm / RmsNorm (so ViT state_dicts match timm's);
    ``family='torch'`` uses ``torch.nn`` modules (fused kernels under torch.compile).
    ``bias`` applies to LayerNorm and GroupNorm.
    """
    if kind not in NORM_KINDS:
        raise NormConfigError(f"unknown norm.kind {kind!r}; valid: {', '.join(NORM_KINDS)}")
    if kind == "groupnorm":
        return partial(TokenGroupNorm, groups=groups, eps=eps, bias=bias)
    if family == "timm":
        from timm.layers import LayerNorm, RmsNorm

        return partial(LayerNorm, eps=eps) if kind == "layernorm" else partial(RmsNorm, eps=eps)
    if kind == "layernorm":
        return partial(nn.LayerNorm, eps=eps, bias=bias)
    return partial(nn.RMSNorm, eps=eps)
