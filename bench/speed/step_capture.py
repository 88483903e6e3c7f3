"""The captured training step (``cuda_graph_step``) against the uncaptured one, through ``mixbench run`` on one GPU.

One ``--group`` a call, each a set of rows run ``--repeats`` times in rounds whose order rotates (vit_e2e's rounds;
each row reports its median and every run):

* ``vit_s``: the ViT-S ImageNet recipe on ``--num-images`` JPEGs with ``data.pipeline=dali``, uncaptured and captured,
  beside the model alone at its best mode (``image_loader.py``'s compiled step on a fixed GPU batch, with and without
  its own CUDA graphs: the faster of the two);
* ``vit_ti``: the placements grid's ViT-Ti proxy run (CIFAR-10 8k, 32 px, patch 4, batch 256) for ``--epochs`` epochs:
  before (per-image crops in ``--workers`` DataLoader workers, uncaptured), the arrays on the GPU alone, and both with
  the captured step (the defaults now);
* ``llama_71m``: the placements grid's LLaMA-71M proxy run (12 blocks, 128 × 256 tokens a step, textmix), uncaptured
  and captured, tokens/s of the last throughput window;
* ``llama_130m``: LLaMA-130M, 64 × 256 tokens a step, the same two rows.

Rates are epoch averages after the first epoch (images) or the last window of ``--steps`` steps (tokens).  ``--merge
OUT IN...`` joins the JSONs of groups run side by side on one machine (each on its own GPU and cores) into one.

    python bench/speed/step_capture.py --group vit_ti --gpu 1 --cifar .data/cifar/cifar10_bigbench.npz --out /tmp/vit_ti.json
    python bench/speed/step_capture.py --merge bench/speed/results/step_capture.json /tmp/vit_s.json /tmp/vit_ti.json ...
    python bench/speed/step_capture.py --group vit_s --dry-run
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Runner, epoch_average, markdown, start_logging, vit_run_args, write_files, write_result  # noqa: E402  (bench/speed/ is not a package)
from image_loader import training_step, write_jpegs  # noqa: E402
from vit_e2e import rotated_rounds, row_summary  # noqa: E402

log = logging.getLogger("step_capture")
GROUPS = ("vit_s", "vit_ti", "llama_71m", "llama_130m")
UNCAPTURED, CAPTURED = "cuda_graph_step=false", "cuda_graph_step=true"


def vit_ti_args(args) -> list[str]:
    """The placements grid's ViT-Ti proxy run (configs/grids/placements.yaml), ``--epochs`` epochs, no validation inside."""
    return [
        "task=in1k_vit_tiny",
        "norm=pre",
        "scale=proxy",
        "data=cifar10_proxy",
        f"data.path={args.cifar}",
        "data.batch_size=256",
        "model.patch_size=4",
        f"trainer.max_epochs={args.epochs}",
        "optim.warmup_epochs=1",
        "ema.decay=0.999",
        "trainer.check_val_every_n_epoch=1000",
        "trainer.limit_val_batches=1",
    ]


def llama_args(args, model: list[str], batch: int) -> list[str]:
    return [
        "task=c4_llama_71m",
        "norm=pre",
        "scale=proxy",
        *model,
        "data.mode=pack",
        f"data.batch_size={batch}",
        f"data.global_batch_size={batch}",
        f"data.path={args.text}",
        "data.tokenizer=embedded",
        "model.vocab_size=8192",
        "data.max_val_tokens=100000",
        f"trainer.max_steps={args.steps}",
        "trainer.val_check_interval=null",
        "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=10",
    ]


def group_rows(args, jpegs: Path | None) -> list[tuple[str, list[str], str]]:
    """(row name, ``mixbench run`` arguments, rate kind: images from epochs or tokens from the last window)."""
    common = ["save_weights=false", "compile=true", "trainer.enable_progress_bar=false", "divergence.unigram_floor=false"]
    if args.group == "vit_s":
        base = [
            *vit_run_args(args, jpegs, "pre", "dali", validate_every=1000),
            "trainer.limit_val_batches=2",
            "trainer.log_every_n_steps=10",
        ]
        return [(f"ViT-S DALI, {c}", [*base, c], "epochs") for c in (UNCAPTURED, CAPTURED)]
    if args.group == "vit_ti":
        base = [*vit_ti_args(args), *common]
        before = [*base, "data.pipeline=cpu", f"data.num_workers={args.workers}", UNCAPTURED]
        return [
            (f"ViT-Ti proxy, before: data.pipeline=cpu ({args.workers} workers), {UNCAPTURED}", before, "epochs"),
            (f"ViT-Ti proxy, data.pipeline=gpu, {UNCAPTURED}", [*base, "data.pipeline=gpu", UNCAPTURED], "epochs"),
            (f"ViT-Ti proxy, after: data.pipeline=gpu, {CAPTURED}", [*base, "data.pipeline=gpu", CAPTURED], "epochs"),
        ]
    model, batch = (["model.num_layers=12"], 128) if args.group == "llama_71m" else (["model=llama_130m"], 64)
    base = [*llama_args(args, model, batch), *common]
    return [(f"{args.group} proxy, {c}", [*base, c], "tokens") for c in (UNCAPTURED, CAPTURED)]


def rate_of(record: dict, kind: str) -> dict:
    """Epoch averages for image rows; tokens/s of the last throughput window for LLaMA rows (in vit_e2e's keys)."""
    if kind == "epochs":
        return epoch_average(record)
    rate = (record.get("throughput") or {}).get("perf/items_per_sec")
    return {"items_per_sec": rate, "steps_per_epoch": None, "epochs_timed": 0, "mfu": (record.get("throughput") or {}).get("perf/mfu")}


