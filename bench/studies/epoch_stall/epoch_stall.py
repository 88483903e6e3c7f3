"""The stall at epoch boundaries of the image-folder training loader, through a real Lightning ``Trainer`` and the real
``mixbench`` data module (``data=imagefolder``), with ``data.span_epochs`` off (a DataLoader per epoch: persistent
workers, but drained at every epoch end) and on (one loader iterator across epochs).

The training step only sleeps ``--step-ms`` (a stand-in for the GPU step, so the workers can keep up in steady state)
and records when it starts and ends.  Per row: the median gap between the end of one step and the start of the next
inside an epoch, and the gap between the last step of epoch k and the first step of epoch k+1 — the stall.  Prints a
table, writes it beside ``--out`` (``.md``) and the JSON (machine, cores, torch version, every gap).

    python bench/studies/epoch_stall/epoch_stall.py --out bench/studies/epoch_stall/epoch_stall_cpu.json

Writes ``--num-images`` JPEGs (CIFAR-10 photos upscaled to ``--jpeg-size`` px, as ``bench/speed/image_loader.py`` does) unless
``--root`` points at an ImageNet-style folder.  ``--dry-run`` prints the settings and exits.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "speed"))
from harness import write_result  # noqa: E402  (bench/speed/ is not a package)
from image_loader import parse_variant, write_jpegs  # noqa: E402

from mixbench.data.folders import ImageFolderDataModule  # noqa: E402

log = logging.getLogger("epoch_stall")
CPUS = len(os.sched_getaffinity(0))


class SleepStep(L.LightningModule):
    """A training step that takes ``step_ms`` and records when each step starts and ends."""

    def __init__(self, step_ms: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.step_s, self.events = step_ms / 1000, []

    def training_step(self, batch, batch_idx: int):
        start = time.perf_counter()
        time.sleep(self.step_s)
        self.events.append((self.current_epoch, start, time.perf_counter()))
        return self.weight * 0.0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def gaps(events: list[tuple[int, float, float]]) -> tuple[list[float], list[float]]:
    """(gaps between steps inside an epoch, gaps from an epoch's last step to the next epoch's first)."""
    inside, boundary = [], []
    for (epoch_a, _, end_a), (epoch_b, start_b, _) in zip(events, events[1:]):
        (inside if epoch_a == epoch_b else boundary).append(start_b - end_a)
    return inside, boundary


def measure(root: Path, span_epochs: bool, args, data: dict) -> dict:
    dm = ImageFolderDataModule(
        root=str(root),
        batch_size=args.batch,
        num_workers=args.workers,
        span_epochs=span_epochs,
        prefetch_factor=args.prefetch_factor,
        **data,
    )
    module = SleepStep(args.step_ms)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    started = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    wall = time.perf_counter() - started
    inside, boundary = gaps(module.events)
    steps = len(module.events) // args.epochs
    return {
        "span_epochs": span_epochs,
        "steps_per_epoch": steps,
        "epochs": args.epochs,
        "median_step_gap_s": statistics.median(inside),
        "boundary_gaps_s": boundary,
        "median_boundary_gap_s": statistics.median(boundary),
        "wall_s": wall,
        "images_per_s_after_first_epoch": (args.epochs - 1)
        * steps
        * args.batch
        / (module.events[-1][2] - max(e[2] for e in module.events if e[0] == 0)),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| data.span_epochs | steps/epoch | median gap inside an epoch | median gap at an epoch start | images/s after epoch 0 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {str(r['span_epochs']).lower()} | {r['steps_per_epoch']} | {r['median_step_gap_s'] * 1000:.1f} ms "
            f"| {r['median_boundary_gap_s'] * 1000:.1f} ms | {r['images_per_s_after_first_epoch']:,.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None, help="an ImageNet-style folder (default: write --num-images JPEGs to a temporary one)")
    ap.add_argument("--num-images", type=int, default=1024)
    ap.add_argument("--jpeg-size", type=int, default=320)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=CPUS)
    ap.add_argument("--prefetch-factor", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=200.0, help="the stand-in training step's duration")
    ap.add_argument("--data", default="", help="more data.* settings, e.g. pipeline=gpu,img_size=160")
    ap.add_argument("--out", default="bench/studies/epoch_stall/epoch_stall.json")
    ap.add_argument("--dry-run", action="store_true", help="print the settings and exit")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    data = parse_variant(args.data) if args.data else {}
    log.info(
        "epoch_stall: %s, batch %d, %d workers (prefetch %d), %d epochs, %.0f ms steps, data %s, span_epochs false then true → %s",
        args.root or f"{args.num_images} JPEGs of {args.jpeg_size} px",
        args.batch,
        args.workers,
        args.prefetch_factor,
        args.epochs,
        args.step_ms,
        data or "defaults",
        args.out,
    )
    if args.dry_run:
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root) if args.root else Path(tmp) / "jpegs"
        if not args.root:
            write_jpegs(root, args.num_images, args.jpeg_size)
        rows = [measure(root, span, args, data) for span in (False, True)]
    settings = {k: v for k, v in vars(args).items() if k != "dry_run"}
    write_result(Path(args.out), "epoch_stall", settings, rows, table(rows), device="cpu (the step is a sleep)")


if __name__ == "__main__":
    main()
