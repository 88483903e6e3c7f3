"""The speed benches' shared harness: every bench in bench/speed/ writes its result with ``write_result`` — a JSON of its
rows with the machine (cards, cores, CPU, torch / CUDA), package versions and the git commit, and its table as Markdown
beside it (``.md``) — and builds rows and tables from the pieces here.

    from harness import write_result, text_table  # bench/speed/ is the scripts' directory

* Results: ``write_result`` (``write_table_result`` for the benches with a ``table(rows, markdown)``; ``write_files``
  for a result that is no measurement of this machine), ``machine``, ``gpu_names``.
* Tables: ``markdown`` (columns of (title, key)), ``text_table`` (columns of (title, width, cell): fixed-width for the
  console, or Markdown), ``fmt``.
* Rows: ``add_ratios`` (against the peer and the baseline), ``free_device_memory`` (between rows).
* ``mixbench run`` in a subprocess on chosen GPUs: ``Runner``, ``epoch_average``, ``vit_run_args``,
  ``image_bench_arguments``, ``start_logging``.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from mixbench.results.provenance import git_commit, package_versions  # noqa: E402

log = logging.getLogger("harness")
Column = tuple[str, int, Callable[[dict], str]]  # title, width (negative: left-aligned), the cell of a row


# ----------------------------------------------------------------------------------------------------- results
def gpu_names() -> list[str]:
    """The machine's cards as ``nvidia-smi`` names them (none without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine() -> dict:
    """Card(s), usable and total cores, CPU, platform, torch / CUDA versions."""
    import torch

    return {
        "cards": gpu_names(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "cores_total": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def write_result(out: Path, benchmark: str, settings: dict, rows: list[dict], md: str | None = None, *, versions=None, **extra) -> None:
    """``out`` (JSON): the benchmark, machine, settings, package versions (and ``versions``), git commit, rows and
    ``extra``.  With ``md`` (the Markdown table: the final write) also ``out`` with ``.md``, and the table is logged;
    without it (a partial write after a row, which a time-out leaves behind) the JSON alone."""
    result = {
        "benchmark": benchmark,
        "machine": machine(),
        "settings": settings,
        "versions": package_versions() | (versions or {}),
        "git": git_commit(),
        "rows": rows,
        **extra,
    }
    write_files(Path(out), result, md)


def write_table_result(args, benchmark: str, rows: list[dict], table: Callable[..., str], final: bool = True, **extra) -> None:
    """``write_result`` for a bench whose ``table(rows, markdown=False)`` renders its rows: ``args`` are the settings
    (``args.out`` the path), the JSON keeps the fixed-width table, and ``final`` writes the Markdown one beside it."""
    md = table(rows, markdown=True) if final else None
    write_result(args.out, benchmark, vars(args) | {"out": str(args.out)}, rows, md, table=table(rows), **extra)


def write_files(out: Path, result: dict, md: str | None = None) -> None:
    """``result`` as JSON at ``out`` and, when given, ``md`` beside it (``.md``), logged with both paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if md is not None:
        out.with_suffix(".md").write_text(md + "\n")
        log.info("\n%s\nwrote %s and %s", md, out, out.with_suffix(".md"))


# ------------------------------------------------------------------------------------------------------ tables
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

    return text_table(rows, [(title, 0, lambda r, k=key: cell(r.get(k))) for title, key in columns], markdown=True)


def fmt(value, spec: str, suffix: str = "") -> str:
    """``value`` formatted, or ``-`` when it is missing (None or 0)."""
    return format(value, spec) + suffix if value else "-"


def text_table(
    rows: list[dict], columns: Sequence[Column], ok: Callable[[dict], bool] = lambda r: True, lead: int = 0, markdown: bool = False
) -> str:
    """A header, a rule and a line per row, fixed-width (or, with ``markdown``, a Markdown table); a row that is not
    ``ok`` shows its first ``lead`` cells and ``failed: <error>``."""

    def line(cells: Sequence[str], spec: Sequence[Column]) -> str:
        if markdown:
            return "| " + " | ".join(cell.strip() for cell in cells) + " |"
        return "".join(cell.ljust(-width) if width < 0 else cell.rjust(width) for cell, (_, width, _) in zip(cells, spec))

    header = line([title for title, _, _ in columns], columns)
    lines = [header, "|" + "---|" * len(columns) if markdown else "-" * len(header)]
    for r in rows:
        if ok(r):
            lines.append(line([cell(r) for _, _, cell in columns], columns))
        elif markdown:
            lines.append(line([cell(r) for _, _, cell in columns[:lead]] + [f"failed: {r['error']}"], columns))
        else:
            lines.append(line([cell(r) for _, _, cell in columns[:lead]], columns[:lead]) + f"  failed: {r['error']}")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------------- rows
def add_ratios(rows: list[dict], rate: str, peer: str, group: Sequence[str] = ("model",)) -> None:
    """Per row with a ``rate``: ``<peer>`` against the peer library's row (``norm`` None), ``vs_base`` against mixbench
    pre with every option at its default, ``vs_pre`` against mixbench pre with the same options (the cost of the
    placement) — each among the rows that agree on every key of ``group``; the first such row counts."""

    def find(r: dict, norm: str | None, options: str | None) -> float | None:
        return next(
            (
                o[rate]
                for o in rows
                if all(o[k] == r[k] for k in group) and o["norm"] == norm and o[rate] and (options is None or o["options"] == options)
            ),
            None,
        )

    for r in rows:
        if r[rate]:
            peer_rate, base, pre = find(r, None, None), find(r, "pre", "defaults"), find(r, "pre", r["options"])
            r[peer] = r[rate] / peer_rate if peer_rate else None
            r["vs_base"] = r[rate] / base if base and r["norm"] else None
            r["vs_pre"] = r[rate] / pre if pre and r["norm"] else None


def free_device_memory(device: str) -> None:
    """Drop compiled graphs and collected tensors so the next row starts from an empty cache."""
    import torch

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------- mixbench run, subprocess
def row_budget_arguments(ap, budget_s: float, max_s: float, out: str, default_device: str) -> None:
    """The arguments the model-throughput benches share: the time budget of candidate rows, device, compile, output."""
    ap.add_argument("--budget-s", type=float, default=budget_s, help="candidate rows start only while they fit in this many seconds")
    ap.add_argument("--max-s", type=float, default=max_s, help="no row starts that would end after this many seconds")
    ap.add_argument("--device", default=default_device)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", type=Path, default=Path(out))


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
