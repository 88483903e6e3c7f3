"""The peer row: timm's own ``train.py`` beside ``mixbench run`` on the same JPEG folder, card, cores, batch and epochs.

``train.py`` is not in the timm wheel.  It is read from ``--timm-train`` (default ``bench/speed/.timm/train.py``, git-ignored:
copy it from the timm repository at the installed version, e.g. ``git show v1.0.31:train.py``, and carry the folder to
the GPU machine); ``bench/speed/.timm/SOURCE`` says where the copy came from, and both the installed timm version and that
line go into the JSON.  Both sides run the ViT-S recipe (RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25,
Mixup 0.8 / CutMix 1.0, label smoothing 0.1, EMA, bf16 autocast, torch.compile) for ``--epochs`` epochs; the rate is the
epoch average after the first epoch: timm's last log line of each epoch (its ``(avg s, avg/s)`` over the epoch's
updates), mixbench's ``throughput.epochs`` of the record.  Prints a table, writes it (``.md``) and the JSON.

    python bench/speed/timm_peer.py --out bench/speed/results/timm_peer.json
    python bench/speed/timm_peer.py --dry-run
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, Runner, epoch_average, image_bench_arguments, markdown, start_logging, vit_run_args, write_result  # noqa: E402  (bench/speed/ is not a package)
from image_loader import write_jpegs  # noqa: E402

log = logging.getLogger("timm_peer")
TIMM_LINE = re.compile(r"Train: (\d+) \[\s*(\d+)/(\d+).*?\(\s*[\d.]+s,\s*([\d.]+)/s\)")


def timm_epoch_rates(log_text: str) -> dict[int, tuple[int, float]]:
    """Epoch → (updates an epoch, images/s of the epoch's average update) from the last ``Train:`` line of each epoch."""
    rates = {}
    for match in TIMM_LINE.finditer(log_text):
        epoch, _, updates, rate = match.groups()
        rates[int(epoch)] = (int(updates), float(rate))
    return rates


def timm_args(args, root: Path, train_py: Path, output: Path) -> list[str]:
    return [
        sys.executable,
        str(train_py),
        "--data-dir",
        str(root),
        "--val-split",
        "val",
        "--model",
        "vit_small_patch16_224",
        "--num-classes",
        "10",
        "-b",
        str(args.batch),
        "--epochs",
        str(args.epochs),
        "--warmup-epochs",
        "0",
        "--lr",
        "4e-3",
        "--weight-decay",
        "0.05",
        "--aa",
        "rand-m9-mstd0.5-inc1",
        "--reprob",
        "0.25",
        "--mixup",
        "0.8",
        "--cutmix",
        "1.0",
        "--smoothing",
        "0.1",
        "--drop-path",
        "0.1",
        "--model-ema",
        "--model-ema-decay",
        "0.9999",
        "--amp",
        "--amp-dtype",
        "bfloat16",
        "--torchcompile",
        "-j",
        str(args.workers),
        "--pin-mem",
        "--log-interval",
        "8",
        "--checkpoint-hist",
        "1",
        "--output",
        str(output),
    ]


def mixbench_args(args, root: Path, pipeline: str) -> list[str]:
    return vit_run_args(args, root, "pre", pipeline, validate_every=1)  # timm validates every epoch too


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timm-train", type=Path, default=REPO / "bench" / "speed" / ".timm" / "train.py")
    image_bench_arguments(ap, "bench/speed/results/timm_peer.json")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    import timm

    start_logging()
    args = parse_args(argv)
    if not args.timm_train.is_file():
        raise SystemExit(
            f"{args.timm_train} is missing: copy train.py from the timm repository at the installed version ({timm.__version__}) "
            "into bench/speed/.timm/ (git-ignored) and carry it to the GPU machine"
        )
    source_file = args.timm_train.parent / "SOURCE"
    source = source_file.read_text().strip() if source_file.is_file() else "unknown"
    log.info("timm %s installed; train.py from: %s", timm.__version__, source)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "jpegs"
        if not args.dry_run:
            write_jpegs(root, args.num_images, 320)
        runner = Runner(Path(tmp), args.dry_run, timeout=900)
        timm_log = Path(tmp) / "timm.log"
        status, wall = runner.command(timm_args(args, root, args.timm_train, Path(tmp) / "timm_out"), args.gpu, timm_log)
        rates = timm_epoch_rates(timm_log.read_text()) if timm_log.is_file() else {}
        timed = [rate for epoch, (_, rate) in sorted(rates.items()) if epoch > 0] or [rate for _, rate in rates.values()]
        rows = [
            {
                "row": "timm train.py",
                "status": "completed" if status == 0 else f"exit {status}",
                "images_per_sec": sum(timed) / len(timed) if timed else None,
                "steps_per_epoch": next(iter(rates.values()))[0] if rates else None,
                "per_epoch": {e: r for e, (_, r) in rates.items()},
                "wall_s": wall,
            }
        ]
        for pipeline in args.pipelines:
            record = runner.mixbench(mixbench_args(args, root, pipeline), args.gpu)
            average = epoch_average(record)
            rows.append(
                {
                    "row": f"mixbench run, data.pipeline={pipeline}",
                    "status": record["status"],
                    "images_per_sec": average["items_per_sec"],
                    "steps_per_epoch": average["steps_per_epoch"],
                    "per_epoch": average.get("per_epoch"),
                    "error": record.get("error"),
                }
            )
    if args.dry_run:
        return
    peer = rows[0]["images_per_sec"]
    for row in rows:
        row["vs_timm"] = row["images_per_sec"] / peer if peer and row["images_per_sec"] else None
    columns = [("row", "row"), ("images/s (epoch average)", "images_per_sec"), ("steps/epoch", "steps_per_epoch"), ("vs timm", "vs_timm")]
    settings = {**{k: str(v) for k, v in vars(args).items()}, "timm_installed": timm.__version__, "train_py_source": source}
    write_result(args.out, "timm_peer", settings, rows, markdown(columns, rows))


if __name__ == "__main__":
    main()
