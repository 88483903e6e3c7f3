"""Causal language modeling: next-token cross-entropy, token-weighted validation loss and perplexity."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from .base import OptimizedModule
from .losses import IGNORE_INDEX, chunked_cross_entropy_sum


class CausalLMModule(OptimizedModule):
    """Logs ``train/loss`` per step and ``val/loss`` (mean over all target tokens) and ``val/ppl = exp(val/loss)``.

    The validation mean is weighted by the target-token count of each batch, so it is the same for
    any batch size or number of devices.  With ``loss_chunk_size`` the LM head and cross-entropy are
    computed in chunks of that many tokens (no full logits tensor).
    """

    def __init__(self, model, optim, loss_chunk_size: int | None = None):
        super().__init__(model, optim)
        self.loss_chunk_size = loss_chunk_size
        self.val_loss = MeanMetric()

    def loss_sum(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        labels = batch["labels"]
        if self.loss_chunk_size:
            hidden = self.model(batch["input_ids"], return_hidden=True)
            total = chunked_cross_entropy_sum(hidden, self.model.head.weight, labels, self.loss_chunk_size)
        elif getattr(self.model, "forward_computes_loss", False):  # mixbench LLaMA: loss inside its (compiled) forward
            total = self.model(batch["input_ids"], labels=labels)
        else:
            logits = self.model(batch["input_ids"])
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
