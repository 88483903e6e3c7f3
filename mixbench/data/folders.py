"""ImageNet-1K and any folder-per-class dataset, with timm's train / eval transforms.

Layouts read from ``root``:

* ILSVRC folders: ``<root>/train/<class>/*.JPEG`` and ``<root>/val/<class>/*.JPEG``; class index = sorted
  class-folder name (for ImageNet: the sorted wnids, the standard index);
* the Hugging Face ``imagenet-1k`` parquet files: ``<root>/**/train-*.parquet`` and
  ``<root>/**/validation-*.parquet`` with columns ``image`` ({bytes, path}) and ``label``.

``pipeline``: ``cpu`` decodes and augments in the DataLoader workers (PIL + timm transforms); ``gpu`` has the
workers read the encoded files only and runs decode + the same recipe on the training device
(:mod:`mixbench.data.device_pipeline`), in ``transfer_batch_to_device``.
"""
from __future__ import annotations

import glob
import io
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from ..errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PIPELINES = ("cpu", "gpu")


def detect_layout(root: Path, train_dir: str, val_dir: str) -> str:
    if (root / train_dir).is_dir() and (root / val_dir).is_dir():
        return "folder"
    if glob.glob(str(root / "**" / "train-*.parquet"), recursive=True):
        return "parquet"
    raise FileNotFoundError(
        f"no image dataset under data.root={str(root)!r}: expected {train_dir}/<class>/*.JPEG and {val_dir}/<class>/*.JPEG "
        "folders, or the Hugging Face imagenet-1k parquet files (train-*.parquet, validation-*.parquet); "
        "set data.root=/path/to/imagenet"
    )


def read_bytes(path: str) -> torch.Tensor:
    """The encoded file as a 1-D uint8 tensor (decoded later, on the device)."""
    from torchvision.io import read_file

    return read_file(path)


class ParquetImages(Dataset):
    """Rows of an HF image dataset (``image`` bytes + ``label``), decoded with PIL on access, or handed over
    encoded (a 1-D uint8 tensor) when ``transform`` is None."""

    def __init__(self, files: list[str], transform):
        from datasets import Image as ImageFeature
        from datasets import load_dataset

        self.rows = load_dataset("parquet", data_files=files, split="train")
        if transform is None:
            self.rows = self.rows.cast_column("image", ImageFeature(decode=False))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        from PIL import Image

        row = self.rows[i]
        image = row["image"]
        if self.transform is None:
            return torch.frombuffer(bytearray(image["bytes"]), dtype=torch.uint8), row["label"]
        if isinstance(image, dict):  # undecoded {bytes, path}
            image = Image.open(io.BytesIO(image["bytes"]))
        return self.transform(image.convert("RGB")), row["label"]


