"""Optimizer, parameter groups and the warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..core.errors import ConfigError

OPTIMIZERS = ("adam", "adamw")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay only on matrices: no decay on norms, biases (ndim < 2) and ``model.no_weight_decay()`` names."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or name in skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(
    model: nn.Module, name: str, lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8, fused: bool | None = None
) -> torch.optim.Optimizer:
    """``adam`` (L2-coupled decay, as the paper's LLaMA runs with wd 0) or ``adamw`` (decoupled decay); fused (one
    kernel over all parameters) where they all are on CUDA or the CPU — on the CPU 2.7× less CPU time a step than the
    tensor-by-tensor loop torch takes there by default (ViT-S: 0.025 against 0.067 s on one thread)."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown optim.name {name!r}; valid: {', '.join(OPTIMIZERS)}")
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    if fused is None:
        fused = all(p.device.type in ("cuda", "cpu") for p in model.parameters())
    return cls(param_groups(model, weight_decay), lr=lr, betas=tuple(betas), eps=eps, fused=fused or None)


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """LR multiplier: t/W during warmup, then min + (1 - min)·½(1 + cos(π(t - W)/(T - W)))."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def resolve_warmup(total_steps: int, warmup_steps: int | None, warmup_ratio: float) -> int:
    return int(warmup_steps) if warmup_steps is not None else int(round(warmup_ratio * total_steps))
