"""Causal language modeling: next-token cross-entropy, token-weighted validation loss and perplexity."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from ...core.errors import ConfigError
from .base import OptimizedModule
from .losses import IGNORE_INDEX, LOSS_IMPLS, linear_cross_entropy_sum


def causal_lm_loss_sum(
    model, input_ids: torch.Tensor, labels: torch.Tensor, impl: str = "torch", chunk_size: int | None = None
) -> torch.Tensor:
    """Summed next-token cross-entropy of ``model`` on ``input_ids`` against ``labels`` (−100 ignored).

    ``impl`` (``loss.impl``, see :mod:`mixbench.training.lit.losses`): ``torch`` computes the loss inside the model's
    (compiled) forward where the model can (so the fp32 up-cast of the logits fuses into the loss kernel); the
    others take the final hidden states and the head weight.  ``chunk_size`` with ``torch`` means ``chunked``."""
    if impl == "torch" and chunk_size:
        impl = "chunked"
    if impl == "torch":
        if getattr(model, "forward_computes_loss", False):  # mixbench LLaMA: loss inside its (compiled) forward
            return model(input_ids, labels=labels)
        logits = model(input_ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    hidden = model(input_ids, return_hidden=True)
    return linear_cross_entropy_sum(hidden, model.head.weight, labels, impl, chunk_size)


class CausalLMModule(OptimizedModule):
    """Logs ``train/loss`` per step and ``val/loss`` (mean over all target tokens) and ``val/ppl = exp(val/loss)``.

    The validation mean is weighted by the target-token count of each batch, so it is the same for
    any batch size or number of devices.  ``loss_impl`` picks the cross-entropy implementation
    (:func:`causal_lm_loss_sum`); with ``loss_chunk_size`` the LM head and cross-entropy are computed in
    chunks of that many tokens (no full logits tensor).
    """

    def __init__(self, model, optim, loss_chunk_size: int | None = None, loss_impl: str = "torch"):
        super().__init__(model, optim)
        if loss_impl not in LOSS_IMPLS:
            raise ConfigError(f"unknown loss.impl {loss_impl!r}; valid: {', '.join(LOSS_IMPLS)}")
        self.loss_chunk_size, self.loss_impl = loss_chunk_size, loss_impl
        self.val_loss = MeanMetric()

    def objective(self, model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The summed next-token cross-entropy (:func:`causal_lm_loss_sum`)."""
        return causal_lm_loss_sum(model, input_ids, labels, self.loss_impl, self.loss_chunk_size)

    def loss_sum(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        labels = batch["labels"]
        return self.objective(self.model, batch["input_ids"], labels), (labels != IGNORE_INDEX).sum()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        labels = batch["labels"]
        loss = self.training_objective(batch["input_ids"], labels) / (labels != IGNORE_INDEX).sum().clamp(min=1)
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