class ImageFolderDataModule(L.LightningDataModule):
    """Folder-per-class (or HF parquet) images through timm's ``create_transform``.

    Train: RandomResizedCrop(``img_size``, bicubic) + flip + RandAugment ``auto_augment`` + random erasing
    ``re_prob``; eval: resize ``img_size / crop_pct`` (256 for 224) + center crop, bicubic.  ``batch_size``
    is per device.  ``pipeline``: ``cpu`` (workers decode and augment) or ``gpu`` (workers read bytes; decode and
    augmentation run batched on the training device, same recipe).
    """

    def __init__(self, root: str | None = None, train_dir: str = "train", val_dir: str = "val", img_size: int = 224,
                 batch_size: int = 128, eval_batch_size: int | None = None, num_workers: int = 8, auto_augment: str | None = "rand-m9-mstd0.5-inc1",
                 re_prob: float = 0.25, interpolation: str = "bicubic", crop_pct: float = 0.875, hflip: float = 0.5,
                 color_jitter: float = 0.4, mean=IMAGENET_MEAN, std=IMAGENET_STD, name: str | None = None, label: str | None = None,
                 pipeline: str = "cpu", **_unused):
        super().__init__()
        if pipeline not in PIPELINES:
            raise ConfigError(f"unknown data.pipeline={pipeline!r}; valid: {', '.join(PIPELINES)}")
        self.pipeline = pipeline
        if root is None:
            raise ConfigError("set data.root to the dataset folder (ILSVRC train/ and val/ class folders, or HF imagenet-1k parquet files)")
        self.root, self.train_dir, self.val_dir = Path(root).expanduser(), train_dir, val_dir
        self.img_size, self.batch_size, self.eval_batch_size = img_size, batch_size, eval_batch_size or batch_size
        self.num_workers = num_workers
        self.aug = dict(auto_augment=auto_augment, re_prob=re_prob, interpolation=interpolation, hflip=hflip, color_jitter=color_jitter,
                        mean=tuple(mean), std=tuple(std))
        self.crop_pct = crop_pct
        self.dataset_name = name or self.root.name
        self.dataset_label = label or f"image folders {self.root}"

    def device_pipeline(self):
        """The ``gpu`` pipeline's recipe (built once)."""
        if not hasattr(self, "_device_pipeline"):
            from .device_pipeline import DeviceImagePipeline

            self._device_pipeline = DeviceImagePipeline(self.img_size, self.aug["auto_augment"], self.aug["re_prob"], self.aug["interpolation"],
                                                        self.crop_pct, self.aug["hflip"], self.aug["mean"], self.aug["std"])
        return self._device_pipeline

    def transforms(self):
        if self.pipeline == "gpu":  # the workers only read the files
            return None, None
        from timm.data import create_transform

        train = create_transform(self.img_size, is_training=True, re_mode="pixel", re_count=1, **self.aug)
        val = create_transform(self.img_size, is_training=False, interpolation=self.aug["interpolation"], crop_pct=self.crop_pct,
                               mean=self.aug["mean"], std=self.aug["std"])
        return train, val

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        train_tf, val_tf = self.transforms()
        self.layout = detect_layout(self.root, self.train_dir, self.val_dir)
        if self.layout == "folder":
            from torchvision.datasets import ImageFolder

            loader = {"loader": read_bytes} if self.pipeline == "gpu" else {}
            self.train_set = ImageFolder(str(self.root / self.train_dir), transform=train_tf, **loader)
            self.val_set = ImageFolder(str(self.root / self.val_dir), transform=val_tf, **loader)
            if self.train_set.classes != self.val_set.classes:
                raise ConfigError(f"{self.root}: the train and val folders have different classes")
            self.classes = self.train_set.classes
        else:
            train = sorted(glob.glob(str(self.root / "**" / "train-*.parquet"), recursive=True))
            val = sorted(glob.glob(str(self.root / "**" / "validation-*.parquet"), recursive=True))
            self.train_set, self.val_set = ParquetImages(train, train_tf), ParquetImages(val, val_tf)
            features = self.train_set.rows.features["label"]
            self.classes = list(getattr(features, "names", None) or range(max(self.train_set.rows["label"]) + 1))
        self.num_classes = len(self.classes)

    def describe(self) -> dict:
        return {"name": self.dataset_name, "label": self.dataset_label, "root": str(self.root), "layout": self.layout,
                "num_train": len(self.train_set), "num_val": len(self.val_set), "num_classes": self.num_classes,
                "image_size": self.img_size, "eval_crop_pct": self.crop_pct, "pipeline": self.pipeline, **{f"aug_{k}": v for k, v in self.aug.items()}}

    def _collate(self, train: bool) -> dict:
        if self.pipeline == "cpu":
            return {"pin_memory": torch.cuda.is_available()}
        from .device_pipeline import collate_encoded

        return {"collate_fn": collate_encoded(train)}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, **self._collate(train=True))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers,
                          **self._collate(train=False))

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        """``gpu`` pipeline: decode and augment the encoded batch on ``device``; otherwise Lightning's default."""
        from .device_pipeline import EncodedImages

        if isinstance(batch, EncodedImages):
            return self.device_pipeline()(batch, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
