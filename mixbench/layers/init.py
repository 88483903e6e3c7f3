"""Placement-specific weight initialization (only DeepNorm defines its own)."""

from __future__ import annotations

import math

import torch


@torch.no_grad()
def init_deepnorm_(
    qkv: torch.Tensor,
    proj: torch.Tensor,
    fc1: torch.Tensor,
    fc2: torch.Tensor,
    hidden: int,
    intermediate: int,
    num_layers: int,
    paper_compat: bool = False,
) -> None:
    """DeepNorm init of one block, in place.

    DeepNet: scale the default init of the value rows of the fused ``qkv`` (rows [q; k; v]), the
    attention output ``proj`` and the MLP weights ``fc1``/``fc2`` by b = (8L)^(-1/4) (as torchscale
    does); q/k are left unchanged.

    ``paper_compat``: what the official Mix-LN code does instead — xavier-normal with gain
    (8L)^(+1/4) on v/o/MLP weights and gain 1 on q/k, each computed for its unfused matrix
    (``intermediate`` is the output width of one MLP input matrix).
    """
    _, b = deepnorm_constants(num_layers, paper_compat)
    if not paper_compat:
        for w in (qkv[2 * hidden :], proj, fc1, fc2):
            w.mul_(b)
        return

    def xavier_normal_(w: torch.Tensor, fan_in: int, fan_out: int, gain: float) -> None:
        w.normal_(0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))

    xavier_normal_(qkv[: 2 * hidden], hidden, hidden, 1.0)
    xavier_normal_(qkv[2 * hidden :], hidden, hidden, b)
    xavier_normal_(proj, hidden, hidden, b)
    xavier_normal_(fc1, hidden, intermediate, b)
    xavier_normal_(fc2, intermediate, hidden, b)


@torch.no_grad()
def scaled_init_(weights: list[torch.Tensor], std: float, num_layers: int, truncated: bool = False) -> None:
    """Scaled initialization of residual output projections: N(0, std / sqrt(2L)) (paper App. B)."""
    scaled = std / math.sqrt(2 * num_layers)
    for w in weights:
        if truncated:
            torch.nn.init.trunc_normal_(w, std=scaled)
        else:
            w.normal_(0.0, scaled)


def deepnorm_constants(num_layers: int, paper_compat: bool = False) -> tuple[float, float]:
    """DeepNorm residual scale ``a`` and init gain ``b`` for ``num_layers`` blocks.

    DeepNet (decoder-only / encoder-only): ``a = (2L)^(1/4)``, ``b = (8L)^(-1/4)``.
    ``paper_compat`` returns what the official Mix-LN code uses: ``a = sqrt(8)`` for any depth and
    a xavier gain of ``(8L)^(+1/4)``.
    """
    if paper_compat:
        return math.sqrt(8.0), (8.0 * num_layers) ** 0.25
    return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25
