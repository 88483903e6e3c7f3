"""Input-pipeline throughput on real JPEG files: images/s of the ImageNet recipe's training loader for several
loader variants (``--variants``, each a comma list of ``data.*`` keys of ``data=imagefolder``, e.g.
``pipeline=gpu,overlap=true,worker_nice=10``; ``num_workers`` defaults to the CPUs this process may use) — alone, and end to end
with a compiled bf16 training step of a mixbench ViT (``--model``), i.e. the images/s one GPU really trains at.

With ``--model`` two reference rows come first: the step alone on a fixed device batch (the rate to reach), and the
same step while the first variant's workers decode and crop (their batches dropped), which shows what the workers'
CPU use alone costs the step.  Every end-to-end row gives its share of the model-alone rate.

Writes ``--num-images`` JPEGs (CIFAR-10 photos upscaled to ``--jpeg-size`` px, bicubic, quality 90) in an
ImageNet-style folder unless ``--root`` points at one, then iterates the training DataLoader exactly as
``data=imagefolder`` builds it (RandomResizedCrop 224 + flip + RandAugment rand-m9-mstd0.5-inc1 + random
erasing 0.25, bicubic).  Prints a table and writes JSON.

    python bench/speed/image_loader.py --variants pipeline=gpu pipeline=gpu,overlap=true --model vit_small \\
        --out bench/speed/results/image_loader.json

``--step-options cudagraphs=true`` times a step that replays CUDA graphs (almost no CPU time in the training process),
which separates what the workers can deliver from what the training process's own CPU use costs.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import markdown, write_result  # bench/speed/ is this script's directory
from PIL import Image

from mixbench.data import ASSETS_DIR
from mixbench.data.folders import ImageFolderDataModule

log = logging.getLogger("image_loader")
CPUS = len(os.sched_getaffinity(0))  # the cores this process may use (taskset), not the machine's

DEFAULT_VARIANTS = [
    "pipeline=gpu",
    "pipeline=gpu,overlap=true",
    "pipeline=gpu,overlap=true,worker_nice=10",
    "pipeline=gpu,overlap=true,worker_nice=10,num_workers=14",
]


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
    with Pool(CPUS) as pool:
        pool.map(_write_one, jobs, chunksize=64)


def parse_variant(text: str) -> dict:
    """``"pipeline=gpu,overlap=true"`` → ``{"pipeline": "gpu", "overlap": True}`` (values parsed as YAML)."""
    import yaml

    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"--variants {text!r}: expected key=value[,key=value...]")
    return {key: yaml.safe_load(value) for key, value in pairs}


def training_step(model_name: str, batch: int, device: str, options: str = "defaults"):
    """The ViT benchmark's training step (bf16 autocast, fused AdamW, compiled on CUDA) of a mixbench ViT (Pre-LN),
    with a fixed random batch of its own for the model-alone rows; ``options``: the ViT benchmark's step options
    (e.g. ``cudagraphs=true``: the step replays CUDA graphs, so it needs almost no CPU time of the main process)."""
    import torch
    from vit_throughput import Candidate, Variant  # bench/speed/ is this script's directory

    from mixbench import build_model

    images = torch.randn(batch, 3, 224, 224, device=device)
    targets = torch.randint(0, 1000, (batch,), device=device)
    return Candidate(
        build_model(model_name, norm="pre"), images, targets, device, compile_model=device == "cuda", variant=Variant.parse(options)
    )


def measure(root: Path, variant: str, batch: int, batches: int, warmup: int, device: str, candidate=None, drop_batches=False) -> dict:
    """Steady-state images/s over ``batches`` batches (epochs back to back).  Skipped first: ``warmup`` batches
    (compilation) plus the ``2 × workers`` batches the workers prefetch, which would otherwise come for free.
    With ``candidate``, each batch is followed by its training step; ``drop_batches``: the step trains on its own
    fixed batch instead (the loader's batches are read, not used)."""
    import torch

    options = {"num_workers": CPUS} | parse_variant(variant)
    dm = ImageFolderDataModule(root=str(root), batch_size=batch, **options)
    dm.setup()
    loader = dm.train_dataloader()
    batches_iter = itertools.chain.from_iterable(itertools.repeat(loader))
    warmup += 2 * options["num_workers"]

    def next_batch():
        host = next(batches_iter)
        if drop_batches:
            images, targets = candidate.images, candidate.targets
        else:
            images, targets = dm.transfer_batch_to_device(host, torch.device(device), 0)
        if candidate is not None:
            candidate.step(images, targets)
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
    return {
        "variant": variant,
        "workers": options["num_workers"],
        "batch": batch,
        "images": seen,
        "seconds": elapsed,
        "images_per_sec": seen / elapsed,
    }


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, help="an existing folder dataset (train/<class>/*.JPEG); default: write one")
    ap.add_argument("--num-images", type=int, default=4000)
    ap.add_argument("--jpeg-size", type=int, default=320, help="edge of the written JPEGs (ImageNet's average is ~400 x 350)")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="loader variants, each key=value[,key=value...] of data.*")
    ap.add_argument("--model", help="also measure end to end with this ViT's training step (e.g. vit_small)")
    ap.add_argument("--step-options", default="defaults", help="the step's options as in vit_throughput.py, e.g. cudagraphs=true")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=60, help="measured batches (after warm-up and the workers' prefetch)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default=None, help="default: cuda when available")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/image_loader.json"))
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or Path(tmp) / "jpegs"
        if args.root is None:
            t0 = time.perf_counter()
            write_jpegs(root, args.num_images, args.jpeg_size)
            log.info("wrote %d JPEGs of %d px in %.1f s", args.num_images, args.jpeg_size, time.perf_counter() - t0)
        rows = [measure(root, v, args.batch, args.batches, args.warmup, device) | {"stage": "loader only"} for v in args.variants]
        if args.model:
            candidate = training_step(args.model, args.batch, device, args.step_options)
            candidate.warm_up(args.warmup + 3)
            alone = candidate.images_per_sec(args.batches)
            rows.append(
                {
                    "stage": f"{args.model} step alone",
                    "step_options": args.step_options,
                    "variant": "-",
                    "workers": 0,
                    "batch": args.batch,
                    "images_per_sec": alone,
                }
            )
            rows.append(
                measure(root, args.variants[0], args.batch, args.batches, args.warmup, device, candidate, drop_batches=True)
                | {"stage": f"{args.model} step, workers decoding (batches dropped)"}
            )
            rows += [
                measure(root, v, args.batch, args.batches, args.warmup + 3, device, candidate) | {"stage": f"end to end, {args.model} step"}
                for v in args.variants
            ]
            for r in rows[-len(args.variants) - 2 :]:
                r["of_model_alone"] = r["images_per_sec"] / alone
    for r in rows:
        share = f"{100 * r['of_model_alone']:5.1f} % of the step alone" if "of_model_alone" in r else ""
        log.info("%-48s %-48s %3d workers: %8.0f images/s %s", r["stage"], r["variant"], r["workers"], r["images_per_sec"], share)
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    columns = [("stage", "stage"), ("variant", "variant"), ("workers", "workers"), ("images/s", "images_per_sec")]
    table = markdown(columns + [("of the step alone", "of_model_alone")], rows)
    write_result(args.out, "image_loader", vars(args) | {"out": str(args.out), "root": str(args.root)}, rows, table, gpu=gpu)


if __name__ == "__main__":
    main()
