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
  see :class:`BatchRandAugment`) → ToTensor + Normalize → timm ``RandomErasing`` (pixel mode) on the batch;
* eval: resize the short side to ``floor(img_size / crop_pct)`` (bicubic, antialiased) → center crop → Normalize.

Crop / resize run per image (every image has its own size); RandAugment, flip, normalize and erasing run on the
batch.  On a CPU device the same code runs, which is how the tests check it.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_image, decode_jpeg
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from ..errors import ConfigError

_JPEG_MAGIC = (0xFF, 0xD8)


@dataclass
class EncodedImages:
    """A batch as the workers hand it over: the encoded files concatenated in one uint8 CPU tensor (one shared-
    memory block per batch, not one per file) with their byte ``sizes``, and the labels."""

    flat: torch.Tensor
    sizes: list[int]
    labels: torch.Tensor
    train: bool

    @classmethod
    def from_files(cls, files: list[torch.Tensor], labels, train: bool) -> EncodedImages:
        return cls(torch.cat(files), [len(f) for f in files], torch.as_tensor(labels), train)

    @property
    def files(self) -> list[torch.Tensor]:
        return list(torch.split(self.flat, self.sizes))

    def __len__(self) -> int:
        return len(self.sizes)


@dataclass
class CroppedImages:
    """A batch the workers decoded and cropped: uint8 (n, 3, S, S) images and labels."""

    images: torch.Tensor
    labels: torch.Tensor
    train: bool

    def pin_memory(self) -> CroppedImages:
        return CroppedImages(self.images.pin_memory(), self.labels.pin_memory(), self.train)

    def __len__(self) -> int:
        return len(self.labels)


def collate_encoded(train: bool):
    def collate(samples) -> EncodedImages:
        return EncodedImages.from_files([s[0] for s in samples], [int(s[1]) for s in samples], train)

    return collate


def collate_cropped(train: bool):
    def collate(samples) -> CroppedImages:
        return CroppedImages(torch.stack([s[0] for s in samples]), torch.tensor([int(s[1]) for s in samples]), train)

    return collate


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
        return TF.resized_crop(image, top, left, h, w, [self.img_size, self.img_size], interpolation=InterpolationMode(self.interpolation),
                               antialias=True)

    def eval_crop(self, image: torch.Tensor) -> torch.Tensor:
        resized = TF.resize(image, [math.floor(self.img_size / self.crop_pct)], interpolation=InterpolationMode(self.interpolation), antialias=True)
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


def to_device(values, device, dtype=torch.float32) -> torch.Tensor:
    """A small host-made tensor on ``device`` without a stream sync: a copy from pageable memory would wait for the
    GPU to finish the previous training step; one from pinned memory is queued behind it instead."""
    tensor = torch.as_tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


# ---- RandAugment pixel functions on uint8 batches (n, 3, H, W) with one argument per image (shape (n,)) ----

def _per_image(arg: torch.Tensor) -> torch.Tensor:
    return arg.view(-1, 1, 1, 1)


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    """PIL's float → uint8: clip to [0, 255] and truncate."""
    return x.clamp(0, 255).to(torch.uint8)


