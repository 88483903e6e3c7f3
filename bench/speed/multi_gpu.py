"""Multi-GPU scaling of ``mixbench run``: DDP on 2 GPUs against 1 for llama_130m and vit_small, and FSDP for llama_1b.

Each row is a short ``mixbench run`` (paper recipe, ``compile=true``, bf16-mixed) in its own process; its speed is
the trainer's own ``perf/items_per_sec`` (tokens or images per second over all GPUs,
:class:`mixbench.training.callbacks.ThroughputMonitor`):
the median of the logged windows after the first (which holds compilation).  Peak memory per GPU is ``nvidia-smi``'s
``memory.used`` sampled every 0.5 s (CUDA context and the caching allocator's reserve included).  The two 1-GPU rows
run side by side (one on each GPU of ``--gpus``), then the 2-GPU rows one after the other.  Prints a table with the 2-GPU / 1-GPU
scaling and the hours one paper-scale run would take on the row's GPUs, and writes JSON.

    python bench/speed/multi_gpu.py --text '.data/textmix3/pkgtext-train.*.json.gz' --out bench/speed/results/multi_gpu_h100x2.json

Data, offline: LM rows read the C4-format shards of ``--text`` (``pkgtext-validation.*`` beside them) with the
embedded 8,192-token tokenizer, packed into 256-token sequences; models keep the paper's 32,000-word vocabulary
(head FLOPs as in the paper).  ViT rows use the ImageNet recipe (``in1k_vit_small``: mixup/cutmix, EMA, drop path)
at 224 px on an ImageNet-style folder of ``--vit-images`` JPEGs (the embedded CIFAR-10 photos upscaled to 320 px, as
``bench/speed/image_loader.py`` writes them), read with ``data.pipeline=gpu data.overlap=true``: ``--vit-workers`` per GPU decode
and crop, the GPU does the rest (``--vit-pipeline nvjpeg``: the GPU decodes too).  The input pipeline can limit images/s:
compare with ``bench/speed/image_loader.py``.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, fmt, gpu_names, text_table, write_table_result  # noqa: E402  (bench/speed/ is not a package)
from image_loader import write_jpegs  # noqa: E402

from mixbench.training.config import compose  # noqa: E402

log = logging.getLogger("multi_gpu")
IMAGENET_TRAIN_IMAGES = 1_281_167


@dataclass
class Row:
    """One ``mixbench run``: ``name`` (e.g. ``llama_130m ddp``), the GPUs it sees, its arguments."""

    name: str
    model: str
    gpus: str
    args: list[str]
    paper_task: str
    result: dict = field(default_factory=dict)

    @property
    def num_gpus(self) -> int:
        return len(self.gpus.split(","))


def lm_args(text: str, steps: int, log_every: int, cache: Path) -> list[str]:
    return [
        f"data.path={text}",
        "data.tokenizer=embedded",
        "data.mode=pack",
        "data.num_workers=2",
        f"data.cache_dir={cache}",
        "data.max_val_tokens=100000",
        f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={log_every}",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1000",
        "trainer.limit_val_batches=2",
    ]


def vit_args(root: Path, steps: int, log_every: int, workers: int, pipeline: str) -> list[str]:
    return [
        "data=imagefolder",
        f"data.root={root}",
        f"data.pipeline={pipeline}",
        *(["data.overlap=true"] if pipeline in ("gpu", "nvjpeg") else []),
        "data.batch_size=128",
        "data.eval_batch_size=250",
        f"data.num_workers={workers}",
        f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={log_every}",
        "trainer.check_val_every_n_epoch=1000",
        "trainer.limit_val_batches=2",
    ]


def rows_for(args, jpegs: Path, cache: Path) -> list[list[Row]]:
    """The phases, in order: rows of a phase run at the same time (on different GPUs)."""
    common = ["norm=pre", "save_weights=false", "divergence.unigram_floor=false", "trainer.enable_progress_bar=false", "compile=true"]
    if args.compile_mode:
        common.append(f"compile.mode={args.compile_mode}")
    lm = lm_args(args.text, args.lm_steps, args.lm_log_every, cache)
    lm_1b = lm_args(args.text, args.fsdp_steps, args.fsdp_log_every, cache)
    vit = vit_args(jpegs, args.vit_steps, args.vit_log_every, args.vit_workers, args.vit_pipeline)
    llama = [*common, "task=c4_llama_130m", *lm]
    vit_small = [*common, "task=in1k_vit_small", *vit]
    fsdp = [
        *common,
        "task=c4_llama_1b",
        *lm_1b,
        "trainer.strategy=fsdp",
        f"data.batch_size={args.fsdp_micro_batch}",
        f"fsdp.activation_checkpointing={str(args.fsdp_checkpointing).lower()}",
        f"compile={str(not args.fsdp_no_compile).lower()}",
    ]
    ddp = ["trainer.devices=2", "trainer.strategy=ddp"]
    first, second = args.gpus.split(",")
    both = args.gpus
    variants = [
        [Row(f"llama_130m DDP 2 GPUs {variant}", "llama_130m", both, [*llama, *ddp, *variant.split(",")], "c4_llama_130m")]
        for variant in args.ddp_variants
    ]
    return [
        [
            Row("llama_130m 1 GPU", "llama_130m", first, llama, "c4_llama_130m"),
            Row("vit_small 1 GPU", "vit_small", second, vit_small, "in1k_vit_small"),
        ],
        [Row("llama_130m DDP 2 GPUs", "llama_130m", both, [*llama, *ddp], "c4_llama_130m")],
        [Row("vit_small DDP 2 GPUs", "vit_small", both, [*vit_small, *ddp], "in1k_vit_small")],
        [Row("llama_1b FSDP 2 GPUs", "llama_1b", both, [*fsdp, "trainer.devices=2"], "c4_llama_1b")],
        *variants,
    ]  # the optional rows last, where the time budget cuts first


class MemoryPoller:
    """Peak ``nvidia-smi`` memory.used (MiB) per GPU index while running."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak, self._stop = interval, {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in out.strip().splitlines():
                index, used = (int(v) for v in line.split(","))
                self.peak[index] = max(self.peak.get(index, 0), used)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def window_throughputs(run_dir: Path) -> list[float]:
    """Every logged ``perf/items_per_sec`` of a run, in order."""
    path = run_dir / "logs" / "metrics.csv"
    if not path.is_file():
        return []
    with path.open() as f:
        return [float(r["perf/items_per_sec"]) for r in csv.DictReader(f) if r.get("perf/items_per_sec")]


