"""ImageNet-1K and any folder-per-class dataset, with timm's train / eval transforms.

Layouts read from ``root``:

* ILSVRC folders: ``<root>/train/<class>/*.JPEG`` and ``<root>/val/<class>/*.JPEG``; class index = sorted
  class-folder name (for ImageNet: the sorted wnids, the standard index);
* the Hugging Face ``imagenet-1k`` parquet files: ``<root>/**/train-*.parquet`` and
  ``<root>/**/validation-*.parquet`` with columns ``image`` ({bytes, path}) and ``label``.

``pipeline``: ``cpu`` decodes and augments in the DataLoader workers (PIL + timm transforms); ``gpu`` has the
workers decode and crop only (uint8) and runs flip, RandAugment, normalize and erasing on the training device;
``nvjpeg`` has the workers read the files only and decodes on the GPU too (:mod:`mixbench.data.device_pipeline`,
applied in ``transfer_batch_to_device``; the workers' collate draws the batch's random augmentation parameters).
``dali`` decodes and augments on the GPU with NVIDIA DALI (:mod:`mixbench.data.dali`, an optional extra).
``overlap`` runs that device half on a side CUDA stream; ``worker_nice`` lowers the workers' CPU priority so the
process that drives the GPU is not starved when the workers use every core.
"""

from __future__ import annotations

import glob
import io
import logging
import os
from functools import partial
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from ..core.errors import ConfigError
from .dali import RESUME_NOTE as DALI_RESUME_NOTE
from .device_pipeline import CropGeometry, CroppedImages, DeviceImagePipeline, EncodedImages, WorkerCrop, collate_cropped, collate_encoded
from .samplers import EpochSpanningLoader, ResumableOrder
from .sources import IMAGE_ROOT_UNSET, detect_layout

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PIPELINES = ("cpu", "gpu", "nvjpeg", "dali")


def read_bytes(path: str) -> torch.Tensor:
    """The encoded file as a 1-D uint8 tensor (decoded later, on the device)."""
    from torchvision.io import read_file

    return read_file(path)


class ParquetImages(Dataset):
    """Rows of an HF image dataset (``image`` bytes + ``label``): decoded with PIL on access, or (``encoded``) handed
    to ``transform`` — or returned, without one — as the encoded file, a 1-D uint8 tensor."""

    def __init__(self, files: list[str], transform, encoded: bool = False):
        from datasets import Image as ImageFeature
        from datasets import load_dataset

        self.rows = load_dataset("parquet", data_files=files, split="train")
        if encoded:
            self.rows = self.rows.cast_column("image", ImageFeature(decode=False))
        self.transform, self.encoded = transform, encoded

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        from PIL import Image

        row = self.rows[i]
        image = row["image"]
        if self.encoded:
            data = torch.frombuffer(bytearray(image["bytes"]), dtype=torch.uint8)
            return (self.transform(data) if self.transform else data), row["label"]
        if isinstance(image, dict):  # undecoded {bytes, path}
            image = Image.open(io.BytesIO(image["bytes"]))
        return self.transform(image.convert("RGB")), row["label"]


