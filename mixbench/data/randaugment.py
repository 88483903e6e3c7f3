"""timm's RandAugment for uint8 image batches on the training device, split in two halves.

* :meth:`BatchRandAugment.draw` (host, in the DataLoader workers): per image and layer the op, whether it applies
  and its argument, drawn exactly as timm's ``RandAugment`` / ``AugmentOp`` draw them (op set, per-op probability,
  magnitude noise, timm's own ``level_fn``); images are ordered by op so each op's images are one slice.
* :meth:`BatchRandAugment.apply` (device): per layer one gather of the images that drew an op, the op's pixel
  function on each slice (the five affine ops as one bicubic resampling with a per-image matrix), one scatter back.
  No host synchronisation, no per-image Python loop.

Only the pixel functions are re-written (PIL semantics on uint8 batches, one argument per image); the tests compare
each with timm's PIL op.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

from ..core.errors import ConfigError


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
    centre = F.pad(torch.full((1, 1), 4.0, device=image.device), (1, 1, 1, 1))  # no host value written: no sync
    kernel = ((torch.ones(3, 3, device=image.device) + centre) / 13).expand(3, 1, 3, 3)
    smooth = image.float()
    smooth[..., 1:-1, 1:-1] = F.conv2d(smooth, kernel, groups=3).round()
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


def affine(image: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """PIL ``Image.transform(AFFINE)`` for a batch: ``matrix`` (n, 2, 3) maps output pixel coordinates (pixel
    centres at +0.5) to input coordinates; bicubic sampling, points outside the input take ``fill``."""
    n, _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=image.device) + 0.5, torch.arange(w, device=image.device) + 0.5, indexing="ij")
    points = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).view(1, h * w, 3)
    source = points @ matrix.transpose(1, 2)  # (n, h*w, 2) input coordinates
    inside = ((source[..., 0] >= 0) & (source[..., 0] < w) & (source[..., 1] >= 0) & (source[..., 1] < h)).view(n, 1, h, w)
    grid = torch.stack([source[..., 0] * (2 / w) - 1, source[..., 1] * (2 / h) - 1], dim=-1).view(n, h, w, 2)  # no host tensor: no sync
    sampled = F.grid_sample(image.float(), grid, mode="bicubic", padding_mode="border", align_corners=False)
    return torch.where(inside, sampled.round().clamp(0, 255), fill.view(1, 3, 1, 1).float()).to(torch.uint8)


def affine_matrix(name: str, arg: float, h: int, w: int) -> tuple[float, ...]:
    """The PIL affine coefficients (a, b, c, d, e, f) of timm's geometric op ``name`` with argument ``arg`` on an
    h × w image (``rotate``: counter-clockwise about the image centre, as PIL's ``rotate``)."""
    if name == "Rotate":
        angle = -math.radians(arg)
        cos, sin = math.cos(angle), math.sin(angle)
        cx, cy = w / 2.0, h / 2.0
        return cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy
    return {
        "ShearX": (1, arg, 0, 0, 1, 0),
        "ShearY": (1, 0, 0, arg, 1, 0),
        "TranslateXRel": (1, 0, arg * w, 0, 1, 0),
        "TranslateYRel": (1, 0, 0, 0, 1, arg * h),
    }[name]


AFFINE_OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")

# timm op name -> batched pixel function (its argument is timm's level_fn output); the affine ops resample once
PIXEL_OPS = {
    "AutoContrast": auto_contrast,
    "Equalize": equalize,
    "Invert": invert,
    "Posterize": posterize,
    "PosterizeIncreasing": posterize,
    "PosterizeOriginal": posterize,
    "Solarize": solarize,
    "SolarizeIncreasing": solarize,
    "SolarizeAdd": solarize_add,
    "Color": color,
    "ColorIncreasing": color,
    "Contrast": contrast,
    "ContrastIncreasing": contrast,
    "Brightness": brightness,
    "BrightnessIncreasing": brightness,
    "Sharpness": sharpness,
    "SharpnessIncreasing": sharpness,
}


def apply_op(name: str, image: torch.Tensor, arg: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """timm op ``name`` on a uint8 batch, one (timm ``level_fn``) argument per image."""
    if name in AFFINE_OPS:
        h, w = image.shape[-2:]
        matrix = torch.tensor([affine_matrix(name, float(a), h, w) for a in arg], device=image.device).view(-1, 2, 3)
        return affine(image, matrix, fill)
    return PIXEL_OPS[name](image, arg, fill)


@dataclass
class RandAugmentDraws:
    """One batch's draws, per layer: ``index`` (layers, n), the images that drew an op, ordered by op group (the
    rest after them); ``params`` (layers, n, 6), per ordered image its affine matrix or its argument in ``[..., 0]``;
    ``counts`` (layers, groups), how many images each group has (host tensor, read without a device sync)."""

    index: torch.Tensor
    params: torch.Tensor
    counts: torch.Tensor


class BatchRandAugment:
    """timm's RandAugment (``rand-m9-mstd0.5-inc1`` etc.) for a uint8 batch: per image and layer an op is drawn
    (uniformly with replacement, or timm's weights without), applied with the op's probability at a magnitude
    drawn as timm does (``gauss(m, mstd)`` clipped to [0, mmax]), its argument from timm's own ``level_fn``;
    images that drew the same op (any of the affine ops) are transformed together."""

    def __init__(self, config: str, img_size: int, mean):
        from timm.data.auto_augment import rand_augment_transform

        hparams = dict(translate_const=int(img_size * 0.45), img_mean=tuple(min(255, round(255 * m)) for m in mean))
        timm_ra = rand_augment_transform(config, hparams)
        unsupported = sorted({op.name for op in timm_ra.ops} - set(PIXEL_OPS) - set(AFFINE_OPS))
        if unsupported:
            raise ConfigError(f"RandAugment ops {unsupported} of {config!r} have no batched version; use data.pipeline=cpu")
        self.ops, self.num_layers, self.weights, self.img_size = timm_ra.ops, timm_ra.num_layers, timm_ra.choice_weights, img_size
        self.fill = torch.tensor(hparams["img_mean"], dtype=torch.float32)
        # op groups: one per pixel function, one for all affine ops
        self.groups = list(dict.fromkeys("affine" if op.name in AFFINE_OPS else PIXEL_OPS[op.name] for op in self.ops))
        self.group_of = [self.groups.index("affine" if op.name in AFFINE_OPS else PIXEL_OPS[op.name]) for op in self.ops]

    def _draw_args(self, op) -> tuple | None:
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

    def _params(self, op, args: tuple) -> tuple[float, ...]:
        arg = float(args[0]) if args else 0.0
        if op.name in AFFINE_OPS:
            return affine_matrix(op.name, arg, self.img_size, self.img_size)
        return arg, 0.0, 0.0, 0.0, 0.0, 0.0

    def draw(self, n: int) -> RandAugmentDraws:
        """The draws of ``n`` images (host; timm's RNG use: ``np.random`` for the ops, ``random`` for the rest)."""
        choices = (
            np.random.randint(len(self.ops), size=(n, self.num_layers))
            if self.weights is None  # = choice with replacement
            else np.stack([np.random.choice(len(self.ops), self.num_layers, replace=False, p=self.weights) for _ in range(n)])
        )
        index = np.zeros((self.num_layers, n), np.int64)
        params = np.zeros((self.num_layers, n, 6), np.float32)
        counts = np.zeros((self.num_layers, len(self.groups)), np.int64)
        for layer in range(self.num_layers):
            drawn = [
                (self.group_of[k], i, args) for i, k in enumerate(choices[:, layer]) if (args := self._draw_args(self.ops[k])) is not None
            ]
            drawn.sort(key=lambda d: d[0])  # stable: images of a group stay in batch order
            for j, (group, i, args) in enumerate(drawn):
                index[layer, j] = i
                params[layer, j] = self._params(self.ops[choices[i, layer]], args)
                counts[layer, group] += 1
        return RandAugmentDraws(torch.from_numpy(index), torch.from_numpy(params), torch.from_numpy(counts))

    def apply(self, images: torch.Tensor, draws: RandAugmentDraws, fill: torch.Tensor) -> torch.Tensor:
        """``images`` (uint8, on the device) transformed in place by ``draws`` (``index`` / ``params`` on the device)."""
        for layer, counts in enumerate(draws.counts.tolist()):
            bounds = np.cumsum([0, *counts]).tolist()
            if bounds[-1] == 0:
                continue
            index, params = draws.index[layer, : bounds[-1]], draws.params[layer]
            picked = images.index_select(0, index)
            for group, start, end in zip(self.groups, bounds[:-1], bounds[1:]):
                if end > start:
                    part, arg = picked[start:end], params[start:end]
                    part.copy_(affine(part, arg.view(-1, 2, 3), fill) if group == "affine" else group(part, arg[:, 0], fill))
            images.index_copy_(0, index, picked)
        return images

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Draw and apply in one call (on the device of ``images``)."""
        draws = self.draw(len(images))
        device = images.device
        return self.apply(images, RandAugmentDraws(draws.index.to(device), draws.params.to(device), draws.counts), self.fill.to(device))
