"""The ImageNet recipe with its augmentation on the training device, so 16 CPU cores can feed an H100.

Two splits of the work between DataLoader workers and the GPU (``data.pipeline``):

* ``gpu``: workers decode (libjpeg-turbo) and random-resized-crop to ``img_size`` in uint8
  (:class:`WorkerCrop`); flip, RandAugment, normalize and random erasing run on the batch on the GPU;
* ``nvjpeg``: workers only read the files; decode (nvJPEG through ``torchvision.io.decode_jpeg``), crop and
  the rest run on the GPU.

Same semantics as ``timm.data.create_transform`` (the ``cpu`` pipeline), in the same order:

* train: RandomResizedCrop(``img_size``, scale (0.08, 1), ratio (3/4, 4/3), bicubic) with timm's own
  ``get_params`` → horizontal flip → RandAugment (timm's parsed ops: op set, per-op probability, magnitude
  noise and level → argument mapping are timm's; only the pixel functions are re-written for uint8 batches,
  see :mod:`mixbench.data.randaugment`) → ToTensor + Normalize → timm ``RandomErasing`` (pixel mode, one box);
* eval: resize the short side to ``floor(img_size / crop_pct)`` (bicubic, antialiased) → center crop → Normalize.

Every random draw of the train recipe (flip, RandAugment, erasing box) is made on the host as timm makes it — in the
DataLoader workers, by the collate function (:class:`RecipeDraws`) — and shipped with the batch, so the device half is
a short, fixed sequence of batched kernels with no host sync and no per-image Python loop.  With ``overlap`` it runs
on a side CUDA stream: the copy and augmentation of batch n+1 overlap the training step of batch n.

Crop / resize run per image (every image has its own size); the rest runs on the batch.  On a CPU device the same
code runs, which is how the tests check it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from functools import partial

import numpy as np
import torch
from torch.utils.data import default_collate
from torchvision.io import ImageReadMode, decode_image, decode_jpeg
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from .randaugment import BatchRandAugment, RandAugmentDraws

_JPEG_MAGIC = (0xFF, 0xD8)


def upload(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` on ``device`` without a stream sync: a copy from pageable memory would wait for the GPU to finish the
    previous training step; one from pinned memory is queued behind it instead."""
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)


def _map_tensors(obj, fn, keep: tuple[str, ...] = ()):
    """A copy of dataclass ``obj`` with ``fn`` applied to its tensor and dataclass fields (recursively), except the
    fields named in ``keep``."""

    def one(name, value):
        if name in keep:
            return value
        if isinstance(value, torch.Tensor):
            return fn(value)
        return _map_tensors(value, fn, keep) if hasattr(value, "__dataclass_fields__") else value

    return replace(obj, **{f.name: one(f.name, getattr(obj, f.name)) for f in fields(obj)})


@dataclass
class TrainDraws:
    """The random draws of one train batch: per image ``flip`` (bool), the RandAugment draws (or None) and the
    erasing box as ``erase`` (n, 4) int64 (top, left, h, w; zeros for an image that is not erased), made into
    :func:`box_masks` on the device."""

    flip: torch.Tensor
    rand_augment: RandAugmentDraws | None
    erase: torch.Tensor

    def pin_memory(self) -> TrainDraws:
        return _map_tensors(self, torch.Tensor.pin_memory)

    def to(self, device) -> TrainDraws:
        """On ``device``, except the RandAugment group sizes, which the host reads."""
        return _map_tensors(self, lambda t: upload(t, device), keep=("counts",))


