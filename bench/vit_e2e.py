"""ViT-S end to end through ``mixbench run`` on a JPEG folder, against the model alone: images/s as epoch averages.

Rows: ``in1k_vit_small`` (the ImageNet recipe: RandAugment, erasing, Mixup/CutMix, EMA, bf16, compiled) for each
``--norms`` × ``--pipelines`` (``cpu``: DataLoader workers decode + augment; ``dali``: NVIDIA DALI on the GPU, needs
``pip install -e ".[dali]"``), ``--epochs`` epochs of ``--num-images`` JPEGs (steps an epoch = num-images / batch), the
average over the epochs after the first (the first holds compilation).  The reference row is the model alone: the same
compiled training step on a fixed random GPU batch (``bench/image_loader.py``'s step), so each row's share of it says
what the input and the trainer cost.  Prints a table, writes it (``.md``) and the JSON (card, cores, torch).

    python bench/vit_e2e.py --out bench/results/vit_e2e.json
    python bench/vit_e2e.py --dry-run            # the commands it would run
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import logging
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_runs import Runner, epoch_average, image_bench_arguments, markdown, start_logging, vit_run_args, write_result  # noqa: E402  (bench/ is not a package)
from image_loader import training_step, write_jpegs  # noqa: E402

log = logging.getLogger("vit_e2e")


def run_args(args, root: Path, norm: str, pipeline: str, variant: str = "") -> list[str]:
    extra = ["trainer.limit_val_batches=2", "trainer.log_every_n_steps=10", f"compile.mode={args.compile_mode}"]
    return [*vit_run_args(args, root, norm, pipeline, validate_every=1000), *extra, *filter(None, variant.split(","))]


def model_alone(args) -> float | None:
    """Images/s of the compiled training step alone on a fixed GPU batch."""
    if args.dry_run:
        log.info("model alone: bench/image_loader.py's compiled vit_small step, batch %d, %d timed steps", args.batch, args.model_steps)
        return None
    import torch

    torch.cuda.set_device(int(args.gpu))  # "cuda" below is then --gpu's card, the one the runs get
    step = training_step("vit_small", args.batch, "cuda", args.step_options)
    step.warm_up(5)
    return step.images_per_sec(args.model_steps)


def keep_profile(record: dict, out: Path, row: int) -> str | None:
    """A variant with ``profiler.kind=...`` leaves ``fit-profile.txt`` (and with ``profiler.trace=true`` a timeline) in
    its run folder, which is temporary: copied beside ``--out`` as ``<out>_row<N>_fit-profile.txt`` (the timeline as
    ``<out>_row<N>_fit-profile.pt.trace.json.gz``); the report's path, or None."""
    run_dir = Path(record.get("run_dir") or "/nonexistent")
    reports = sorted(run_dir.glob("fit-profile*.txt"))  # -<rank> with several ranks
    if not reports:
        return None
    kept = out.with_name(f"{out.stem}_row{row}_fit-profile.txt")
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(reports[0], kept)
    for trace in sorted(run_dir.glob("fit-profile*.pt.trace.json"))[:1]:
        with trace.open("rb") as source, gzip.open(kept.with_name(f"{kept.stem}.pt.trace.json.gz"), "wb") as target:
            shutil.copyfileobj(source, target)
    return str(kept)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--norms", nargs="+", default=["pre", "post", "mix"])
    ap.add_argument("--compile-mode", default="default", help="compile.mode of the runs (e.g. reduce-overhead)")
    ap.add_argument("--step-options", default="defaults", help="the model-alone step's options (bench/vit_throughput.py)")
    ap.add_argument("--model-steps", type=int, default=40)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=[""],
        help="settings each row set is run with, a comma list each ('' = the recipe as is): an attribution of the gap "
        "to the model alone, e.g. '' data.auto_augment=null ema.decay=null mixup.mixup_alpha=0,mixup.cutmix_alpha=0; "
        "profiler.kind=simple|pytorch keeps the run's profile beside --out",
    )
    image_bench_arguments(ap, "bench/results/vit_e2e.json")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    start_logging()
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "jpegs"
        if not args.dry_run:
            write_jpegs(root, args.num_images, 320)
        alone = model_alone(args)
        runner = Runner(Path(tmp), args.dry_run)
        rows = [{"row": "model alone (random GPU batch)", "images_per_sec": alone, "of_model": 1.0 if alone else None}]
        for pipeline, norm, variant in itertools.product(args.pipelines, args.norms, args.variants):
            record = runner.mixbench(run_args(args, root, norm, pipeline, variant), args.gpu)
            average = epoch_average(record)
            rate = average["items_per_sec"]
            rows.append(
                {
                    "row": f"mixbench run {norm}, data.pipeline={pipeline}" + (f", {variant}" if variant else ""),
                    "status": record["status"],
                    "images_per_sec": rate,
                    "steps_per_epoch": average["steps_per_epoch"],
                    "epochs_timed": average["epochs_timed"],
                    "of_model": rate / alone if rate and alone else None,
                    "per_epoch": average.get("per_epoch"),
                    "error": record.get("error"),
                    "profile": keep_profile(record, args.out, len(rows)),
                }
            )
    if args.dry_run:
        return
    columns = [("row", "row"), ("images/s (epoch average)", "images_per_sec"), ("steps/epoch", "steps_per_epoch")]
    columns.append(("of model alone", "of_model"))
    write_result(args.out, "vit_e2e", {k: str(v) for k, v in vars(args).items()}, rows, markdown(columns, rows))


if __name__ == "__main__":
    main()
