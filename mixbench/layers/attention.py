"""Norms inside attention, shared by both model families: QK-norm (``norm.qk_norm``) and HybridNorm's QKV-norm.

An attention module of either family has a fused ``qkv`` projection (rows [q; k; v]), ``num_heads`` and
``head_dim``, and three slots: ``q_norm``, ``k_norm`` (timm's names; ``nn.Identity`` in timm, ``None`` in
LLaMA while off) and ``v_norm`` (``None`` while off), plus the plain string ``qk_norm_mode``:

* ``none``: no norm on q and k;
* ``head``: a norm of width ``head_dim`` on q and k after the head split, shared across heads (ViT-22B,
  Gemma 3, Qwen3, timm ``qk_norm=True``);
* ``full``: a norm of width ``num_heads · head_dim`` over the whole projected q and over k, before the
  reshape into heads (OLMo 2).

``v_norm`` (HybridNorm only) is a per-head norm of width ``head_dim`` on v after the head split.
Every norm acts **before RoPE** (:func:`project_qkv` returns q, k, v before any rotary embedding).
The modules are registered only when on, so ``state_dict`` keys of a model without them are unchanged.

:func:`sdpa_backend` pins the SDPA kernel of both families (``auto`` lets PyTorch choose); :func:`causal_attention` is
causal SDPA under it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..core.errors import ConfigError
from .norm import NormConfigError

SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def add_qk_norm(attn: nn.Module, mode: str, make_norm: Callable[..., nn.Module]) -> tuple[str, ...]:
    """Give ``attn`` q/k norms of ``mode`` (none | head | full); returns the names of the modules it added."""
    if mode == "none":
        return ()
    current = getattr(attn, "qk_norm_mode", "none")
    if current != "none":  # a placement already normalises q and k (HybridNorm: per head)
        if current != mode:
            raise NormConfigError(
                f"norm.qk_norm={mode} conflicts with this block's own {current!r} norms on q and k "
                f"(HybridNorm normalises q, k and v per head; use norm.qk_norm=none or head)"
            )
        return ()
    width = attn.head_dim if mode == "head" else attn.num_heads * attn.head_dim
    attn.q_norm = make_norm(width, position="q")
    attn.k_norm = make_norm(width, position="k")
    attn.qk_norm_mode = mode
    return ("attn.q_norm", "attn.k_norm")


def add_qkv_norm(attn: nn.Module, make_norm: Callable[..., nn.Module]) -> tuple[str, ...]:
    """HybridNorm's QKV-norm: per-head norms of width ``head_dim`` on q, k and v; returns the names it added."""
    for name, position in (("q_norm", "q"), ("k_norm", "k"), ("v_norm", "v")):
        setattr(attn, name, make_norm(attn.head_dim, position=position))
    attn.qk_norm_mode = "head"
    return ("attn.q_norm", "attn.k_norm", "attn.v_norm")


def project_qkv(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of shape (B, heads, T, head_dim) from ``x`` (B, T, C), with ``attn``'s q/k/v norms applied (before RoPE)."""
    b, t, _ = x.shape
    heads, hd = attn.num_heads, attn.head_dim
    qkv = attn.qkv(x)
    mode = getattr(attn, "qk_norm_mode", "none")
    if mode == "full":
        q, k, v = qkv.split(heads * hd, dim=-1)
        q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = (z.view(b, t, heads, hd).transpose(1, 2) for z in (q, k, v))
    else:
        q, k, v = qkv.view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        if mode == "head":
            q, k = attn.q_norm(q), attn.k_norm(k)
    v_norm = getattr(attn, "v_norm", None)
    if v_norm is not None:
        v = v_norm(v)
    return q, k, v


def check_attention_backend(backend: str) -> None:
    """A ConfigError naming the valid choices unless ``backend`` is ``auto`` or a key of :data:`SDPA_BACKENDS`."""
    if backend != "auto" and backend not in SDPA_BACKENDS:
        raise ConfigError(f"unknown attention_backend {backend!r}; valid: auto, {', '.join(SDPA_BACKENDS)}")


def sdpa_backend(backend: str) -> AbstractContextManager:
    """Context in which ``scaled_dot_product_attention`` uses ``backend``'s kernel (``auto``: PyTorch's choice)."""
    return nullcontext() if backend == "auto" else sdpa_kernel([SDPA_BACKENDS[backend]])


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """Causal ``scaled_dot_product_attention``; ``backend`` (auto | flash | cudnn | efficient | math) pins its kernel."""
    with sdpa_backend(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