def _blend(image: torch.Tensor, degenerate: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL ``ImageEnhance``: degenerate + factor · (image − degenerate)."""
    degenerate = degenerate.float()
    return _to_uint8(degenerate + _per_image(factor) * (image.float() - degenerate))


def _grayscale(image: torch.Tensor) -> torch.Tensor:
    """PIL ``convert('L')``: (299 R + 587 G + 114 B) / 1000, rounded."""
    r, g, b = image.float().unbind(1)
    return (0.299 * r + 0.587 * g + 0.114 * b).round().unsqueeze(1)


def color(image, factor, fill):
    return _blend(image, _grayscale(image).expand_as(image), factor)


def contrast(image, factor, fill):
    mean = _grayscale(image).mean(dim=(1, 2, 3), keepdim=True).add(0.5).floor()
    return _blend(image, mean.expand_as(image), factor)


def brightness(image, factor, fill):
    return _blend(image, torch.zeros_like(image), factor)


def sharpness(image, factor, fill):
    """Blend with PIL's SMOOTH filter (3×3 kernel [1 1 1; 1 5 1; 1 1 1] / 13); border pixels are kept."""
    kernel = torch.ones(3, 3, device=image.device)
    kernel[1, 1] = 5.0
    kernel = (kernel / kernel.sum()).expand(3, 1, 3, 3)
    smooth = image.float().clone()
    smooth[..., 1:-1, 1:-1] = F.conv2d(image.float(), kernel, groups=3).round()
    return _blend(image, smooth, factor)


def posterize(image, bits, fill):
    """Keep the ``bits`` most significant bits (0 bits gives black, as Pillow < 13 does)."""
    shift = (8 - _per_image(bits).to(torch.int32)).clamp(0, 8)
    mask = ((255 << shift) & 255).to(torch.uint8)
    return image & mask


def solarize(image, threshold, fill):
    return torch.where(image >= _per_image(threshold), 255 - image, image)


def solarize_add(image, add, fill, threshold: int = 128):
    added = _to_uint8(image.float() + _per_image(add))
    return torch.where(image < threshold, added, image)


def auto_contrast(image, arg, fill):
    """Stretch each channel's [min, max] to [0, 255]; constant channels are left alone."""
    lo = image.amin(dim=(2, 3), keepdim=True).float()
    hi = image.amax(dim=(2, 3), keepdim=True).float()
    scale = torch.where(hi > lo, 255.0 / (hi - lo).clamp(min=1), torch.ones_like(hi))
    lo = torch.where(hi > lo, lo, torch.zeros_like(lo))
    return _to_uint8((image.float() - lo) * scale)


def equalize(image, arg, fill):
    return TF.equalize(image)


def invert(image, arg, fill):
    return 255 - image


def _affine(image: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """PIL ``Image.transform(AFFINE)`` for a batch: ``matrix`` (n, 2, 3) maps output pixel coordinates (pixel
    centres at +0.5) to input coordinates; bicubic sampling, points outside the input take ``fill``."""
    n, _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=image.device) + 0.5, torch.arange(w, device=image.device) + 0.5, indexing="ij")
    points = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).view(1, h * w, 3)
    source = points @ matrix.transpose(1, 2)  # (n, h*w, 2) input coordinates
    inside = ((source[..., 0] >= 0) & (source[..., 0] < w) & (source[..., 1] >= 0) & (source[..., 1] < h)).view(n, 1, h, w)
    grid = torch.stack([2 * source[..., 0] / w - 1, 2 * source[..., 1] / h - 1], dim=-1).view(n, h, w, 2)
    sampled = F.grid_sample(image.float(), grid, mode="bicubic", padding_mode="border", align_corners=False)
    return torch.where(inside, sampled.round().clamp(0, 255), fill.view(1, 3, 1, 1).float()).to(torch.uint8)


def _matrix(n: int, device, a=1.0, b=0.0, c=0.0, d=0.0, e=1.0, f=0.0) -> torch.Tensor:
    """(n, 2, 3) affine matrices [[a, b, c], [d, e, f]]; each entry a scalar or a per-image tensor."""
    rows = [v.float() if isinstance(v, torch.Tensor) else torch.full((n,), float(v), device=device) for v in (a, b, c, d, e, f)]
    return torch.stack(rows, dim=-1).view(n, 2, 3)


def rotate(image, degrees, fill):
    """PIL ``rotate(degrees)``: counter-clockwise about the image centre."""
    n, _, h, w = image.shape
    angle = -torch.deg2rad(degrees.float())
    cos, sin = torch.cos(angle), torch.sin(angle)
    cx, cy = w / 2.0, h / 2.0
    return _affine(image, _matrix(n, image.device, cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy), fill)


def shear_x(image, factor, fill):
    return _affine(image, _matrix(len(image), image.device, b=factor.float()), fill)


def shear_y(image, factor, fill):
    return _affine(image, _matrix(len(image), image.device, d=factor.float()), fill)


def translate_x_rel(image, pct, fill):
    return _affine(image, _matrix(len(image), image.device, c=pct.float() * image.shape[-1]), fill)


def translate_y_rel(image, pct, fill):
    return _affine(image, _matrix(len(image), image.device, f=pct.float() * image.shape[-2]), fill)


# timm op name -> batched pixel function (its argument is timm's level_fn output)
BATCH_OPS = {
    "AutoContrast": auto_contrast, "Equalize": equalize, "Invert": invert, "Rotate": rotate,
    "Posterize": posterize, "PosterizeIncreasing": posterize, "PosterizeOriginal": posterize,
    "Solarize": solarize, "SolarizeIncreasing": solarize, "SolarizeAdd": solarize_add,
    "Color": color, "ColorIncreasing": color, "Contrast": contrast, "ContrastIncreasing": contrast,
    "Brightness": brightness, "BrightnessIncreasing": brightness, "Sharpness": sharpness, "SharpnessIncreasing": sharpness,
    "ShearX": shear_x, "ShearY": shear_y, "TranslateXRel": translate_x_rel, "TranslateYRel": translate_y_rel,
}


