"""Input-pipeline throughput on real JPEG files: images/s of the ImageNet recipe's training loader for
``data.pipeline=cpu`` (workers decode + augment with PIL / timm), ``gpu`` (workers decode + crop; flip, RandAugment,
normalize, erasing batched on the GPU) and ``nvjpeg`` (workers read bytes; decode on the GPU too), for several worker counts — alone, and end to end with a compiled
bf16 training step of a mixbench ViT (``--model``), i.e. the images/s one GPU really trains at.

Writes ``--num-images`` JPEGs (CIFAR-10 photos upscaled to ``--jpeg-size`` px, bicubic, quality 90) in an
ImageNet-style folder unless ``--root`` points at one, then iterates the training DataLoader exactly as
``data=imagefolder`` builds it (RandomResizedCrop 224 + flip + RandAugment rand-m9-mstd0.5-inc1 + random
erasing 0.25, bicubic).  Prints a table and writes JSON.

    python bench/image_loader.py --pipelines cpu gpu nvjpeg --workers 4 8 16 --model vit_small --out bench/results/image_loader.json
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from mixbench.data import ASSETS_DIR
from mixbench.data.folders import ImageFolderDataModule
from mixbench.provenance import git_commit, package_versions

log = logging.getLogger("image_loader")


def _write_one(job) -> None:
    image, path, size = job
    Image.fromarray(image).resize((size, size), Image.BICUBIC).save(path, quality=90)


def write_jpegs(root: Path, num_images: int, size: int) -> None:
    """An ImageNet-style folder of real photos: the embedded CIFAR-10 images, upscaled, as JPEG."""
    from multiprocessing import Pool

    data = np.load(ASSETS_DIR / "cifar10_embedded.npz")
    images, labels, classes = data["train_x"], data["train_y"], data["classes"]
    order = np.random.default_rng(0).permutation(len(images))  # every class in both splits
    jobs = []
    for split, count in (("train", num_images), ("val", max(100, num_images // 10))):
        for i in range(count):
            k = order[i % len(images)]
            folder = root / split / str(classes[labels[k]])
            folder.mkdir(parents=True, exist_ok=True)
            jobs.append((images[k], folder / f"{i:06d}.JPEG", size))
    with Pool(os.cpu_count()) as pool:
        pool.map(_write_one, jobs, chunksize=64)


def training_step(model_name: str, device: str):
    """The ViT benchmark's training step (bf16 autocast, fused AdamW, compiled on CUDA) of a mixbench ViT (Pre-LN),
    fed the loader's batches."""
    from vit_throughput import Candidate  # bench/ is this script's directory

    from mixbench import build_model

    return Candidate(build_model(model_name, norm="pre"), None, None, device, compile_model=device == "cuda").step


def measure(root: Path, pipeline: str, workers: int, batch: int, batches: int, warmup: int, device: str, step=None) -> dict:
    """Steady-state images/s over ``batches`` batches (epochs back to back).  Skipped first: ``warmup`` batches
    (compilation) plus the ``2 × workers`` batches the workers prefetch, which would otherwise come for free."""
    import torch

    dm = ImageFolderDataModule(root=str(root), batch_size=batch, num_workers=workers, pipeline=pipeline)
    dm.setup()
    loader = dm.train_dataloader()
    batches_iter = itertools.chain.from_iterable(itertools.repeat(loader))
    warmup += 2 * workers

    def next_batch():
        images, targets = dm.transfer_batch_to_device(next(batches_iter), torch.device(device), 0)
        if step is not None:
            step(images, targets)
        return len(images)

    for _ in range(warmup):
        next_batch()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    seen = sum(next_batch() for _ in range(batches))
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    batches_iter = loader = None  # stops the workers before the next measurement starts its own
    gc.collect()
    return {"pipeline": pipeline, "workers": workers, "batch": batch, "images": seen, "seconds": elapsed, "images_per_sec": seen / elapsed}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, help="an existing folder dataset (train/<class>/*.JPEG); default: write one")
    ap.add_argument("--num-images", type=int, default=4000)
    ap.add_argument("--jpeg-size", type=int, default=320, help="edge of the written JPEGs (ImageNet's average is ~400 x 350)")
    ap.add_argument("--pipelines", nargs="+", default=["cpu"], choices=["cpu", "gpu", "nvjpeg"])
    ap.add_argument("--workers", type=int, nargs="+", default=[os.cpu_count() or 1])
    ap.add_argument("--model", help="also measure end to end with this ViT's training step (e.g. vit_small)")
    ap.add_argument("--e2e-workers", type=int, default=os.cpu_count() or 1, help="workers of the end-to-end runs")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=60, help="measured batches (after warm-up and the workers' prefetch)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default=None, help="default: cuda when available")
    ap.add_argument("--out", type=Path, default=Path("bench/results/image_loader.json"))
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or Path(tmp) / "jpegs"
        if args.root is None:
            t0 = time.perf_counter()
            write_jpegs(root, args.num_images, args.jpeg_size)
            log.info("wrote %d JPEGs of %d px in %.1f s", args.num_images, args.jpeg_size, time.perf_counter() - t0)
        rows = [measure(root, p, w, args.batch, args.batches, args.warmup, device) | {"stage": "loader only"}
                for p in args.pipelines for w in args.workers]
        if args.model:
            step = training_step(args.model, device)
            rows += [measure(root, p, args.e2e_workers, args.batch, args.batches, args.warmup + 3, device, step)
                     | {"stage": f"end to end, {args.model} training step"} for p in args.pipelines]
    for r in rows:
        log.info("%-36s %-6s %3d workers: %8.0f images/s (%d images in %.1f s)", r["stage"], r["pipeline"], r["workers"],
                 r["images_per_sec"], r["images"], r["seconds"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    args.out.write_text(json.dumps({"benchmark": "image_loader", "cpu_count": os.cpu_count(), "machine": platform.machine(), "gpu": gpu,
                                    "settings": vars(args) | {"out": str(args.out), "root": str(args.root)},
                                    "versions": package_versions(), "git": git_commit(), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
