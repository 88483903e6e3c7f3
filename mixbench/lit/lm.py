"""Causal language modeling: next-token cross-entropy, token-weighted validation loss and perplexity."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from ..data.text import IGNORE_INDEX
from .base import OptimizedModule


class CausalLMModule(OptimizedModule):
    """Logs ``train/loss`` per step and ``val/loss`` (mean over all target tokens) and ``val/ppl = exp(val/loss)``.

    The validation mean is weighted by target-token count per batch, so it is the same for any
    batch size or number of devices.
    """

    def __init__(self, model, optim):
        super().__init__(model, optim)
        self.val_loss = MeanMetric()

    def loss_sum(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(batch["input_ids"])
        labels = batch["labels"]
        total = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
        return total, (labels != IGNORE_INDEX).sum()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        total, count = self.loss_sum(batch)
        loss = total / count.clamp(min=1)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        total, count = self.loss_sum(batch)
        self.val_loss.update(total / count.clamp(min=1), weight=count)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.val_loss.reset()
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/ppl", torch.exp(loss) if torch.isfinite(loss) else torch.tensor(math.inf), prog_bar=True)
