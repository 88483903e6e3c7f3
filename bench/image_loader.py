"""Input-pipeline throughput: images/s of the CPU loader (JPEG decode + the ImageNet recipe's timm
train transforms) on real JPEG files, for several worker counts.

Writes ``--num-images`` JPEGs (CIFAR-10 photos upscaled to ``--jpeg-size`` px, bicubic, quality 90) in an
ImageNet-style folder unless ``--root`` points at one, then iterates the training DataLoader exactly as
``data=imagefolder`` builds it (RandomResizedCrop 224 + flip + RandAugment rand-m9-mstd0.5-inc1 + random
erasing 0.25, bicubic).  Prints a table and writes JSON.

    python bench/image_loader.py --workers 4 8 16 --out bench/results/image_loader.json
"""
from __future__ import annotations

import argparse
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


def write_jpegs(root: Path, num_images: int, size: int) -> None:
    """An ImageNet-style folder of real photos: the embedded CIFAR-10 images, upscaled, as JPEG."""
    data = np.load(ASSETS_DIR / "cifar10_embedded.npz")
    images, labels, classes = data["train_x"], data["train_y"], data["classes"]
    order = np.random.default_rng(0).permutation(len(images))  # every class in both splits
    for split, count in (("train", num_images), ("val", max(100, num_images // 10))):
        for i in range(count):
            k = order[i % len(images)]
            folder = root / split / str(classes[labels[k]])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[k]).resize((size, size), Image.BICUBIC).save(folder / f"{i:06d}.JPEG", quality=90)


def measure(root: Path, workers: int, batch: int, batches: int) -> dict:
    dm = ImageFolderDataModule(root=str(root), batch_size=batch, num_workers=workers)
    dm.setup()
    loader = dm.train_dataloader()
    it = iter(loader)
    next(it)  # worker start-up is not counted
    start, seen = time.perf_counter(), 0
    for _ in range(batches):
        images, _ = next(it)
        seen += len(images)
    elapsed = time.perf_counter() - start
    return {"workers": workers, "batch": batch, "images": seen, "seconds": elapsed, "images_per_sec": seen / elapsed}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, help="an existing folder dataset (train/<class>/*.JPEG); default: write one")
    ap.add_argument("--num-images", type=int, default=4000)
    ap.add_argument("--jpeg-size", type=int, default=320, help="edge of the written JPEGs (ImageNet's average is ~400 x 350)")
    ap.add_argument("--workers", type=int, nargs="+", default=[os.cpu_count() or 1])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("bench/results/image_loader.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or Path(tmp) / "jpegs"
        if args.root is None:
            t0 = time.perf_counter()
            write_jpegs(root, args.num_images, args.jpeg_size)
            log.info("wrote %d JPEGs of %d px in %.1f s", args.num_images, args.jpeg_size, time.perf_counter() - t0)
        rows = [measure(root, w, args.batch, args.batches) for w in args.workers]
    for r in rows:
        log.info("%3d workers: %8.0f images/s (%d images in %.1f s)", r["workers"], r["images_per_sec"], r["images"], r["seconds"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "image_loader", "cpu_count": os.cpu_count(), "machine": platform.machine(),
                                    "settings": vars(args) | {"out": str(args.out), "root": str(args.root)},
                                    "versions": package_versions(), "git": git_commit(), "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
