"""``data.pipeline=gpu`` for image arrays held in memory (the CIFAR-10 arrays): the uint8 images live on the training
device, and each batch is gathered, cropped, flipped, resized and normalized there by a few batched kernels — no
DataLoader workers, no per-image Python.

Train batch ``b`` of epoch ``e`` on rank ``r`` holds positions ``b·B … (b+1)·B - 1`` of this rank's share of
``randperm(n, seed + e)`` (:class:`~mixbench.data.samplers.EpochShuffleSampler`, the ``cpu`` pipeline's order).  Its crop
offsets (0 … 2·pad, as torchvision's ``RandomCrop(size, padding=pad)`` draws them) and flips (p = 0.5, as
``RandomHorizontalFlip``) are drawn on the host by a torch generator seeded from (seed, e, r, b), and cross to the device
with the sample indices in one pinned (4, B) int64 tensor, a non-blocking copy (:func:`~mixbench.data.device_pipeline.upload`).
So the batches are a pure function of the position, which checkpoints save: a resumed run continues exactly, and a CPU
and a CUDA device draw the same crops.  The distribution is the ``cpu`` pipeline's; the draws are not (that pipeline seeds
each sample by (seed, epoch, index)), so a record of either is another draw of the same recipe.
"""

from __future__ import annotations

import numpy as np
import torch
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from .device_pipeline import upload
from .samplers import EpochShuffleSampler

HFLIP = 0.5  # torchvision RandomHorizontalFlip's default, as the cpu pipeline uses it


def batch_seed(seed: int, epoch: int, rank: int, batch: int) -> int:
    """The seed of one train batch's draws: a 64-bit hash of (seed, epoch, rank, batch index in the epoch)."""
    return int(np.random.SeedSequence([seed, epoch, rank, batch]).generate_state(1, dtype=np.uint64)[0])


class CropFlipDraws:
    """The random crop offsets and flips of a train batch, drawn on the host from (seed, epoch, rank, batch)."""

    def __init__(self, pad: int, seed: int, rank: int = 0):
        self.pad, self.seed, self.rank = pad, seed, rank
        self.generator = torch.Generator()

    def __call__(self, epoch: int, batch: int, n: int) -> torch.Tensor:
        """(3, n) int64: crop top, crop left (each uniform in 0 … 2·pad) and flip (0 / 1)."""
        self.generator.manual_seed(batch_seed(self.seed, epoch, self.rank, batch))
        offsets = torch.randint(0, 2 * self.pad + 1, (2, n), generator=self.generator)
        flip = torch.rand(n, generator=self.generator) < HFLIP
        return torch.cat([offsets, flip.long()[None]])


class DeviceArrays:
    """One split's uint8 (N, C, S, S) images — with a ``pad``-pixel zero border for the train crops — and labels on
    ``device`` (uploaded once), and its batched transform: crop + flip (train), bicubic antialiased resize to ``size`` when
    it is not S, then ``ToDtype(float32, scale=True)`` and ``Normalize(mean, std)`` computed as torchvision computes them
    (bit for bit on the CPU), with the constants on the device (torchvision's ``normalize`` builds them from host values
    every call: a synchronising copy on CUDA)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, device, size: int, mean, std, pad: int = 0):
        device = torch.device(device)
        self.source_size, self.size, self.pad = images.shape[-1], size, pad
        on_device = upload(images, device)
        self.images = TF.pad(on_device, [pad]) if pad else on_device
        self.labels = upload(labels, device)
        self.mean, self.std = (upload(torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1), device) for v in (mean, std))
        self._steps = torch.arange(self.source_size, device=device)
        self._mirrored = self._steps.flip(0)
        self._channels = torch.arange(images.shape[1], device=device)

    @property
    def device(self) -> torch.device:
        return self.images.device

    def __len__(self) -> int:
        return len(self.labels)

    def crop_flip(self, indices: torch.Tensor, top: torch.Tensor, left: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
        """Image ``indices[i]`` of the padded arrays cropped to S × S at (``top[i]``, ``left[i]``) and mirrored where
        ``flip[i]``: torchvision's ``crop`` then ``horizontal_flip`` of every image, in one gather."""
        rows = top[:, None] + self._steps
        cols = left[:, None] + torch.where(flip[:, None].bool(), self._mirrored, self._steps)
        return self.images[
            indices[:, None, None, None], self._channels[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]
        ]

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 batch → resized (if ``size`` differs) float32 batch, normalized."""
        if self.size != images.shape[-1]:
            images = TF.resize(images, [self.size, self.size], interpolation=InterpolationMode.BICUBIC, antialias=True)
        return TF.to_dtype(images, torch.float32, scale=True).sub_(self.mean).div_(self.std)

    def batch(self, indices: torch.Tensor, crops: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, labels) of ``indices`` (on the device); ``crops`` (3, n) = top, left, flip crops and flips them."""
        images = self.crop_flip(indices, *crops) if crops is not None else self.images[indices]
        return self.normalize(images), self.labels[indices]


class ArrayTrainLoader:
    """This rank's training batches on the arrays' device, ``len`` full batches an epoch.  ``sampler`` (where Lightning
    calls ``set_epoch``) gives the order and the position a resumed run starts at; an ``iter()`` with no ``set_epoch``
    since the last one delivers the next epoch (as :class:`~mixbench.data.samplers.EpochSpanningLoader`).  ``draws``
    None: no crop or flip."""

    def __init__(self, arrays: DeviceArrays, sampler: EpochShuffleSampler, batch_size: int, draws: CropFlipDraws | None):
        self.arrays, self.sampler, self.batch_size, self.draws = arrays, sampler, batch_size, draws
        self._delivered: int | None = None  # the epoch the last iter() delivered

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size

    def __iter__(self):
        """One epoch's batches; the epoch is chosen at the first ``next()`` (Lightning makes an iterator it never reads
        before the first epoch)."""
        if self._delivered is not None and not self.sampler.epoch_was_set:  # nobody said which epoch: the next one
            self.sampler.set_epoch(self._delivered + 1)
        self.sampler.epoch_was_set = False
        epoch, first, order = self.sampler.epoch, self.sampler.start // self.batch_size, self.sampler.order()
        self._delivered = epoch
        for b in range(first, len(self)):
            plan = upload(self.plan(epoch, b, order), self.arrays.device)
            yield self.arrays.batch(plan[0], plan[1:] if self.draws is not None else None)

    def plan(self, epoch: int, batch: int, order: torch.Tensor) -> torch.Tensor:
        """What batch ``batch`` of ``epoch`` sends to the device: its sample indices, then (with draws) the crop top, left
        and flip of each — (1 or 4, B) int64 on the host."""
        indices = order[batch * self.batch_size : (batch + 1) * self.batch_size][None]
        return indices.contiguous() if self.draws is None else torch.cat([indices, self.draws(epoch, batch, indices.shape[1])])


class ArrayEvalLoader:
    """Evaluation batches of ``indices`` (this rank's share, on the device) in order, the last one partial."""

    def __init__(self, arrays: DeviceArrays, indices: torch.Tensor, batch_size: int):
        self.arrays, self.indices, self.batch_size = arrays, indices, batch_size

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.indices), self.batch_size):
            yield self.arrays.batch(self.indices[start : start + self.batch_size])
