"""Shared by the device benches of issue 21 (``vit_e2e.py``, ``timm_peer.py``, ``fp8_pairs.py``): run ``mixbench run`` in
a subprocess on chosen GPUs and read its record, epoch averages from the record, the machine's description, and the
result files (a Markdown table beside the JSON).

    from device_runs import Runner, machine, write_result  # bench/speed/ is the scripts' directory
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from mixbench.results.provenance import git_commit, package_versions  # noqa: E402

log = logging.getLogger("device_runs")


def image_bench_arguments(ap, out: str) -> None:
    """The arguments the image benches share: the JPEG folder, batch, epochs, workers, GPU, output, dry run."""
    ap.add_argument("--pipelines", nargs="+", default=["cpu", "dali"], choices=["cpu", "gpu", "nvjpeg", "dali"])
    ap.add_argument("--num-images", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=max(1, len(os.sched_getaffinity(0)) - 2))
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--dry-run", action="store_true", help="print what would run and exit")


def vit_run_args(args, root: Path, norm: str, pipeline: str, validate_every: int) -> list[str]:
    """``mixbench run`` arguments of the ImageNet ViT-S recipe on the JPEG folder ``root`` for the image benches."""
    return [
        "task=in1k_vit_small",
        f"norm={norm}",
        "data=imagefolder",
        f"data.root={root}",
        f"data.pipeline={pipeline}",
        f"data.batch_size={args.batch}",
        f"data.num_workers={args.workers}",
        f"trainer.max_epochs={args.epochs}",
        "trainer.max_steps=-1",
        f"trainer.check_val_every_n_epoch={validate_every}",
        "trainer.enable_progress_bar=false",
        "optim.warmup_epochs=null",
        "save_weights=false",
        "divergence.unigram_floor=false",
    ]


def start_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")


def machine() -> dict:
    """Card(s), usable cores, CPU, torch / CUDA versions."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        cards = [line.strip() for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        cards = []
    import torch

    return {
        "cards": cards,
        "cores_usable": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def epoch_average(record: dict, skip: int = 1) -> dict:
    """Items/s over the record's training epochs after the first ``skip`` (compilation, first worker start-up), and the
    steps an epoch had."""
    epochs = (record.get("throughput") or {}).get("epochs") or []
    timed = epochs[skip:] or epochs
    if not timed:
        return {"items_per_sec": None, "steps_per_epoch": None, "epochs_timed": 0}
    items, seconds = sum(e["items"] for e in timed), sum(e["seconds"] for e in timed)
    return {
        "items_per_sec": items / seconds,
        "steps_per_epoch": statistics.median(e["steps"] for e in timed),
        "epochs_timed": len(timed),
        "per_epoch": [e["items_per_sec"] for e in timed],
    }


class Runner:
    """Runs commands (or, with ``dry_run``, logs them) and collects ``mixbench run`` records under ``work``."""

    def __init__(self, work: Path, dry_run: bool, timeout: float = 600):
        self.work, self.dry_run, self.timeout = work, dry_run, timeout
        self.count = 0

    def command(self, argv: list[str], gpus: str, log_path: Path | None = None) -> tuple[int, float]:
        """Exit status and wall seconds of ``argv`` with ``CUDA_VISIBLE_DEVICES=gpus`` (0, 0 in a dry run)."""
        log.info("CUDA_VISIBLE_DEVICES=%s %s", gpus, shlex.join(argv))
        if self.dry_run:
            return 0, 0.0
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # keep carried wheels' folders
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus, "PYTHONPATH": path}
        start = time.perf_counter()
        with open(log_path or os.devnull, "w") as out:
            try:
                status = subprocess.run(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=self.timeout).returncode
            except subprocess.TimeoutExpired:
                status = 124
        return status, time.perf_counter() - start

    def mixbench(self, args: list[str], gpus: str = "0") -> dict:
        """The record of ``mixbench run ARGS`` (``{"status": "failed", ...}`` when it wrote none)."""
        self.count += 1
        results = self.work / f"run{self.count}"
        argv = [sys.executable, "-m", "mixbench.cli", "run", *args, f"results_dir={results}"]
        status, wall = self.command(argv, gpus, self.work / f"run{self.count}.log")
        if self.dry_run:
            return {"status": "dry-run", "args": args}
        records = sorted(results.rglob("record.json"))
        if records:
            record = json.loads(records[0].read_text())
        else:  # it died before writing one (e.g. an import error): the end of its output says why
            log_path = self.work / f"run{self.count}.log"
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:] if log_path.is_file() else []
            record = {"status": "failed", "error": f"exit {status}, no record; output ends: {' | '.join(tail)[-600:]}"}
        record["bench_wall_s"], record["bench_log"] = wall, str(self.work / f"run{self.count}.log")
        return record


def markdown(columns: list[tuple[str, str]], rows: list[dict]) -> str:
    """A Markdown table: ``columns`` = (title, key); floats with thousands separators."""

    def cell(value) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(cell(v) for v in value) + "]"
        return str(value)

    lines = ["| " + " | ".join(t for t, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(k)) for _, k in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_result(out: Path, benchmark: str, settings: dict, rows: list[dict], table: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(table + "\n")
    result = {
        "benchmark": benchmark,
        "machine": machine(),
        "settings": settings,
        "versions": package_versions(),
        "git": git_commit(),
        "rows": rows,
    }
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    log.info("\n%s\nwrote %s and %s", table, out, out.with_suffix(".md"))