def model_alone(args) -> dict | None:
    """The ViT-S step alone at its best mode: image_loader.py's compiled step with and without CUDA graphs, the faster."""
    if args.dry_run:
        log.info("model alone: image_loader.py's compiled vit_small step, batch %d, defaults and cudagraphs=true", args.batch)
        return None
    import torch

    torch.cuda.set_device(int(args.gpu))  # the card the runs get
    rates = {}
    for options in ("defaults", "cudagraphs=true"):
        step = training_step("vit_small", args.batch, "cuda", options)
        step.warm_up(5)
        rates[options] = step.images_per_sec(args.model_steps)
        del step
        torch.cuda.empty_cache()
    best = max(rates, key=rates.get)
    return {
        "row": f"ViT-S model alone (random GPU batch), best of {', '.join(f'{k} {v:,.0f}' for k, v in rates.items())}: {best}",
        "images_per_sec": rates[best],
        "of_model": 1.0,
    }


def measure(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        jpegs = Path(tmp) / "jpegs" if args.group == "vit_s" else None
        if jpegs is not None and not args.dry_run:
            write_jpegs(jpegs, args.num_images, 320)
        alone = model_alone(args) if args.group == "vit_s" else None
        runner = Runner(Path(tmp), args.dry_run)
        settings = group_rows(args, jpegs)
        runs: dict[str, list] = {name: [] for name, _, _ in settings}
        for k, i, (name, argv, kind) in rotated_rounds(settings, args.repeats):
            record = runner.mixbench(argv, args.gpu)
            runs[name].append((k, i, record, rate_of(record, kind)))
            if not args.dry_run:  # the JSON alone after every run: a call's time limit keeps the rows so far
                write(args.out, args, summary_rows(args.group, settings, runs, alone), final=False)
    if not args.dry_run:
        write(args.out, args, summary_rows(args.group, settings, runs, alone))


def summary_rows(group: str, settings: list, runs: dict[str, list], alone: dict | None) -> list[dict]:
    """The model-alone row (vit_s), then a row per setting that has runs: medians over its runs so far."""
    reference = alone["images_per_sec"] if alone else None
    rows = [alone] if alone else []
    for name, _, _ in settings:
        if runs[name]:
            row = row_summary(name, runs[name], reference) | {"group": group}
            row["cuda_graph_step"] = runs[name][0][2].get("cuda_graph_step")
            rows.append(row)
    return rows


COLUMNS = [("row", "row"), ("items/s (median)", "images_per_sec"), ("runs, round by round", "rates"), ("of model alone", "of_model")]


def write(out: Path, args, rows: list[dict], final: bool = True) -> None:
    """The group's JSON; ``final``: its Markdown table beside it too."""
    write_result(out, "step_capture", {k: str(v) for k, v in vars(args).items()}, rows, markdown(COLUMNS, rows) if final else None)


def merge(out: Path, inputs: list[Path]) -> None:
    """One JSON (and table) of JSONs written side by side on one machine — this bench's groups, and ``multi_gpu.py``'s
    rows (their ``items_per_sec`` shown in the same column, ``scaling_vs_1gpu`` kept): each part's machine, settings
    and rows as it wrote them, the first part's machine, versions and commit on top."""
    parts = [json.loads(p.read_text()) for p in inputs]
    rows = []
    for path, part in zip(inputs, parts):
        for row in part["rows"]:
            rows.append({"part": path.name, "images_per_sec": row.get("items_per_sec"), **row})
    first = parts[0]
    result = {key: first.get(key) for key in ("machine", "versions", "git")}
    parts_info = [
        {"file": p.name, "benchmark": part["benchmark"], "machine": part.get("machine"), "settings": part["settings"]}
        for p, part in zip(inputs, parts)
    ]
    write_files(
        out,
        {"benchmark": "step_capture", **result, "settings": {"merged": [p.name for p in inputs]}, "rows": rows, "parts": parts_info},
        markdown([("part", "part"), *COLUMNS], rows),
    )


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", choices=GROUPS)
    ap.add_argument("--merge", nargs="+", type=Path, metavar="PATH", help="OUT IN...: join the JSONs of several groups")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-images", type=int, default=8192, help="vit_s: JPEGs written (steps an epoch = this / --batch)")
    ap.add_argument("--batch", type=int, default=256, help="vit_s: images a step")
    ap.add_argument("--epochs", type=int, default=3, help="image rows: epochs (the first is not timed)")
    ap.add_argument("--steps", type=int, default=120, help="LLaMA rows: optimizer steps")
    ap.add_argument("--model-steps", type=int, default=40)
    ap.add_argument("--workers", type=int, default=max(1, len(os.sched_getaffinity(0)) - 2))
    ap.add_argument("--cifar", default=".data/cifar/cifar10_bigbench.npz")
    ap.add_argument("--text", default=".data/textmix3/pkgtext-train.*.json.gz")
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/step_capture.json"))
    ap.add_argument("--dry-run", action="store_true", help="print what would run and exit")
    args = ap.parse_args(argv)
    if (args.group is None) == (args.merge is None):
        ap.error("give --group (measure) or --merge OUT IN... (join)")
    return args


def main(argv=None) -> None:
    start_logging()
    args = parse_args(argv)
    if args.merge:
        merge(args.merge[0], args.merge[1:])
    else:
        measure(args)


if __name__ == "__main__":
    main()
