"""ViT-S end to end through ``mixbench run`` on a JPEG folder, against the model alone: images/s as epoch averages.

Rows: ``in1k_vit_small`` (the ImageNet recipe: RandAugment, erasing, Mixup/CutMix, EMA, bf16, compiled) for each
``--norms`` × ``--pipelines`` (``cpu``: DataLoader workers decode + augment; ``dali``: NVIDIA DALI on the GPU, needs
``pip install -e ".[dali]"``), ``--epochs`` epochs of ``--num-images`` JPEGs (steps an epoch = num-images / batch), the
average over the epochs after the first (the first holds compilation).  The reference row is the model alone: the same
compiled training step on a fixed random GPU batch (``bench/speed/image_loader.py``'s step), so each row's share of it says
what the input and the trainer cost.  ``--repeats N`` runs every row N times in rounds whose order rotates (the first
run of a call has been the slowest), and reports each row's median with its runs.  Prints a table, writes it (``.md``)
and the JSON (card, cores, torch).

    python bench/speed/vit_e2e.py --out bench/speed/results/vit_e2e.json
    python bench/speed/vit_e2e.py --dry-run            # the commands it would run
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import logging
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Runner, epoch_average, image_bench_arguments, markdown, start_logging, vit_run_args, write_result  # noqa: E402  (bench/speed/ is not a package)
from image_loader import training_step, write_jpegs  # noqa: E402

log = logging.getLogger("vit_e2e")


def run_args(args, root: Path, norm: str, pipeline: str, variant: str = "") -> list[str]:
    extra = ["trainer.limit_val_batches=2", "trainer.log_every_n_steps=10", f"compile.mode={args.compile_mode}"]
    return [*vit_run_args(args, root, norm, pipeline, validate_every=1000), *extra, *filter(None, variant.split(","))]


def model_alone(args) -> float | None:
    """Images/s of the compiled training step alone on a fixed GPU batch."""
    if args.dry_run:
        log.info("model alone: image_loader.py's compiled vit_small step, batch %d, %d timed steps", args.batch, args.model_steps)
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
    ap.add_argument("--step-options", default="defaults", help="the model-alone step's options (bench/speed/vit_throughput.py)")
    ap.add_argument("--model-steps", type=int, default=40)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=[""],
        help="settings each row set is run with, a comma list each ('' = the recipe as is): an attribution of the gap "
        "to the model alone, e.g. '' data.auto_augment=null ema.decay=null mixup.mixup_alpha=0,mixup.cutmix_alpha=0; "
        "profiler.kind=simple|pytorch keeps the run's profile beside --out",
    )
    ap.add_argument(
        "--repeats", type=int, default=1, help="runs of every row, in rounds whose order rotates by one; the row reports the median"
    )
    image_bench_arguments(ap, "bench/speed/results/vit_e2e.json")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    return args


def rotated_rounds(rows: list, repeats: int) -> list[tuple[int, int, object]]:
    """(round, position, row) in run order: round k (from 0) starts k rows further on, so with as many rounds as rows
    every row runs first once."""
    return [(k, i, rows[(i + k) % len(rows)]) for k in range(repeats) for i in range(len(rows))]


def row_summary(name: str, runs: list[tuple[int, int, dict, dict]], alone: float | None) -> dict:
    """One table row from its runs, each (round, position, record, epoch average): the median rate over the runs that
    gave one, and every run."""
    rates = [average["items_per_sec"] for _, _, _, average in runs if average["items_per_sec"]]
    rate = statistics.median(rates) if rates else None
    failed = [record for _, _, record, _ in runs if record["status"] != "completed"]
    first = runs[0][3]
    row = {
        "row": name,
        "status": failed[0]["status"] if failed else "completed",
        "images_per_sec": rate,
        "steps_per_epoch": first["steps_per_epoch"],
        "epochs_timed": first["epochs_timed"],
        "of_model": rate / alone if rate and alone else None,
        "per_epoch": first.get("per_epoch"),
        "error": failed[0].get("error") if failed else None,
    }
    if len(runs) > 1:
        row["runs"] = [
            {"round": k + 1, "position": i + 1, "status": record["status"], "images_per_sec": average["items_per_sec"]}
            for k, i, record, average in runs
        ]
        row["spread"] = [min(rates), max(rates)] if rates else None
        row["rates"] = [average["items_per_sec"] for *_, average in runs]  # round by round (markdown prints the list)
    return row


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
        settings = list(itertools.product(args.pipelines, args.norms, args.variants))
        runs = {setting: [] for setting in settings}
        for k, i, (pipeline, norm, variant) in rotated_rounds(settings, args.repeats):
            record = runner.mixbench(run_args(args, root, norm, pipeline, variant), args.gpu)
            runs[(pipeline, norm, variant)].append((k, i, record, epoch_average(record)))
        for number, (pipeline, norm, variant) in enumerate(settings, start=1):
            row_runs = runs[(pipeline, norm, variant)]
            name = f"mixbench run {norm}, data.pipeline={pipeline}" + (f", {variant}" if variant else "")
            rows.append(row_summary(name, row_runs, alone) | {"profile": keep_profile(row_runs[0][2], args.out, number)})
    if args.dry_run:
        return
    median = " (median of the runs)" if args.repeats > 1 else ""
    columns = [("row", "row"), (f"images/s (epoch average){median}", "images_per_sec"), ("steps/epoch", "steps_per_epoch")]
    columns.append(("of model alone", "of_model"))
    if args.repeats > 1:
        columns.append(("runs, round by round", "rates"))
    write_result(args.out, "vit_e2e", {k: str(v) for k, v in vars(args).items()}, rows, markdown(columns, rows))


if __name__ == "__main__":
    main()
