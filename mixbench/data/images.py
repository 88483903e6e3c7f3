"""Image classification data from CIFAR-10 arrays: the subset embedded in the package, or any ``.npz`` with
``x`` (N, 32, 32, 3) uint8, ``y`` and ``classes`` (e.g. the official test set), split class-stratified."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from ..core.errors import ConfigError
from . import ASSETS_DIR
from .device_arrays import ArrayEvalLoader, ArrayTrainLoader, CropFlipDraws, DeviceArrays
from .device_pipeline import upload
from .samplers import EpochSpanningLoader, ResumableOrder
from .sources import CIFAR_PATH_UNSET, cifar_file

log = logging.getLogger(__name__)

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
PIPELINES = ("auto", "cpu", "gpu")
PAD = 4  # the train crop's zero border, as RandomCrop(32, padding=4)
GPU_DRAWS_NOTE = (
    "data.pipeline=gpu: crops and flips drawn per batch from (seed, epoch, rank, batch) on the host and applied batched on "
    "the device; the same distribution as data.pipeline=cpu (per sample, seeded by (seed, epoch, index)), other draws"
)


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


def stratified_split(labels: np.ndarray, val_per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a class-stratified split: ``val_per_class`` images of every class for validation."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        val.extend(idx[:val_per_class])
        train.extend(idx[val_per_class:])
    return np.sort(train), np.sort(val)


class CifarArrayDataModule(ResumableOrder, L.LightningDataModule):
    """CIFAR-10 images held in memory.

    ``path='embedded'``: the 1,600 train / 400 val images shipped with mixbench; otherwise an ``.npz`` with
    ``x, y, classes`` split with ``val_per_class`` validation images per class (split seed 0, fixed across
    runs).  ``img_size`` other than 32 resizes (bicubic) after augmentation.  Train augmentation: random
    crop with 4-px padding + horizontal flip (``augment``); CIFAR-10 mean/std normalization.
    ``batch_size`` is per device.  Training order: epoch ``e`` is ``randperm(n, seed + e)``, each DDP rank a disjoint
    share, served without a break between epochs; the position is saved in checkpoints, so a run resumed mid-epoch
    continues exactly as the uninterrupted one.

    ``pipeline``: ``cpu`` — DataLoader workers (``num_workers``) transform image by image, each sample's crop and flip
    seeded by (seed, epoch, index); ``gpu`` — the arrays live on the training device and each batch is transformed there,
    batched, in the main process (:mod:`mixbench.data.device_arrays`; no workers, ``num_workers`` unused), its crops and
    flips drawn per batch from (seed, epoch, rank, batch); ``auto`` (default) — ``gpu`` when the trainer's root device is
    CUDA, else ``cpu``.  ``gpu`` on a CPU device runs the same batched code on the CPU (what the CPU tests check).
    """

    num_classes = 10

    def __init__(
        self,
        path: str = "embedded",
        val_per_class: int = 200,
        img_size: int = 32,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        augment: bool = True,
        name: str | None = None,
        pipeline: str = "auto",
        seed: int = 0,
    ):
        super().__init__()
        if pipeline not in PIPELINES:
            raise ConfigError(f"unknown data.pipeline={pipeline!r} for CIFAR arrays; valid: {', '.join(PIPELINES)}")
        if path is None:
            raise ConfigError(CIFAR_PATH_UNSET)
        self.path, self.val_per_class, self.img_size = path, val_per_class, img_size
        self.batch_size, self.num_workers, self.augment = batch_size, num_workers, augment
        self.eval_batch_size = eval_batch_size or batch_size
        self.seed, self._resume = seed, None
        self.pipeline, self.pipeline_ran = pipeline, None  # pipeline_ran: cpu or gpu, once a loader is built
        self._on_device: dict[tuple[str, str], DeviceArrays] = {}
        self.dataset_name = name or ("cifar10_embedded" if path == "embedded" else "cifar10_" + Path(path).stem)

    def check_sources(self) -> None:
        """The ``.npz`` exists (the embedded arrays ship with the package)."""
        if self.path != "embedded":
            self._file()

    def _file(self) -> Path:
        return cifar_file(self.path)

    def _arrays(self):
        if self.path == "embedded":
            data = np.load(ASSETS_DIR / "cifar10_embedded.npz")
            return data["train_x"], data["train_y"], data["val_x"], data["val_y"], data["classes"]
        data = np.load(self._file())
        train, val = stratified_split(data["y"], self.val_per_class)
        return data["x"][train], data["y"][train], data["x"][val], data["y"][val], data["classes"]

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        train_x, train_y, val_x, val_y, classes = self._arrays()
        self.classes = [str(c) for c in classes]
        resize = [v2.Resize(self.img_size, interpolation=v2.InterpolationMode.BICUBIC, antialias=True)] if self.img_size != 32 else []
        normalize = [*resize, v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR_MEAN, CIFAR_STD)]
        train_tf = [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()] if self.augment else []
        self.train_set = ImageTensorDataset(train_x, train_y, v2.Compose(train_tf + normalize))
        self.val_set = ImageTensorDataset(val_x, val_y, v2.Compose(normalize))
        n_train, n_val = len(train_y), len(val_y)
        source = "embedded subset" if self.path == "embedded" else "test set split"
        self.dataset_label = f"CIFAR-10 {source} ({n_train} train / {n_val} val, {self.img_size}px)"

    def describe(self) -> dict:
        return {
            "name": self.dataset_name,
            "label": self.dataset_label,
            "num_train": len(self.train_set),
            "num_val": len(self.val_set),
            "source": "official CIFAR-10 test set (class-stratified split)",
            "path": str(self.path),
            "image_size": self.img_size,
            "train_augmentation": "random crop (pad 4) + horizontal flip" if self.augment else "none",
            "pipeline": self.pipeline_ran or self.pipeline,
            **({"augmentation_draws": GPU_DRAWS_NOTE} if self.pipeline_ran == "gpu" and self.augment else {}),
            "exact_resume": True,
        }

    def _device(self) -> torch.device:
        """The trainer's root device (Lightning sets the strategy up before it asks for loaders); the CPU without one."""
        trainer = getattr(self, "trainer", None)
        return trainer.strategy.root_device if trainer is not None else torch.device("cpu")

    def _on_gpu_pipeline(self, device: torch.device) -> bool:
        """Whether the loaders run the batched device pipeline on ``device`` (``auto``: on CUDA)."""
        ran = ("gpu" if device.type == "cuda" else "cpu") if self.pipeline == "auto" else self.pipeline
        if ran == "gpu" and device.type != "cuda" and self.pipeline_ran != "gpu":
            log.warning("data.pipeline=gpu on a %s device: the batched crop/flip/normalize runs there, in the main process", device)
        self.pipeline_ran = ran
        return ran == "gpu"

    def _device_arrays(self, split: str, device: torch.device) -> DeviceArrays:
        """``split``'s arrays on ``device`` (uploaded once; the train split with the crops' zero border)."""
        key = (split, str(device))
        if key not in self._on_device:
            dataset, pad = (self.train_set, PAD if self.augment else 0) if split == "train" else (self.val_set, 0)
            self._on_device[key] = DeviceArrays(dataset.images, dataset.labels, device, self.img_size, CIFAR_MEAN, CIFAR_STD, pad)
            log.info("CIFAR %s arrays on %s: %d images, batched transforms, no DataLoader workers", split, device, len(dataset))
        return self._on_device[key]

    def train_dataloader(self) -> EpochSpanningLoader | ArrayTrainLoader:
        device = self._device()
        if not self._on_gpu_pipeline(device):
            return self._epoch_spanning_loader(self.train_set, num_workers=self.num_workers)
        sampler = self._train_sampler(len(self.train_set))
        draws = CropFlipDraws(PAD, self.seed, sampler.rank) if self.augment else None
        return ArrayTrainLoader(self._device_arrays("train", device), sampler, self.batch_size, draws)

    def val_dataloader(self) -> DataLoader | ArrayEvalLoader:
        device = self._device()
        if not self._on_gpu_pipeline(device):
            return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers)
        shard = torch.tensor(list(self._val_sampler(len(self.val_set))), dtype=torch.long)
        return ArrayEvalLoader(self._device_arrays("val", device), upload(shard, device), self.eval_batch_size)
