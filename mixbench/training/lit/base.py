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
    warmup_epochs: float | None = None  # wins over warmup_ratio (needs trainer.max_epochs)
    min_lr_ratio: float = 0.1
    min_lr: float | None = None  # absolute floor; wins over min_lr_ratio
    lr_reference_batch: int | None = None  # lr is given for this global batch and scaled linearly to the actual one

    @classmethod
    def from_config(cls, node) -> OptimConfig:
        """From the ``optim`` config group."""
        from omegaconf import OmegaConf

        return cls(**OmegaConf.to_container(node, resolve=True))


class OptimizedModule(L.LightningModule):
    """Holds ``self.model`` and configures the optimizer and per-step LR schedule from :class:`OptimConfig`."""

    def __init__(self, model: nn.Module, optim: OptimConfig):
        super().__init__()
        self.model, self.optim_cfg = model, optim

    def global_batch_size(self) -> int:
        trainer = self.trainer
        return trainer.datamodule.batch_size * trainer.world_size * trainer.accumulate_grad_batches

    def configure_optimizers(self):
        cfg = self.optim_cfg
        lr = cfg.lr * self.global_batch_size() / cfg.lr_reference_batch if cfg.lr_reference_batch else cfg.lr
        self.effective_lr = lr
        # Lightning refuses to clip the gradients of a fused optimizer (it unscales inside its step): foreach then
        clips = bool(self.trainer.gradient_clip_val)
        optimizer = build_optimizer(self.model, cfg.name, lr, cfg.weight_decay, cfg.betas, cfg.eps, fused=False if clips else None)
        total = int(self.trainer.estimated_stepping_batches)
        if cfg.warmup_epochs is not None and self.trainer.max_epochs:
            warmup = int(round(cfg.warmup_epochs * total / self.trainer.max_epochs))
        else:
            warmup = resolve_warmup(total, cfg.warmup_steps, cfg.warmup_ratio)
        floor = cfg.min_lr / lr if cfg.min_lr is not None else cfg.min_lr_ratio
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, total, warmup, floor))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
