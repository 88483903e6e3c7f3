"""Where one ``mixbench run`` spends its wall time outside its steady-state steps: the LLaMA-1B ladder run, before and
after the overhead fixes, on one GPU.

Each variant is one ``mixbench run`` of the ladder's 1B settings (``task=c4_llama_1b``, packed 256-token text, micro-batch
= global batch 128, bf16, ``compile=true``, the captured step) for ``--steps`` steps with four validations of the whole
validation shard, as the ladder's 764-step run has, and the record's ``time_parts``
(:class:`mixbench.training.callbacks.RunClock`): before the run (Python, imports, the config), before fit (data, model
build), Lightning's setup, the first 10 steps (compilation and capture), each validation, the later steps, the final
validation, after fit (teardown, the record), the median steady step; and the process's wall time as this bench
clocked it.  A short run measures every fixed cost of the full one; the projection to ``--full-steps`` adds the steady
steps it lacks, to the run's wall time and to the process's:

    projected wall = wall + (full_steps − steps) × steady_step;   ratio = projected wall / (full_steps × steady_step)

The steady step is the median of the 10-step windows between validations, so ``--steps`` ≥ 40: four validations at
least 10 steps apart.  Before the variants, one ``python -X importtime`` of what ``mixbench run`` imports before its
run starts (``imports`` in the JSON: the process's wall time, the imports' total and the slowest modules): the part
of ``before_run_s`` that is imports.

The target (issue 49) is ratio ≤ 1.15 at 764 steps on one H200.  Variants (``--variants``, comma-separated):
``model`` (whole-model compile: the ladder's runs until 2026-12-07), ``blocks`` (``compile.scope=blocks``: the
repeated block compiled once), ``reuse`` (``blocks`` + ``final_validation=reuse_fit``: fit's validation at the last step
is the record's, no second full pass) and ``cuda_init`` (``reuse`` + ``init_device=cuda``: the model built on the
GPU); ``recompute`` (``reuse`` + ``activation_checkpointing=true``: each block recomputed in the backward pass, the
1B run on an 80 GB card) measures what recomputing costs.  Each row says the run's peak GPU memory.  Rows run one
after another on the same card, in the order given, each with empty Inductor and Triton caches (a
fresh machine's first run; a lease's later runs of the same shapes compile faster).

    python bench/speed/run_overhead.py --text '.data/textmix3/pkgtext-train.*.json.gz' --out bench/speed/results/run_overhead_1b.json
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Runner, start_logging, text_table, write_table_result  # noqa: E402

log = logging.getLogger("run_overhead")
VARIANTS = {
    "model": ["compile.scope=model"],  # the ladder's runs until 2026-12-07
    "blocks": ["compile.scope=blocks"],
    "reuse": ["compile.scope=blocks", "final_validation=reuse_fit"],  # + fit's last validation is the record's metrics
    "cuda_init": ["compile.scope=blocks", "final_validation=reuse_fit", "init_device=cuda"],  # + the model built on the GPU
    # reuse + each block's activations recomputed in the backward pass: the 1B run on an 80 GB card (its peak memory)
    "recompute": ["compile.scope=blocks", "final_validation=reuse_fit", "activation_checkpointing=true"],
}
VALIDATIONS = 4
IMPORTS = "import mixbench.cli.app, mixbench.training.run"  # what `mixbench run` imports before its run starts
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)")
MIN_STEPS = VALIDATIONS * 10  # a 10-step window (RunClock.WINDOW) between validations: the steady step


def run_args(args, variant: str) -> list[str]:
    every = args.steps // VALIDATIONS
    return [
        f"task={args.task}",
        f"norm={args.norm}",
        "scale=proxy",
        "data.mode=pack",
        f"data.batch_size={args.batch}",
        f"data.global_batch_size={args.batch}",
        "data.max_val_tokens=1000000",
        f"data.path={args.text}",
        "data.tokenizer=embedded",
        "model.vocab_size=8192",
        "data.num_workers=2",
        f"trainer.max_steps={args.steps}",
        f"trainer.val_check_interval={every}",
        "optim.lr=5e-4",
        "compile=true",
        "save_weights=false",
        "trainer.enable_progress_bar=false",
        *VARIANTS[variant],
    ]


def row(variant: str, record: dict, full_steps: int) -> dict:
    parts = record.get("time_parts") or {}
    out = {"variant": variant, "status": record.get("status"), "error": record.get("error"), **parts}
    out["peak_allocated_gib"] = (record.get("peak_gpu_memory") or {}).get("allocated_gib")
    out["process_s"] = round(record["bench_wall_s"], 1) if record.get("bench_wall_s") else None
    steady, wall, steps = parts.get("steady_step_s"), parts.get("wall_s"), parts.get("steps")
    if steady and wall and steps:
        lacking = (full_steps - steps) * steady  # the steady steps the short run lacks
        out["overhead_s"] = round(wall - steps * steady, 1)
        out["projected_wall_s"] = round(wall + lacking, 1)
        out["projected_ratio"] = round(out["projected_wall_s"] / (full_steps * steady), 3)
        if out["process_s"]:
            out["projected_process_ratio"] = round((out["process_s"] + lacking) / (full_steps * steady), 3)
        out["tokens_per_s"] = round(record["effective"]["global_batch_size"] * 256 / steady) if record.get("effective") else None
    return out


def import_times(text: str, top: int = 8) -> dict:
    """``python -X importtime``'s report → ``total_s`` (the top-level imports' cumulative time) and the ``top`` slowest
    package entries: each module first imported by another package's module (or at the top), with its cumulative
    seconds (its own time and its imports').  The report lists a module after its imports, each level below the top
    indented by two more spaces, so read backwards a module's importer is the latest line one level up."""
    modules = []  # (level, cumulative µs, name)
    for line in text.splitlines():
        if found := IMPORT_LINE.match(line):
            modules.append(((len(found.group(3)) - 1) // 2, int(found.group(2)), found.group(4)))
    total = sum(cumulative for level, cumulative, _ in modules if level == 0)
    importer: dict[int, str] = {}
    entries = []
    for level, cumulative, name in reversed(modules):
        importer[level] = name
        parent = importer.get(level - 1) if level else None
        if parent is None or parent.split(".")[0] != name.split(".")[0]:
            entries.append((cumulative, name))
    slowest = sorted(entries, reverse=True)[:top]
    return {"total_s": round(total / 1e6, 2), "slowest": [{"module": name, "s": round(us / 1e6, 2)} for us, name in slowest]}


def measure_imports(runner: Runner, gpu: str) -> dict | None:
    """One fresh process's :data:`IMPORTS` under ``-X importtime``: its wall time and :func:`import_times`."""
    log_path = runner.work / "importtime.log"
    status, wall = runner.command([sys.executable, "-X", "importtime", "-c", IMPORTS], gpu, log_path)
    if runner.dry_run or status != 0:
        return None
    return {"process_s": round(wall, 2), **import_times(log_path.read_text(errors="replace"))}


def table(rows: list[dict], markdown: bool = False) -> str:
    def num(key: str, spec: str = ".1f"):
        return lambda r: format(r[key], spec) if isinstance(r.get(key), (int, float)) else "-"

    columns = [
        ("variant", -8, lambda r: r["variant"]),
        ("process s", 10, num("process_s")),
        ("before run", 11, num("before_run_s")),
        ("wall s", 8, num("wall_s")),
        ("before fit", 11, num("before_fit_s")),
        ("setup", 7, num("setup_s")),
        ("first 10 steps", 15, num("first_steps_s")),
        ("validations", 24, lambda r: "+".join(f"{v:.1f}" for v in r.get("validations_s") or []) or "-"),
        ("later steps", 12, num("later_steps_s")),
        ("final val", 10, num("final_validation_s")),
        ("after fit", 10, num("after_fit_s")),
        ("steady step", 12, num("steady_step_s", ".4f")),
        ("overhead s", 11, num("overhead_s")),
        ("proj. wall", 11, num("projected_wall_s")),
        ("ratio", 7, num("projected_ratio", ".3f")),
        ("process ratio", 14, num("projected_process_ratio", ".3f")),
        ("peak GiB", 9, num("peak_allocated_gib")),
    ]
    return text_table(rows, columns, ok=lambda r: r.get("status") in ("completed", "stalled"), lead=1, markdown=markdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True, help="C4-format training shards (a glob), e.g. .data/textmix3/pkgtext-train.*.json.gz")
    ap.add_argument("--task", default="c4_llama_1b")
    ap.add_argument("--norm", default="pre")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=120, help="steps of each short run (a multiple of 4, ≥ 40: validations 10+ steps apart)")
    ap.add_argument("--full-steps", type=int, default=764, help="the full run the short one is projected to (the 1B ladder run)")
    ap.add_argument("--variants", default="model,cuda_init")
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/run_overhead_1b.json"))
    ap.add_argument("--dry-run", action="store_true", help="log the commands only")
    args = ap.parse_args()
    start_logging()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or args.steps % VALIDATIONS or args.steps < MIN_STEPS:
        ap.error(f"variants must be among {', '.join(VARIANTS)} and --steps a multiple of {VALIDATIONS}, at least {MIN_STEPS}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="run_overhead_") as work:
        runner = Runner(Path(work), args.dry_run, timeout=580)
        imports = measure_imports(runner, args.gpu)
        log.info("imports: %s", imports)
        for variant in variants:
            for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # each variant compiles from nothing, as a
                os.environ[name] = str(Path(work) / f"{name.split('_')[0].lower()}_{variant}")  # fresh machine's first run does
            record = runner.mixbench(run_args(args, variant), args.gpu)
            rows.append(row(variant, record, args.full_steps))
            log.info("%s: %s", variant, rows[-1])
            if not args.dry_run:
                write_table_result(args, "run_overhead", rows, table, final=False, imports=imports)
    if not args.dry_run:
        write_table_result(args, "run_overhead", rows, table, imports=imports)
    print(table(rows))


if __name__ == "__main__":
    main()
