"""Image classification: cross-entropy training, top-1 / top-5 accuracy (torchmetrics) on validation."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from .base import OptimizedModule


class ImageClassifierModule(OptimizedModule):
    """Logs ``train/loss`` and, over the whole validation set, ``val/loss``, ``val/top1``, ``val/top5`` (percent)."""

    def __init__(self, model, optim, num_classes: int, label_smoothing: float = 0.0):
        super().__init__(model, optim)
        self.label_smoothing = label_smoothing
        self.val_loss = MeanMetric()
        self.val_top1 = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.val_top5 = MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro")

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        images, targets = batch
        loss = F.cross_entropy(self.model(images), targets, label_smoothing=self.label_smoothing)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        images, targets = batch
        logits = self.model(images).float()
        self.val_loss.update(F.cross_entropy(logits, targets), weight=targets.numel())
        self.val_top1.update(logits, targets)
        self.val_top5.update(logits, targets)

    def on_validation_epoch_end(self) -> None:
        for name, metric, scale in (("val/loss", self.val_loss, 1.0), ("val/top1", self.val_top1, 100.0), ("val/top5", self.val_top5, 100.0)):
            self.log(name, metric.compute() * scale, prog_bar=name != "val/top5")
            metric.reset()
