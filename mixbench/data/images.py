"""Image classification data: the CIFAR-10 subset embedded in the package."""
from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from . import ASSETS_DIR

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class ImageTensorDataset(Dataset):
    """uint8 HWC images in memory + int labels, with a torchvision v2 transform on CHW uint8 tensors."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), self.labels[i]


class EmbeddedCifarDataModule(L.LightningDataModule):
    """1,600 train / 400 val real CIFAR-10 images (class-stratified from the official test set), 32×32.

    Train augmentation: random crop with 4-px padding + horizontal flip (``augment``); both splits are
    normalized with the CIFAR-10 mean/std.  ``batch_size`` is per device.
    """

    dataset_name = "cifar10_embedded"
    dataset_label = "CIFAR-10 embedded subset (1.6k train / 0.4k val, 32px)"
    num_classes = 10
    img_size = 32

    def __init__(self, batch_size: int = 64, eval_batch_size: int | None = None, num_workers: int = 0, augment: bool = True, **_unused):
        super().__init__()
        self.batch_size, self.num_workers, self.augment = batch_size, num_workers, augment
        self.eval_batch_size = eval_batch_size or batch_size

    def setup(self, stage: str | None = None) -> None:
        data = np.load(ASSETS_DIR / "cifar10_embedded.npz")
        self.classes = [str(c) for c in data["classes"]]
        normalize = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR_MEAN, CIFAR_STD)]
        train_tf = [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()] if self.augment else []
        self.train_set = ImageTensorDataset(data["train_x"], data["train_y"], v2.Compose(train_tf + normalize))
        self.val_set = ImageTensorDataset(data["val_x"], data["val_y"], v2.Compose(normalize))

    def describe(self) -> dict:
        return {"name": self.dataset_name, "label": self.dataset_label, "num_train": len(self.train_set), "num_val": len(self.val_set),
                "source": "official CIFAR-10 test set (class-stratified subset)", "image_size": 32}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers)
