"""``data.pipeline=dali``: the ImageNet recipe on the GPU with NVIDIA DALI (``pip install -e ".[dali]"``).

Train: ``fn.readers.file`` (this rank's shard: ``shard_id`` = global rank, ``num_shards`` = world size; the whole file
list reshuffled every epoch from ``seed``) → hardware/CUDA JPEG decode fused with the random-resized crop (scale
(0.08, 1), ratio (3/4, 4/3), as timm) → resize to ``img_size`` (cubic, antialiased) → horizontal flip → DALI's
RandAugment (``n`` and ``m`` from ``auto_augment``, e.g. ``rand-m9-mstd0.5-inc1`` → n=2, m=9) → normalize (CHW float).
Random erasing then runs on the batch with torch, as timm's ``RandomErasing`` (pixel mode, one box; the batch's boxes
drawn on the host at once by timm's rule with NumPy, :func:`mixbench.data.device_pipeline.erase_boxes`, sent in one pinned
copy and turned into row/column masks on the GPU; no torch op runs on the host, whose CPU threads would take DALI's
cores), and Mixup/CutMix in the LightningModule as for every pipeline.  DALI's iterator passes its outputs to torch by
DLPack (its default dynamic executor; no copy), so the loader hands on copies of them (the labels from the reader's int32
to int64): a batch that Lightning holds through its step must not hold DALI's buffers.  Eval:
decode → resize the short side to ``floor(img_size / crop_pct)`` (cubic, antialiased) → center crop → normalize.

Where DALI's ops differ from timm's recipe is listed in docs/imagenet.md (DALI pipeline).  Resume: DALI's reader restarts
its shard's order at the start of an epoch, so a run resumed mid-epoch sees a different remainder of that epoch than the
uninterrupted run; the record says so (``dataset.exact_resume`` false, ``dataset.resume_note``).
"""

from __future__ import annotations

import importlib
import logging
import math
import re
from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import ConfigError

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install -e ".[dali]"'
RESUME_NOTE = (
    "data.pipeline=dali: DALI's file reader restarts its shard's order at an epoch start, so a run resumed mid-epoch "
    "does not continue that epoch's order exactly (the model, optimizer, schedule and RNG states are restored exactly)"
)
# DALI's fn.readers.file takes these (lower-case) extensions as images
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def import_dali():
    """``(nvidia.dali.fn, nvidia.dali.types, pipeline_def, rand_augment module, DALIGenericIterator, LastBatchPolicy)``,
    or one ConfigError naming the install command."""
    try:
        dali = importlib.import_module("nvidia.dali")
        rand_augment = importlib.import_module("nvidia.dali.auto_aug.rand_augment")
        plugin = importlib.import_module("nvidia.dali.plugin.pytorch")
    except ImportError as err:
        raise ConfigError(
            f"data.pipeline=dali needs NVIDIA DALI, which is not installed ({err}); install it with {INSTALL_HINT} "
            "(nvidia-dali-cuda130, ~260 MB of wheels, a CUDA GPU), or use data.pipeline=cpu|gpu|nvjpeg"
        ) from None
    return dali.fn, dali.types, dali.pipeline_def, rand_augment, plugin.DALIGenericIterator, plugin.LastBatchPolicy


def parse_rand_augment(spec: str | None) -> dict | None:
    """timm's ``rand-m9-mstd0.5-inc1`` → ``{"n": 2, "m": 9, "mstd": 0.5, "inc": True}`` (timm's defaults n=2,
    mstd 0, inc 0); None for no RandAugment.  Only RandAugment (``rand-...``) policies exist in DALI's form."""
    if not spec:
        return None
    parts = spec.split("-")
    if parts[0] != "rand":
        raise ConfigError(f"data.pipeline=dali supports RandAugment policies (rand-m9-...) only, not data.auto_augment={spec!r}")
    out = {"n": 2, "m": 9, "mstd": 0.0, "inc": False}
    for part in parts[1:]:
        match = re.fullmatch(r"(mstd|m|n|inc|mmax|w|p)([\d.]+)", part)
        if match is None:
            raise ConfigError(f"data.auto_augment={spec!r}: cannot read {part!r}")
        key, value = match.groups()
        if key == "m":
            out["m"] = int(float(value))
        elif key == "n":
            out["n"] = int(value)
        elif key == "mstd":
            out["mstd"] = float(value)
        elif key == "inc":
            out["inc"] = bool(int(value))
        else:
            raise ConfigError(f"data.auto_augment={spec!r}: {key} has no DALI equivalent")
    return out


