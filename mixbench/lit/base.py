"""Shared optimizer / schedule wiring for every LightningModule."""
from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
import torch.nn as nn

from ..optim import build_optimizer, resolve_warmup, warmup_cosine


@dataclass
class OptimConfig:
    """``optim`` config group: optimizer, peak lr, warmup (steps, or a ratio of all steps), cosine floor."""

    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int | None = None
    warmup_ratio: float = 0.1
    min_lr_ratio: float = 0.1


class OptimizedModule(L.LightningModule):
    """Holds ``self.model`` and configures the optimizer and per-step LR schedule from :class:`OptimConfig`."""

    def __init__(self, model: nn.Module, optim: OptimConfig):
        super().__init__()
        self.model, self.optim_cfg = model, optim

    def configure_optimizers(self):
        cfg = self.optim_cfg
        optimizer = build_optimizer(self.model, cfg.name, cfg.lr, cfg.weight_decay, cfg.betas, cfg.eps)
        total = int(self.trainer.estimated_stepping_batches)
        warmup = resolve_warmup(total, cfg.warmup_steps, cfg.warmup_ratio)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, total, warmup, cfg.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