class BatchRandAugment:
    """timm's RandAugment (``rand-m9-mstd0.5-inc1`` etc.) for a uint8 batch: per image and layer an op is drawn
    (uniformly with replacement, or timm's weights without), applied with the op's probability at a magnitude
    drawn as timm does (``gauss(m, mstd)`` clipped to [0, mmax]), its argument from timm's own ``level_fn``;
    images that drew the same op are transformed together."""

    def __init__(self, config: str, img_size: int, mean):
        from timm.data.auto_augment import rand_augment_transform

        hparams = dict(translate_const=int(img_size * 0.45), img_mean=tuple(min(255, round(255 * m)) for m in mean))
        timm_ra = rand_augment_transform(config, hparams)
        unsupported = sorted({op.name for op in timm_ra.ops} - set(BATCH_OPS))
        if unsupported:
            raise ConfigError(f"RandAugment ops {unsupported} of {config!r} have no batched version; use data.pipeline=cpu")
        self.ops, self.num_layers, self.weights = timm_ra.ops, timm_ra.num_layers, timm_ra.choice_weights
        self.fill = torch.tensor(hparams["img_mean"], dtype=torch.float32)

    def _draw(self, op) -> tuple | None:
        """timm ``AugmentOp.__call__`` without the image: None (skipped) or the op's arguments."""
        if op.prob < 1.0 and random.random() > op.prob:
            return None
        magnitude = op.magnitude
        if op.magnitude_std == float("inf"):
            magnitude = random.uniform(0, magnitude)
        elif op.magnitude_std > 0:
            magnitude = random.gauss(magnitude, op.magnitude_std)
        magnitude = max(0.0, min(magnitude, op.magnitude_max or 10.0))
        return op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n = len(images)
        fill = to_device(self.fill, images.device)
        # per image: num_layers ops, as timm draws them (with replacement unless weighted)
        choices = [np.random.choice(len(self.ops), self.num_layers, replace=self.weights is None, p=self.weights) for _ in range(n)]
        for layer in range(self.num_layers):
            groups: dict[int, tuple[list[int], list[float]]] = {}
            for i, k in enumerate(row[layer] for row in choices):
                args = self._draw(self.ops[k])
                if args is not None:
                    index, values = groups.setdefault(int(k), ([], []))
                    index.append(i)
                    values.append(float(args[0]) if args else 0.0)
            for k, (index, values) in groups.items():
                idx = to_device(index, images.device, torch.long)
                arg = to_device(values, images.device)
                images[idx] = BATCH_OPS[self.ops[k].name](images[idx], arg, fill)
        return images


class DeviceImagePipeline:
    """Turns a worker batch (:class:`CroppedImages` or :class:`EncodedImages`) into normalized float images on
    ``device``: train batches get flip → RandAugment → normalize → random erasing, eval batches normalize."""

    def __init__(self, geometry: CropGeometry = CropGeometry(), auto_augment: str | None = "rand-m9-mstd0.5-inc1", re_prob: float = 0.25,
                 hflip: float = 0.5, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
        self.geometry, self.hflip, self.re_prob = geometry, hflip, re_prob
        self.mean = torch.tensor(mean).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(std).view(1, 3, 1, 1) * 255
        self._on_device: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.rand_augment = BatchRandAugment(auto_augment, geometry.img_size, mean) if auto_augment else None

    def augment(self, batch: torch.Tensor) -> torch.Tensor:
        """Horizontal flip (per image) and RandAugment on a uint8 batch."""
        flip = to_device([random.random() < self.hflip for _ in range(len(batch))], batch.device, torch.bool).view(-1, 1, 1, 1)
        batch = torch.where(flip, batch.flip(-1), batch)
        return self.rand_augment(batch) if self.rand_augment is not None else batch

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        key = str(images.device)
        if key not in self._on_device:  # copied once per device
            self._on_device[key] = (self.mean.to(images.device), self.std.to(images.device))
        mean, std = self._on_device[key]
        return (images.float() - mean) / std

    def uint8_batch(self, batch: CroppedImages | EncodedImages, device) -> torch.Tensor:
        if isinstance(batch, CroppedImages):
            return batch.images.to(device, non_blocking=True)
        crop = self.geometry.train_crop if batch.train else self.geometry.eval_crop
        return torch.stack([crop(image) for image in decode_batch(batch.files, device)])

    def __call__(self, batch: CroppedImages | EncodedImages, device) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = self.uint8_batch(batch, device), batch.labels.to(device, non_blocking=True)
        if not batch.train:
            return self.normalize(images), labels
        x = self.normalize(self.augment(images))
        if self.re_prob > 0:
            from timm.data.random_erasing import RandomErasing

            x = RandomErasing(self.re_prob, mode="pixel", max_count=1, device=x.device)(x)
        return x, labels