def erase_boxes(eraser, n: int, img_h: int, img_w: int, rng: np.random.Generator, attempts: int = 10) -> torch.Tensor:
    """timm ``RandomErasing._erase``'s box rule (one box) for ``n`` images in a few batched NumPy draws from ``rng``, no
    Python loop per image: erase with probability p; up to ``attempts`` tries of an area U(min, max) · h · w and a
    log-aspect U(log_aspect_ratio), the first that fits; top and left uniform.  The distribution of :func:`erase_box`, not
    its draws.  (n, 4) int64 (top, left, h, w), zeros for an image not erased.

    NumPy, not torch: torch's CPU exp and sqrt split more than 2,048 elements over its OpenMP threads, which spin on
    after each step's draws on the cores of DALI's decoding threads — the likely cause of a DALI loader twice as slow on
    an H200 (docs/speed.md#dali-hand-over); NumPy's element-wise functions run in the calling thread."""
    area = rng.uniform(eraser.min_area, eraser.max_area, size=(n, attempts)) * (img_h * img_w)
    aspect = np.exp(rng.uniform(*eraser.log_aspect_ratio, size=(n, attempts)))
    h, w = np.rint(np.sqrt(area * aspect)).astype(np.int64), np.rint(np.sqrt(area / aspect)).astype(np.int64)
    fits = (h < img_h) & (w < img_w)
    first = fits.argmax(axis=1)[:, None]  # the first attempt that fits
    h, w = np.take_along_axis(h, first, 1)[:, 0], np.take_along_axis(w, first, 1)[:, 0]
    top = np.floor(rng.random(n) * (img_h - h + 1)).astype(np.int64)
    left = np.floor(rng.random(n) * (img_w - w + 1)).astype(np.int64)
    erased = fits.any(axis=1) & (rng.random(n) <= eraser.probability)
    return torch.from_numpy(np.stack([top, left, h, w], axis=1) * erased[:, None])


def box_masks(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(n, height + width) bool on ``boxes``' device: the rows, then the columns, that each image's box (top, left, h, w)
    covers, as :func:`erase` uses them (made where the boxes are: on the device, after a 32-byte upload an image)."""
    top, left, h, w = boxes.T.unsqueeze(-1)  # each (n, 1)
    rows = torch.arange(height, device=boxes.device)
    cols = torch.arange(width, device=boxes.device)
    return torch.cat([(rows >= top) & (rows < top + h), (cols >= left) & (cols < left + w)], dim=1)


def erase_box(eraser, img_h: int, img_w: int) -> tuple[int, int, int, int]:
    """timm ``RandomErasing._erase``'s draws (one box) for one image: (top, left, h, w), zeros when it erases nothing."""
    if random.random() > eraser.probability:
        return 0, 0, 0, 0
    for _ in range(10):
        target_area = random.uniform(eraser.min_area, eraser.max_area) * img_h * img_w
        aspect_ratio = math.exp(random.uniform(*eraser.log_aspect_ratio))
        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))
        if w < img_w and h < img_h:
            return random.randint(0, img_h - h), random.randint(0, img_w - w), h, w
    return 0, 0, 0, 0


class RecipeDraws:
    """The host half of the train recipe: called with a batch size, makes the batch's :class:`TrainDraws` (timm's RNG use:
    ``random`` for flip, op probability / magnitude and erasing, ``np.random`` for the RandAugment op choice)."""

    def __init__(self, rand_augment: BatchRandAugment | None, hflip: float, re_prob: float, img_size: int):
        from timm.data.random_erasing import RandomErasing

        self.rand_augment, self.hflip, self.img_size = rand_augment, hflip, img_size
        self.eraser = RandomErasing(re_prob, mode="pixel", max_count=1, device="cpu")

    def __call__(self, n: int) -> TrainDraws:
        flip = torch.tensor([random.random() < self.hflip for _ in range(n)])
        rand_augment = self.rand_augment.draw(n) if self.rand_augment is not None else None
        boxes = torch.tensor([erase_box(self.eraser, self.img_size, self.img_size) for _ in range(n)], dtype=torch.long).view(n, 4)
        return TrainDraws(flip, rand_augment, boxes)


@dataclass
class EncodedImages:
    """A batch as the workers hand it over: the encoded files concatenated in one uint8 CPU tensor (one shared-
    memory block per batch, not one per file) with their byte ``sizes``, the labels and (train) the draws."""

    flat: torch.Tensor
    sizes: list[int]
    labels: torch.Tensor
    train: bool
    draws: TrainDraws | None = None

    @classmethod
    def from_files(cls, files: list[torch.Tensor], labels, train: bool, draws: TrainDraws | None = None) -> EncodedImages:
        return cls(torch.cat(files), [len(f) for f in files], torch.as_tensor(labels), train, draws)

    @property
    def files(self) -> list[torch.Tensor]:
        return list(torch.split(self.flat, self.sizes))

    def __len__(self) -> int:
        return len(self.sizes)


