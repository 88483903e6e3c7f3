"""Shared wiring of every LightningModule: optimizer, per-step schedule, and the training objective, optionally replayed
from CUDA graphs (:mod:`mixbench.training.step_graph`)."""

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
    """Holds ``self.model`` and configures the optimizer and per-step LR schedule from :class:`OptimConfig`.

    Subclasses write their training loss as :meth:`objective` ``(model, *tensors) -> loss`` and call
    :meth:`training_objective`: with ``capture_step`` on (the run's ``cuda_graph_step``), its forward and backward are
    replayed from CUDA graphs; ``step_graph_status`` then says whether they were."""

    capture_step = False

    def __init__(self, model: nn.Module, optim: OptimConfig):
        super().__init__()
        self.model, self.optim_cfg = model, optim
        self._graphed = None

    def objective(self, model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
        """The training loss of ``model`` on ``inputs``: a function of the model and the tensors alone (no logging)."""
        raise NotImplementedError

    def training_objective(self, *inputs: torch.Tensor) -> torch.Tensor:
        """:meth:`objective` of ``self.model``, through the captured graphs when ``capture_step`` is on."""
        if not self.capture_step:
            return self.objective(self.model, *inputs)
        if self._graphed is None:
            from ..step_graph import GraphedObjective

            self._graphed = GraphedObjective(self.model, self.objective, self.trainer.precision)
        return self._graphed(*inputs)

    @classmethod
    def has_objective(cls) -> bool:
        """Whether the training step goes through :meth:`objective` (the reward model and ReMax do not)."""
        return cls.objective is not OptimizedModule.objective

    @property
    def step_graph_status(self) -> dict | None:
        return self._graphed.status if self._graphed is not None else None

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