class TolerantImages(Dataset):
    """A dataset of image files whose undecodable items are fatal (one error naming the file and the option), or —
    with ``skip`` — replaced by the next good item and counted (``skipped``, shared by the DataLoader workers)."""

    def __init__(self, dataset, skip: bool):
        import multiprocessing

        self.dataset, self.skip = dataset, skip
        self._skipped = multiprocessing.Value("i", 0)

    @property
    def skipped(self) -> int:
        return self._skipped.value

    def __getattr__(self, name: str):  # the wrapped dataset's attributes (classes, samples, transform, ...)
        if name in ("dataset", "skip", "_skipped"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        from PIL import UnidentifiedImageError

        for offset in range(len(self.dataset)):
            index = (i + offset) % len(self.dataset)
            try:
                return self.dataset[index]
            except (OSError, UnidentifiedImageError, RuntimeError, ValueError) as err:
                path = self.dataset.samples[index][0] if hasattr(self.dataset, "samples") else f"item {index}"
                if not self.skip:
                    raise ConfigError(
                        f"cannot decode image {path} ({type(err).__name__}: {err}); replace or remove the file, "
                        "or set data.skip_bad_images=true to skip (and count) undecodable images"
                    ) from None
                with self._skipped.get_lock():
                    self._skipped.value += 1
                log.warning("skipping undecodable image %s (%s)", path, err)
        raise ConfigError("no image of the dataset could be decoded")


def _lower_priority(increment: int, worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: raise the worker's nice value by ``increment``."""
    os.nice(increment)


class ImageFolderDataModule(ResumableOrder, L.LightningDataModule):
    """Folder-per-class (or HF parquet) images through timm's ``create_transform``.

    Train: RandomResizedCrop(``img_size``, bicubic) + flip + RandAugment ``auto_augment`` + random erasing
    ``re_prob``; eval: resize ``img_size / crop_pct`` (256 for 224) + center crop, bicubic.  ``batch_size``
    is per device.  ``pipeline``: ``cpu`` (workers decode and augment), ``gpu`` (workers decode + crop; the rest of
    the recipe batched on the training device) or ``nvjpeg`` (workers read bytes; all of it on the device).
    ``overlap`` (``gpu`` / ``nvjpeg``): the device half on a side CUDA stream, overlapping the running step.
    ``worker_nice``: added to the DataLoader workers' nice value (0: unchanged).

    ``span_epochs`` (default): the training batches come from one DataLoader iterator that runs across epochs
    (:class:`~mixbench.data.samplers.EpochSpanningLoader`), so the workers prefetch the next epoch's first batches
    while the current one ends — no stall at epoch starts — and the order is this module's own (epoch ``e`` =
    ``randperm(n, seed + e)``, each DDP rank a disjoint share), whose position is saved in checkpoints: a resumed run
    continues mid-epoch exactly (each sample's random augmentation is seeded by seed, epoch and index:
    :class:`~mixbench.data.samplers.SeededSamples`).  ``span_epochs=false``: a plain DataLoader per epoch (persistent workers, Lightning's
    DistributedSampler); a resumed run then restarts its epoch's order.  ``prefetch_factor``: batches each worker
    prepares ahead.
    """

    def __init__(
        self,
        root: str | None = None,
        train_dir: str = "train",
        val_dir: str = "val",
        img_size: int = 224,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 8,
        auto_augment: str | None = "rand-m9-mstd0.5-inc1",
        re_prob: float = 0.25,
        interpolation: str = "bicubic",
        crop_pct: float = 0.875,
        hflip: float = 0.5,
        color_jitter: float = 0.4,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        name: str | None = None,
        label: str | None = None,
        pipeline: str = "cpu",
        skip_bad_images: bool = False,
        overlap: bool = False,
        worker_nice: int = 0,
        span_epochs: bool = True,
        prefetch_factor: int = 2,
        seed: int = 0,
    ):
        super().__init__()
        if prefetch_factor < 1:
            raise ConfigError(f"data.prefetch_factor={prefetch_factor}: each worker must prepare at least one batch ahead")
        self.span_epochs, self.prefetch_factor, self.seed, self._resume = span_epochs, prefetch_factor, seed, None
        if pipeline not in PIPELINES:
            raise ConfigError(f"unknown data.pipeline={pipeline!r}; valid: {', '.join(PIPELINES)}")
        if pipeline == "dali":
            from .dali import import_dali

            import_dali()  # one clear error, before any data is read, when DALI is not installed
        if worker_nice < 0:
            raise ConfigError(f"data.worker_nice={worker_nice}: only a non-negative increment (lower worker priority) is allowed")
        self.pipeline, self.skip_bad_images, self.overlap, self.worker_nice = pipeline, skip_bad_images, overlap, worker_nice
        if root is None:
            raise ConfigError(IMAGE_ROOT_UNSET)
        self.root, self.train_dir, self.val_dir = Path(root).expanduser(), train_dir, val_dir
        self.img_size, self.batch_size, self.eval_batch_size = img_size, batch_size, eval_batch_size or batch_size
        self.num_workers = num_workers
        self.aug = dict(
            auto_augment=auto_augment,
            re_prob=re_prob,
            interpolation=interpolation,
            hflip=hflip,
            color_jitter=color_jitter,
            mean=tuple(mean),
            std=tuple(std),
        )
        self.crop_pct = crop_pct
        self.dataset_name = name or self.root.name
        self.dataset_label = label or f"image folders {self.root}"

    def geometry(self):
        return CropGeometry(self.img_size, self.crop_pct, self.aug["interpolation"])

    def device_pipeline(self):
        """The device half of the ``gpu`` / ``nvjpeg`` pipelines (built once)."""
        if not hasattr(self, "_device_pipeline"):
            self._device_pipeline = DeviceImagePipeline(
                self.geometry(),
                self.aug["auto_augment"],
                self.aug["re_prob"],
                self.aug["hflip"],
                self.aug["mean"],
                self.aug["std"],
                overlap=self.overlap,
            )
        return self._device_pipeline

    def transforms(self):
        """The workers' train / eval transforms."""
        if self.pipeline in ("nvjpeg", "dali"):  # the workers only read the files; DALI reads them itself
            return None, None
        if self.pipeline == "gpu":  # the workers decode and crop
            return WorkerCrop(self.geometry(), train=True), WorkerCrop(self.geometry(), train=False)
        from timm.data import create_transform

        train = create_transform(self.img_size, is_training=True, re_mode="pixel", re_count=1, **self.aug)
        val = create_transform(
            self.img_size,
            is_training=False,
            interpolation=self.aug["interpolation"],
            crop_pct=self.crop_pct,
            mean=self.aug["mean"],
            std=self.aug["std"],
        )
        return train, val

    def check_sources(self) -> None:
        """The folders or parquet files under ``data.root`` exist, as :meth:`setup` will look for them."""
        detect_layout(self.root, self.train_dir, self.val_dir)

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        train_tf, val_tf = self.transforms()
        self.layout = detect_layout(self.root, self.train_dir, self.val_dir)
        if self.layout == "folder":
            from torchvision.datasets import ImageFolder

            loader = {"loader": read_bytes} if self.pipeline != "cpu" else {}
            train_set = ImageFolder(str(self.root / self.train_dir), transform=train_tf, **loader)
            val_set = ImageFolder(str(self.root / self.val_dir), transform=val_tf, **loader)
            if train_set.classes != val_set.classes:
                raise ConfigError(f"{self.root}: the train and val folders have different classes")
            self.classes = train_set.classes
            self.train_set, self.val_set = TolerantImages(train_set, self.skip_bad_images), TolerantImages(val_set, self.skip_bad_images)
        else:
            train = sorted(glob.glob(str(self.root / "**" / "train-*.parquet"), recursive=True))
            val = sorted(glob.glob(str(self.root / "**" / "validation-*.parquet"), recursive=True))
            encoded = self.pipeline != "cpu"
            self.train_set, self.val_set = ParquetImages(train, train_tf, encoded), ParquetImages(val, val_tf, encoded)
            features = self.train_set.rows.features["label"]
            self.classes = list(getattr(features, "names", None) or range(max(self.train_set.rows["label"]) + 1))
        self.num_classes = len(self.classes)

    def describe(self) -> dict:
        return {
            "name": self.dataset_name,
            "label": self.dataset_label,
            "root": str(self.root),
            "layout": self.layout,
            "num_train": len(self.train_set),
            "num_val": len(self.val_set),
            "num_classes": self.num_classes,
            "image_size": self.img_size,
            "eval_crop_pct": self.crop_pct,
            "pipeline": self.pipeline,
            "skip_bad_images": self.skip_bad_images,
            "overlap": self.overlap,
            "worker_nice": self.worker_nice,
            "span_epochs": self.span_epochs,
            "prefetch_factor": self.prefetch_factor,
            "exact_resume": self.span_epochs and self.pipeline != "dali",
            **({"resume_note": DALI_RESUME_NOTE} if self.pipeline == "dali" else {}),
            "bad_images_skipped": sum(getattr(d, "skipped", 0) for d in (self.train_set, self.val_set)),
            **{f"aug_{k}": v for k, v in self.aug.items()},
        }

    def _loader_options(self, train: bool) -> dict:
        """DataLoader arguments: collate (device pipelines: with the train batches' draws), pinning, worker priority."""
        options = {"worker_init_fn": partial(_lower_priority, self.worker_nice)} if self.worker_nice else {}
        pin = {"pin_memory": torch.cuda.is_available()}
        if self.pipeline == "cpu":
            return options | pin

        draw = self.device_pipeline().draw if train else None
        if self.pipeline == "gpu":
            return options | pin | {"collate_fn": collate_cropped(train, draw)}
        return options | {"collate_fn": collate_encoded(train, draw)}  # nvJPEG reads the encoded bytes from host memory

    def train_dataloader(self) -> DataLoader | EpochSpanningLoader:
        if self.pipeline == "dali":
            from .dali import dali_loader

            return dali_loader(self, train=True)
        workers = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            workers |= {"persistent_workers": True, "prefetch_factor": self.prefetch_factor}
        if not self.span_epochs:
            return DataLoader(
                self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True, **workers, **self._loader_options(train=True)
            )
        return self._epoch_spanning_loader(self.train_set, **workers, **self._loader_options(train=True))

    def val_dataloader(self) -> DataLoader:
        if self.pipeline == "dali":
            from .dali import dali_loader

            return dali_loader(self, train=False)
        return DataLoader(
            self.val_set, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers, **self._loader_options(train=False)
        )

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        """``gpu`` / ``nvjpeg`` pipelines: finish the recipe on ``device``; otherwise Lightning's default."""

        if isinstance(batch, (CroppedImages, EncodedImages)):
            return self.device_pipeline()(batch, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