@dataclass
class CroppedImages:
    """A batch the workers decoded and cropped: uint8 (n, 3, S, S) images, labels and (train) the draws."""

    images: torch.Tensor
    labels: torch.Tensor
    train: bool
    draws: TrainDraws | None = None

    def pin_memory(self) -> CroppedImages:
        return _map_tensors(self, torch.Tensor.pin_memory)

    def __len__(self) -> int:
        return len(self.labels)


def _collate(batch_type, train: bool, draw, samples):
    """Worker-side collate: images stacked (in shared memory), labels, and the batch's draws when ``draw`` is given."""
    images = [s[0] for s in samples]
    labels = torch.tensor([int(s[1]) for s in samples])
    draws = draw(len(samples)) if draw is not None else None
    if batch_type is EncodedImages:
        return EncodedImages.from_files(images, labels, train, draws)
    return CroppedImages(default_collate(images), labels, train, draws)


def collate_encoded(train: bool, draw: RecipeDraws | None = None):
    return partial(_collate, EncodedImages, train, draw)


def collate_cropped(train: bool, draw: RecipeDraws | None = None):
    return partial(_collate, CroppedImages, train, draw)


@dataclass(frozen=True)
class CropGeometry:
    """timm's train crop (RandomResizedCrop with its ``get_params``) and eval crop (resize the short side to
    ``floor(img_size / crop_pct)``, center crop) on uint8 CHW tensors, antialiased, rounded as torchvision does."""

    img_size: int = 224
    crop_pct: float = 0.875
    interpolation: str = "bicubic"
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3 / 4, 4 / 3)

    def train_crop(self, image: torch.Tensor) -> torch.Tensor:
        from timm.data.transforms import RandomResizedCropAndInterpolation

        top, left, h, w = RandomResizedCropAndInterpolation.get_params(image, self.scale, self.ratio)
        return TF.resized_crop(
            image, top, left, h, w, [self.img_size, self.img_size], interpolation=InterpolationMode(self.interpolation), antialias=True
        )

    def eval_crop(self, image: torch.Tensor) -> torch.Tensor:
        resized = TF.resize(
            image, [math.floor(self.img_size / self.crop_pct)], interpolation=InterpolationMode(self.interpolation), antialias=True
        )
        return TF.center_crop(resized, [self.img_size])


class WorkerCrop:
    """DataLoader-worker transform of the ``gpu`` pipeline: encoded file → RGB uint8 → train or eval crop."""

    def __init__(self, geometry: CropGeometry, train: bool):
        self.geometry, self.train = geometry, train

    def __call__(self, encoded: torch.Tensor) -> torch.Tensor:
        image = decode_image(encoded, mode=ImageReadMode.RGB)
        return self.geometry.train_crop(image) if self.train else self.geometry.eval_crop(image)


