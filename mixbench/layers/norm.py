"""Norm layers by name, and the norm factories every model family builds its norms with.

rmsnorm:   x / sqrt(mean(x^2) + eps) * g                              (Zhang & Sennrich, 2019)
layernorm: (x - mean(x)) / sqrt(var(x) + eps) * g + b                 (Ba et al., 2016)
groupnorm: LayerNorm within each of G channel groups of a token, then per-channel g, b
           (Wu & He, 2018, applied per token as the "Group-LN" of Mix-LN Table 6 / Megalodon)
dyt:       g ⊙ tanh(α x) + b, α one learnable scalar                 (Zhu et al., CVPR 2025: DyT;
           not a ``norm.kind`` — chosen by ``norm=dyt``, see :class:`mixbench.layers.placements.DynamicTanh`)

A *norm factory* is ``make_norm(dim, position=None, device=None, dtype=None) -> nn.Module``: a
``functools.partial`` of a module-level function (so timm's ``get_norm_layer`` accepts and re-binds it).
``position`` says where the norm sits — one of :data:`NORM_POSITIONS` — and only factories whose function
has ``by_position = True`` (DyT: α0 per position) use it; the others ignore it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.errors import ConfigError

NORM_KINDS = ("rmsnorm", "layernorm", "groupnorm")


class NormConfigError(ConfigError):
    """A norm setting is invalid; the message says which values are valid."""


# attn / mlp: the input (or, by placement, the post-add / output) norm of a sub-layer; attn_out / mlp_out:
# Sandwich/Peri output norms; q / k / v: norms inside attention (QK-norm, HybridNorm's QKV-norm);
# final: after the last block; embed: on the embedding output (Peri-LN's optional embedding norm).
NORM_POSITIONS = ("attn", "mlp", "attn_out", "mlp_out", "q", "k", "v", "final", "embed")


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


class DyT(nn.Module):
    """Dynamic Tanh (Zhu, Chen, He, LeCun, Liu, CVPR 2025): ``weight ⊙ tanh(alpha · x) + bias``.

    ``alpha`` is one learnable scalar (shape (1,), as in the official ``dynamic_tanh.py``) initialised to
    ``alpha_init``; ``weight`` = 1 and ``bias`` = 0 at init; ``bias=False`` drops β (the paper's LLaMA).
    """

    def __init__(self, dim: int, alpha_init: float = 0.5, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.dim, self.alpha_init = dim, float(alpha_init)
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(dim, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.alpha.fill_(self.alpha_init)
        self.weight.fill_(1.0)
        if self.bias is not None:
            self.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.alpha * x) * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.dim}, alpha_init={self.alpha_init:g}, bias={self.bias is not None}"


def _make_norm(
    dim: int, position: str | None = None, *, kind: str, eps: float, bias: bool, impl: str, groups: int, device=None, dtype=None
) -> nn.Module:
    """One norm of ``kind`` (``position`` is ignored: these norms are the same everywhere)."""
    dd = dict(device=device, dtype=dtype)
    if kind == "groupnorm":
        return TokenGroupNorm(dim, groups=groups, eps=eps, bias=bias, **dd)
    if impl == "timm":
        from timm.layers import LayerNorm, RmsNorm

        return LayerNorm(dim, eps=eps, **dd) if kind == "layernorm" else RmsNorm(dim, eps=eps, **dd)
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias, **dd)
    return nn.RMSNorm(dim, eps=eps, **dd)


def _make_dyt(
    dim: int, position: str | None = None, *, bias: bool, alpha_attn: float, alpha_mlp: float, alpha_final: float, device=None, dtype=None
) -> DyT:
    """A DyT whose α0 depends on ``position``: attention side (attn, attn_out, q, k, v) → ``alpha_attn``;
    MLP side (mlp, mlp_out) → ``alpha_mlp``; final / embed → ``alpha_final``.  ``None`` (a module made by timm's
    own constructors, which the model re-makes with its position) gets ``alpha_attn``."""
    if position in (None, "attn", "attn_out", "q", "k", "v"):
        alpha = alpha_attn
    elif position in ("mlp", "mlp_out"):
        alpha = alpha_mlp
    elif position in ("final", "embed"):
        alpha = alpha_final
    else:
        raise ValueError(f"unknown norm position {position!r}; valid: {', '.join(NORM_POSITIONS)}")
    return DyT(dim, alpha_init=alpha, bias=bias, device=device, dtype=dtype)


_make_dyt.by_position = True  # type: ignore[attr-defined]


def norm_factory(kind: str, eps: float = 1e-6, bias: bool = True, impl: str = "torch", groups: int = 8) -> Callable[..., nn.Module]:
    """Return ``f(dim, position=None) -> nn.Module`` for the norm ``kind``.

    ``impl='timm'`` uses timm's LayerNorm / RmsNorm (so ViT state_dicts match timm's);
    ``impl='torch'`` uses ``torch.nn`` modules (fused kernels under torch.compile).
    ``bias`` applies to LayerNorm and GroupNorm (and to a DyT made from this factory, see :func:`dyt_factory`).
    """
    if kind not in NORM_KINDS:
        raise NormConfigError(f"unknown norm.kind {kind!r}; valid: {', '.join(NORM_KINDS)}")
    return partial(_make_norm, kind=kind, eps=eps, bias=bias, impl=impl, groups=groups)


def dyt_factory(alpha_attn: float = 0.5, alpha_mlp: float = 0.5, alpha_final: float = 0.5, bias: bool = True) -> Callable[..., nn.Module]:
    """Return ``f(dim, position=None) -> DyT`` with α0 by position (see :func:`_make_dyt`)."""
    return partial(_make_dyt, bias=bias, alpha_attn=float(alpha_attn), alpha_mlp=float(alpha_mlp), alpha_final=float(alpha_final))


def factory_setting(make_norm: Callable[..., nn.Module], key: str, default=None):
    """A keyword a norm factory was built with (e.g. ``bias``), ``default`` if it has none."""
    return getattr(make_norm, "keywords", {}).get(key, default)


def by_position(make_norm: Callable[..., nn.Module]) -> bool:
    """Whether ``make_norm`` makes different modules for different positions (then the models pass each norm's position)."""
    return bool(getattr(getattr(make_norm, "func", make_norm), "by_position", False))