def summarize(row: Row, run_dir: Path, rc: int | None, seconds: float, peak_mib: dict, out_dir: Path) -> dict:
    record = json.loads((run_dir / "record.json").read_text()) if (run_dir / "record.json").is_file() else {}
    windows = window_throughputs(run_dir)
    steady = windows[1:] or windows
    per_sec = statistics.median(steady) if steady else None
    gpus = [int(g) for g in row.gpus.split(",")]
    return {
        "row": row.name,
        "model": row.model,
        "gpus": row.num_gpus,
        "status": record.get("status", "failed" if rc else "no record"),
        "returncode": rc,
        "error": record.get("error"),
        "items_per_sec": per_sec,
        "items_per_sec_per_gpu": per_sec / row.num_gpus if per_sec else None,
        "windows": windows,
        "mfu": (record.get("throughput") or {}).get("perf/mfu"),
        "peak_mem_gib_per_gpu": [round(peak_mib.get(g, 0) / 1024, 2) for g in gpus],
        "wall_s": round(seconds, 1),
        "effective": record.get("effective"),
        "run_dir": str(run_dir),
        "console": str(out_dir / f"{slug(row.name)}.txt"),
        "args": row.args,
    }


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "_", name.lower())


def run_phase(phase: list[Row], runs: Path, out_dir: Path, deadline: float) -> None:
    """Run the rows of a phase side by side, each killed (its whole process group) at ``deadline``."""
    env = {
        **os.environ,
        "NCCL_NVLS_ENABLE": "0",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    started, procs = time.perf_counter(), []
    with MemoryPoller() as memory:
        for row in phase:
            run_dir = runs / f"{slug(row.name)}-{int(time.time())}"
            console = (out_dir / f"{slug(row.name)}.txt").open("w")
            cmd = [sys.executable, "-m", "mixbench.cli", "run", *row.args, f"run_dir={run_dir}"]
            log.info("%s: CUDA_VISIBLE_DEVICES=%s %s", row.name, row.gpus, " ".join(cmd[2:]))
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env={**env, "CUDA_VISIBLE_DEVICES": row.gpus},
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            procs.append((row, run_dir, proc, console))
        for row, run_dir, proc, console in procs:
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and the DDP processes it launched
                rc = proc.wait()
                log.warning("%s: stopped at the time budget", row.name)
            console.close()
            row.result = summarize(row, run_dir, rc, time.perf_counter() - started, memory.peak, out_dir)
            log.info("%s: %s, %s items/s", row.name, row.result["status"], row.result["items_per_sec"])


def paper_hours(row: Row) -> float | None:
    """Hours one paper-scale run of ``row.paper_task`` takes at the row's measured speed on its GPUs."""
    per_sec = row.result.get("items_per_sec")
    if not per_sec:
        return None
    cfg = compose([f"task={row.paper_task}"])
    if cfg.task.family == "lm":
        items = cfg.trainer.max_steps * cfg.data.global_batch_size * cfg.data.seq_len
    else:
        items = cfg.trainer.max_epochs * IMAGENET_TRAIN_IMAGES
    return items / per_sec / 3600


def add_scaling(rows: list[Row]) -> None:
    """Each row's speed-up over its model's one-GPU row, and the hours a paper-scale run takes at its speed."""
    single = {r.model: r.result.get("items_per_sec") for r in rows if r.num_gpus == 1}
    for r in rows:
        res, one = r.result, single.get(r.model)
        res["scaling_vs_1gpu"] = res["items_per_sec"] / one if r.num_gpus > 1 and one and res.get("items_per_sec") else None
        res["paper_run_hours"] = paper_hours(r)


def table(results: list[dict], markdown: bool = False) -> str:
    """The rows' results (after ``add_scaling``) as a fixed-width table, or a Markdown one."""
    columns = (
        ("run", -max([24] + [len(res["row"]) + 2 for res in results]), lambda res: res["row"]),
        ("items/s", 12, lambda res: fmt(res["items_per_sec"], ",.0f")),
        ("per GPU", 11, lambda res: fmt(res["items_per_sec_per_gpu"], ",.0f")),
        ("scaling", 9, lambda res: fmt(res["scaling_vs_1gpu"], ".2f", "x")),
        ("MFU", 7, lambda res: fmt(res["mfu"], ".1%")),
        ("peak GiB/GPU", 15, lambda res: "/".join(f"{m:.1f}" for m in res["peak_mem_gib_per_gpu"])),
        ("paper run h", 13, lambda res: fmt(res["paper_run_hours"], ".1f")),
        ("  status", 0, lambda res: "  " + res["status"]),
    )
    return text_table(results, columns, markdown=markdown)


def write_json(args, rows: list[Row], final: bool = False) -> None:
    """The JSON after each phase (partial results survive a time-out); ``final``: the table as Markdown beside it too."""
    done = [r for r in rows if r.result]
    add_scaling(done)
    write_table_result(args, "multi_gpu", [r.result for r in done], table, final, env={"NCCL_NVLS_ENABLE": "0"})


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", default=".data/textmix3/pkgtext-train.*.json.gz", help="C4-format training shards (glob)")
    ap.add_argument("--budget", type=float, default=480, help="seconds for all rows; a row still running then is stopped")
    ap.add_argument("--lm-steps", type=int, default=30)
    ap.add_argument("--lm-log-every", type=int, default=10)
    ap.add_argument("--vit-steps", type=int, default=120)
    ap.add_argument("--vit-log-every", type=int, default=30)
    ap.add_argument("--vit-workers", type=int, default=14, help="data loader workers per GPU (JPEG decode + crop on the CPU)")
    ap.add_argument(
        "--vit-pipeline",
        default="gpu",
        choices=["cpu", "gpu", "nvjpeg", "dali"],
        help="data.pipeline of the ViT rows: gpu (workers decode + crop), nvjpeg (workers read the files, the GPU decodes), "
        "dali (NVIDIA DALI decodes and augments on the GPU: scaling without the CPU as the limit) or cpu",
    )
    ap.add_argument("--vit-images", type=int, default=40_000, help="JPEGs written for the ViT rows (no epoch ends during a row)")
    ap.add_argument("--fsdp-steps", type=int, default=12)
    ap.add_argument("--fsdp-log-every", type=int, default=3)
    ap.add_argument("--fsdp-micro-batch", type=int, default=64, help="llama_1b sequences per GPU per micro-batch (global 512)")
    ap.add_argument("--fsdp-checkpointing", action="store_true", help="activation checkpointing of the llama_1b blocks")
    ap.add_argument("--fsdp-no-compile", action="store_true", help="llama_1b eager (the other rows compile)")
    ap.add_argument("--gpus", default="0,1", help="the two GPUs (nvidia-smi / PCI bus order) the rows use")
    ap.add_argument(
        "--ddp-variants",
        nargs="*",
        default=[],
        help="extra llama_130m DDP rows, each a comma list of ddp.* settings (e.g. ddp.bucket_cap_mb=100,ddp.gradient_as_bucket_view=true)",
    )
    ap.add_argument("--repeats", type=int, default=1, help="run the phases this many times (rows named '... #k'): the spread")
    ap.add_argument("--compile-mode", default=None, help="compile.mode of every row (e.g. max-autotune-no-cudagraphs)")
    ap.add_argument("--dry-run", action="store_true", help="print the rows' commands and exit")
    ap.add_argument("--only", nargs="*", help="rows whose name contains one of these words (e.g. llama_130m fsdp)")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/multi_gpu.json"))
    args = ap.parse_args(argv)
    if len(args.gpus.split(",")) != 2:
        ap.error(f"--gpus {args.gpus}: name two GPUs, e.g. 2,3")
    return args


def repeated(phases: list[list[Row]], repeats: int) -> list[list[Row]]:
    """The phases ``repeats`` times over, rows renamed ``<name> #k`` from the second round on."""
    out = list(phases)
    for k in range(2, repeats + 1):
        out += [[Row(f"{r.name} #{k}", r.model, r.gpus, list(r.args), r.paper_task) for r in phase] for phase in phases]
    return out


def selected(phases: list[list[Row]], only: list[str] | None) -> list[list[Row]]:
    """The rows of each phase whose name contains one of the words ``only`` (all rows without it)."""
    if not only:
        return phases
    return [[r for r in phase if any(w.lower() in r.name.lower() for w in only)] for phase in phases]


def check_text(text: str) -> None:
    """The LLaMA rows read C4-format train shards (``--text``, a glob) with a validation shard beside them."""
    shards = glob.glob(str(REPO / text) if not Path(text).is_absolute() else text)
    if not shards or not glob.glob(str(Path(shards[0]).parent / "*validation*")):
        raise SystemExit(f"--text {text}: need C4-format train shards and a *validation* shard beside them (e.g. .data/textmix3)")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    if args.dry_run:
        for phase in selected(repeated(rows_for(args, Path("<jpegs>"), REPO / ".data" / "token_cache"), args.repeats), args.only):
            for r in phase:
                log.info("CUDA_VISIBLE_DEVICES=%s mixbench run %s", r.gpus, " ".join(r.args))
        return 0
    deadline = time.perf_counter() + args.budget
    if any(r.model.startswith("llama") for phase in selected(rows_for(args, Path("<jpegs>"), Path()), args.only) for r in phase):
        check_text(args.text)
    if len(gpu_names()) < 2:
        raise SystemExit(f"needs 2 GPUs, nvidia-smi lists {len(gpu_names())}")
    out_dir = args.out.with_suffix("")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="multi_gpu-", dir=REPO / ".data" if (REPO / ".data").is_dir() else None))
    jpegs = work / "jpegs"
    write_jpegs(jpegs, args.vit_images, size=320)
    phases = selected(repeated(rows_for(args, jpegs, REPO / ".data" / "token_cache"), args.repeats), args.only)
    rows = [r for phase in phases for r in phase]
    for phase in filter(None, phases):
        if time.perf_counter() > deadline:
            log.warning("time budget spent: skipping %s", ", ".join(r.name for r in phase))
            continue
        run_phase(phase, work / "runs", out_dir, deadline)
        write_json(args, rows)
    write_json(args, rows, final=True)
    return 0 if all(r.result.get("status") == "completed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
