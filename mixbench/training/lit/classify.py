"""Image classification: cross-entropy (or soft-target CE under timm Mixup/CutMix), top-1 / top-5 accuracy
(torchmetrics) on validation, and optionally a timm model EMA evaluated next to the raw weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from .base import OptimizedModule


class ValMetrics(torch.nn.Module):
    """Loss, top-1 and top-5 over a whole validation set."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.loss = MeanMetric()
        self.top1 = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.top5 = MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro")

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        self.loss.update(F.cross_entropy(logits, targets), weight=targets.numel())
        self.top1.update(logits, targets)
        self.top5.update(logits, targets)

    def compute_and_reset(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {
            f"{prefix}/loss": self.loss.compute(),
            f"{prefix}/top1": 100 * self.top1.compute(),
            f"{prefix}/top5": 100 * self.top5.compute(),
        }
        for metric in (self.loss, self.top1, self.top5):
            metric.reset()
        return out


class ImageClassifierModule(OptimizedModule):
    """Logs ``train/loss`` and ``val/{loss,top1,top5}`` (percent); with ``ema_decay`` also ``val_ema/*``.

    ``mixup``: keyword arguments of :class:`timm.data.Mixup` (``mixup_alpha``, ``cutmix_alpha``, ``prob``,
    ``switch_prob``, ``mode``); when either alpha is > 0 the batch is mixed on the device and the loss is
    timm's soft-target cross-entropy with ``label_smoothing`` folded into the targets.
    """

    def __init__(
        self, model, optim, num_classes: int, label_smoothing: float = 0.0, mixup: dict | None = None, ema_decay: float | None = None
    ):
        super().__init__(model, optim)
        self.label_smoothing = label_smoothing
        self.mixup = None
        if mixup and (mixup.get("mixup_alpha", 0) > 0 or mixup.get("cutmix_alpha", 0) > 0):
            from timm.data import Mixup

            self.mixup = Mixup(**mixup, label_smoothing=label_smoothing, num_classes=num_classes)
        self.ema = None
        if ema_decay:
            from .ema import CachedModelEma

            self.ema = CachedModelEma(model, decay=ema_decay)
            # updated in place, never by backward: without this DDP finds "unused parameters" and stops the run
            self.ema.requires_grad_(False)
        self._ema_step = -1
        self.val_raw = ValMetrics(num_classes)
        self.val_ema = ValMetrics(num_classes) if self.ema is not None else None

    def objective(self, model, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Soft-target cross-entropy for Mixup/CutMix targets (floating point), else cross-entropy with label smoothing."""
        if targets.is_floating_point():
            return torch.sum(-targets * F.log_softmax(model(images), dim=-1), dim=-1).mean()
        return F.cross_entropy(model(images), targets, label_smoothing=self.label_smoothing)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        images, targets = batch
        if self.mixup is not None:
            images, targets = self.mixup(images, targets)
        loss = self.training_objective(images, targets)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_train_start(self) -> None:
        if self.ema is not None:  # the modules were moved to the device since the EMA last listed their tensors
            self.ema.forget_tensors()

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self.ema is not None and self.global_step != self._ema_step:  # once per optimizer step
            self._ema_step = self.global_step
            self.ema.update(self.model, step=self.global_step)

    def validation_step(self, batch, batch_idx: int) -> None:
        images, targets = batch
        self.val_raw.update(self.model(images).float(), targets)
        if self.ema is not None:
            self.val_ema.update(self.ema.module(images).float(), targets)

    def on_validation_epoch_end(self) -> None:
        metrics = self.val_raw.compute_and_reset("val")
        if self.ema is not None:
            metrics.update(self.val_ema.compute_and_reset("val_ema"))
        for name, value in metrics.items():
            self.log(name, value, prog_bar=name in ("val/loss", "val/top1", "val_ema/top1"))
