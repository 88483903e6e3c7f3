"""Per-block gradient norms, attention and MLP sub-layers separately and together."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from ..core.storage import atomic_write_text

SUBLAYER_PREFIXES = {"attn": ("attn.", "norm1", "omega1"), "mlp": ("mlp.", "norm2", "omega2")}


def sublayer_of(name: str) -> str:
    """``attn`` or ``mlp`` for a parameter name inside a block (its sub-layer's branch, norms and scales)."""
    for sublayer, prefixes in SUBLAYER_PREFIXES.items():
        if name.startswith(prefixes):
            return sublayer
    return "other"  # e.g. timm LayerScale outside both prefixes does not occur; kept for safety


@torch.no_grad()
def block_grad_norms(blocks) -> list[dict[str, float]]:
    """[{attn, mlp, total}] — the L2 norm of the gradients of each block's parameters."""
    out = []
    for block in blocks:
        squares = {"attn": 0.0, "mlp": 0.0, "other": 0.0}
        groups: dict[str, list[torch.Tensor]] = {"attn": [], "mlp": [], "other": []}
        for name, p in block.named_parameters():
            if p.grad is not None:
                groups[sublayer_of(name)].append(p.grad.detach().float())
        for key, grads in groups.items():
            if grads:
                squares[key] = float(torch.stack(torch._foreach_norm(grads)).pow(2).sum())
        total = sum(squares.values())
        out.append({"attn": squares["attn"] ** 0.5, "mlp": squares["mlp"] ** 0.5, "total": total**0.5})
    return out


class GradNormMonitor(Callback):
    """Every ``every_n_steps`` optimizer steps, logs ``gradnorm/block{i}/{attn,mlp,total}`` (after gradient
    accumulation, before clipping and the step) and keeps the profiles; ``save(path)`` writes them as JSON.
    Cost: one fused norm per parameter group every N steps."""

    def __init__(self, every_n_steps: int = 100):
        self.every = every_n_steps
        self.history: list[dict] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if step % self.every and step != 0:
            return
        norms = block_grad_norms(pl_module.model.blocks)
        self.history.append({"step": step, "blocks": norms})
        pl_module.log_dict({f"gradnorm/block{i:02d}/{k}": v for i, n in enumerate(norms) for k, v in n.items()}, rank_zero_only=True)

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps({"every_n_steps": self.every, "history": self.history}, indent=1))