def decode_batch(encoded: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """RGB uint8 CHW images on ``device``: JPEGs in one batched ``decode_jpeg`` call, other formats on the CPU."""
    device = torch.device(device)
    is_jpeg = [len(e) > 2 and (int(e[0]), int(e[1])) == _JPEG_MAGIC for e in encoded]
    out: list[torch.Tensor | None] = [None] * len(encoded)
    jpegs = [i for i, j in enumerate(is_jpeg) if j]
    if jpegs:
        try:
            decoded = decode_jpeg([encoded[i] for i in jpegs], mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # e.g. a CMYK or progressive file the device decoder rejects: decode those on the CPU
            decoded = [decode_image(encoded[i], mode=ImageReadMode.RGB).to(device) for i in jpegs]
        for i, image in zip(jpegs, decoded):
            out[i] = image
    for i in (i for i, j in enumerate(is_jpeg) if not j):
        out[i] = decode_image(encoded[i], mode=ImageReadMode.RGB).to(device)
    return out


def erase(images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """timm ``RandomErasing`` (pixel mode) on a float batch: the pixels of each image's box — ``boxes``, (n, 4) int64
    (top, left, h, w) on the images' device, made into row and column masks by :func:`box_masks` — get N(0, 1) noise."""
    height, width = images.shape[-2:]
    masks = box_masks(boxes, height, width)
    inside = masks[:, None, :height, None] & masks[:, None, None, height:]
    return torch.where(inside, torch.randn_like(images), images)


class DeviceImagePipeline:
    """Turns a worker batch (:class:`CroppedImages` or :class:`EncodedImages`) into normalized float images on
    ``device``: train batches get flip → RandAugment → normalize → random erasing, eval batches normalize.

    ``draw`` is the host half (hand it to the workers' collate); a train batch that comes without draws is drawn
    for here.  ``overlap``: on a CUDA device, run on a side stream that the caller's stream waits for, so the
    copy and augmentation of the next batch overlap the step still running on the current one."""

    def __init__(
        self,
        geometry: CropGeometry = CropGeometry(),
        auto_augment: str | None = "rand-m9-mstd0.5-inc1",
        re_prob: float = 0.25,
        hflip: float = 0.5,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        overlap: bool = False,
    ):
        self.geometry, self.overlap = geometry, overlap
        std = torch.tensor(std).view(1, 3, 1, 1) * 255
        self.scale, self.shift = 1 / std, -torch.tensor(mean).view(1, 3, 1, 1) * 255 / std  # normalize: x · scale + shift
        self.rand_augment = BatchRandAugment(auto_augment, geometry.img_size, mean) if auto_augment else None
        self.draw = RecipeDraws(self.rand_augment, hflip, re_prob, geometry.img_size)
        self._on_device: dict[str, tuple[torch.Tensor, ...]] = {}
        self._streams: dict[str, torch.cuda.Stream] = {}

    def _constants(self, device) -> tuple[torch.Tensor, ...]:
        """(scale, shift, RandAugment fill) on ``device``, copied once per device."""
        key = str(device)
        if key not in self._on_device:
            fill = self.rand_augment.fill if self.rand_augment is not None else torch.zeros(3)
            self._on_device[key] = tuple(upload(t, device) for t in (self.scale, self.shift, fill))
        return self._on_device[key]

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        scale, shift, _ = self._constants(images.device)
        return torch.addcmul(shift, images, scale)

    def augment(self, images: torch.Tensor, draws: TrainDraws) -> torch.Tensor:
        """Horizontal flip and RandAugment on a uint8 batch, by ``draws`` (on the same device)."""
        images = torch.where(draws.flip.view(-1, 1, 1, 1), images.flip(-1), images)
        if self.rand_augment is None:
            return images
        return self.rand_augment.apply(images, draws.rand_augment, self._constants(images.device)[2])

    def uint8_batch(self, batch: CroppedImages | EncodedImages, device) -> torch.Tensor:
        if isinstance(batch, CroppedImages):
            return upload(batch.images, device)
        crop = self.geometry.train_crop if batch.train else self.geometry.eval_crop
        return torch.stack([crop(image) for image in decode_batch(batch.files, device)])

    def finish(self, batch: CroppedImages | EncodedImages, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The device half on the current stream."""
        images, labels = self.uint8_batch(batch, device), upload(batch.labels, device)
        if not batch.train:
            return self.normalize(images), labels
        draws = (batch.draws if batch.draws is not None else self.draw(len(batch))).to(device)
        x = self.normalize(self.augment(images, draws))
        if self.draw.eraser.probability == 0:
            return x, labels
        return erase(x, draws.erase), labels

    def __call__(self, batch: CroppedImages | EncodedImages, device) -> tuple[torch.Tensor, torch.Tensor]:
        device = torch.device(device)
        if not (self.overlap and device.type == "cuda"):
            return self.finish(batch, device)
        current = torch.cuda.current_stream(device)
        if str(device) not in self._streams:
            self._streams[str(device)] = torch.cuda.Stream(device)
        side = self._streams[str(device)]
        with torch.cuda.stream(side):
            out = self.finish(batch, device)
        current.wait_stream(side)
        for tensor in out:  # made on the side stream, used on the current one: not reused before that use ends
            tensor.record_stream(current)
        return out