@dataclass(frozen=True)
class DaliSettings:
    """Everything one rank's DALI pipelines are built from (a plain value: the CPU tests check it)."""

    files: tuple[str, ...]
    labels: tuple[int, ...]
    train: bool
    img_size: int
    resize_shorter: int
    batch_size: int
    shard_id: int
    num_shards: int
    device_id: int
    seed: int
    num_threads: int
    hflip: float
    rand_augment: dict | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    hw_decoder_load: float = 0.65

    @property
    def fill_value(self) -> int:
        """RandAugment's fill for the area a geometric op uncovers: DALI takes one value; the mean's grey level."""
        return int(round(255 * sum(self.mean) / len(self.mean)))


def dali_settings(datamodule, samples: list[tuple[str, int]], train: bool, rank: int, world: int, device_id: int) -> DaliSettings:
    """The settings of one split's pipeline on one rank, from an :class:`~mixbench.data.folders.ImageFolderDataModule`."""
    if datamodule.aug["interpolation"] not in ("bicubic", "bilinear"):
        raise ConfigError(
            f"data.pipeline=dali resizes with cubic or linear filters, not data.interpolation={datamodule.aug['interpolation']!r}"
        )
    unreadable = [path for path, _ in samples if not path.lower().endswith(IMAGE_EXTENSIONS)]
    if unreadable:
        raise ConfigError(f"data.pipeline=dali reads {', '.join(IMAGE_EXTENSIONS)} files; {unreadable[0]} is not one")
    return DaliSettings(
        files=tuple(path for path, _ in samples),
        labels=tuple(int(label) for _, label in samples),
        train=train,
        img_size=datamodule.img_size,
        resize_shorter=math.floor(datamodule.img_size / datamodule.crop_pct),
        batch_size=datamodule.batch_size if train else datamodule.eval_batch_size,
        shard_id=rank,
        num_shards=world,
        device_id=device_id,
        seed=datamodule.seed + 1000 * rank,
        num_threads=max(1, datamodule.num_workers),
        hflip=datamodule.aug["hflip"],
        rand_augment=parse_rand_augment(datamodule.aug["auto_augment"]) if train else None,
        mean=tuple(datamodule.aug["mean"]),
        std=tuple(datamodule.aug["std"]),
        interpolation=datamodule.aug["interpolation"],
    )


def build_pipeline(settings: DaliSettings):
    """The DALI pipeline of ``settings`` (built, not started)."""
    fn, types, pipeline_def, rand_augment, _, _ = import_dali()
    interp = types.INTERP_CUBIC if settings.interpolation == "bicubic" else types.INTERP_LINEAR
    mean = [255 * m for m in settings.mean]
    std = [255 * s for s in settings.std]

    @pipeline_def(enable_conditionals=settings.rand_augment is not None)
    def pipeline():
        jpegs, labels = fn.readers.file(
            files=list(settings.files),
            labels=list(settings.labels),
            shard_id=settings.shard_id,
            num_shards=settings.num_shards,
            shuffle_after_epoch=settings.train,
            seed=settings.seed,
            pad_last_batch=not settings.train,
            name="Reader",
        )
        if settings.train:
            images = fn.decoders.image_random_crop(
                jpegs,
                device="mixed",
                output_type=types.RGB,
                random_area=[0.08, 1.0],
                random_aspect_ratio=[3 / 4, 4 / 3],
                num_attempts=10,
                hw_decoder_load=settings.hw_decoder_load,
            )
            images = fn.resize(images, size=[settings.img_size, settings.img_size], interp_type=interp, antialias=True)
            flip = fn.random.coin_flip(probability=settings.hflip)
            images = fn.flip(images, horizontal=flip)
            if settings.rand_augment is not None:
                images = rand_augment.rand_augment(
                    images,
                    n=settings.rand_augment["n"],
                    m=settings.rand_augment["m"],
                    fill_value=settings.fill_value,
                    interp_type=types.INTERP_LINEAR,  # its warp_affine takes nearest or linear only (timm: bicubic)
                    shape=(settings.img_size, settings.img_size),  # every image has it after the resize above
                    max_translate_rel=0.45,
                    monotonic_mag=settings.rand_augment["inc"],
                )
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std)
        else:
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=settings.hw_decoder_load)
            images = fn.resize(images, resize_shorter=settings.resize_shorter, interp_type=interp, antialias=True)
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.FLOAT,
                output_layout="CHW",
                crop=[settings.img_size, settings.img_size],
                crop_pos_x=0.5,
                crop_pos_y=0.5,
                mean=mean,
                std=std,
            )
        return images, labels.gpu()  # the reader's int32, copied to int64 by the loader (no CPU operator after the reader)

    return pipeline(batch_size=settings.batch_size, num_threads=settings.num_threads, device_id=settings.device_id, seed=settings.seed)


class DaliLoader:
    """One split's batches on this rank as ``(images, labels)`` CUDA tensors: ``len`` batches an epoch (train: full
    batches only; eval: the shard's last batch padded by DALI and cut back to the shard's own samples), erasing applied to
    train batches (``re_prob``)."""

    def __init__(self, settings: DaliSettings, re_prob: float):
        from timm.data.random_erasing import RandomErasing

        _, _, _, _, iterator, policy = import_dali()
        self.settings = settings
        self.pipeline = build_pipeline(settings)
        self.pipeline.build()
        self.iterator = iterator(
            [self.pipeline],
            ["images", "labels"],
            reader_name="Reader",
            last_batch_policy=policy.DROP if settings.train else policy.PARTIAL,
            auto_reset=True,
        )
        self.eraser = RandomErasing(re_prob, mode="pixel", max_count=1, device="cpu") if settings.train and re_prob > 0 else None
        self.erase_rng = np.random.default_rng([settings.seed, settings.shard_id])  # the erasing boxes' draws
        # a DataLoader's sampler pair, both None: nothing for Lightning to set an epoch on or to check for shuffling (the
        # reader reshuffles at each epoch end); without batch_sampler Lightning's check raises AttributeError
        self.sampler = self.batch_sampler = None

    def __len__(self) -> int:
        return len(self.iterator)

    def __iter__(self):
        from .device_pipeline import erase, erase_boxes, upload

        for out in self.iterator:
            # DALI's outputs point into its own buffers (DLPack, no copy): the batch handed on is tensors of the loader's
            # own, so Lightning, which holds a batch through its step and prefetches the next, holds no DALI buffer
            images, labels = out[0]["images"], out[0]["labels"].view(-1).to(torch.int64, copy=True)
            del out  # else the generator's frame holds DALI's outputs while it waits at the yield, through the step
            if self.eraser is not None:
                height, width = images.shape[-2:]
                # no torch op on the host here: torch's CPU threads would take the cores of DALI's decoding threads
                # (docs/speed.md#dali-hand-over).  The boxes, (n, 4) drawn by NumPy, go pinned and queued behind the
                # running step (a pageable copy would make the host wait for the GPU); their masks are made on the GPU.
                boxes = upload(erase_boxes(self.eraser, len(images), height, width, self.erase_rng), images.device)
                images = erase(images, boxes)
            else:
                images = images.clone()
            yield images, labels


def dali_loader(datamodule, train: bool) -> DaliLoader:
    """This rank's DALI loader of the train or val split of ``datamodule`` (an ImageFolderDataModule, folder layout)."""
    if datamodule.layout != "folder":
        raise ConfigError(
            "data.pipeline=dali reads image folders (train/<class>/*.JPEG); the parquet layout needs data.pipeline=cpu|gpu|nvjpeg"
        )
    trainer = getattr(datamodule, "trainer", None)
    if trainer is None or trainer.strategy.root_device.type != "cuda":
        raise ConfigError("data.pipeline=dali decodes on the GPU: run on a CUDA device (trainer.accelerator=gpu)")
    rank, world = trainer.global_rank, trainer.world_size
    dataset = datamodule.train_set if train else datamodule.val_set
    settings = dali_settings(datamodule, list(dataset.samples), train, rank, world, trainer.strategy.root_device.index or 0)
    log.info(
        "DALI %s pipeline: %d files, shard %d of %d, batch %d",
        "train" if train else "val",
        len(settings.files),
        rank,
        world,
        settings.batch_size,
    )
    return DaliLoader(settings, datamodule.aug["re_prob"] if train else 0.0)
