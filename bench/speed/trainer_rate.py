"""How much of the training step's speed survives the trainer: ``mixbench run`` against the bare step of the LLaMA bench.

One GPU, one model and batch, in this order on the same card:

1. **step rate** — ``bench/speed/lm_throughput.py``'s training step (bf16 autocast, compiled model with the loss inside, fused
   Adam) on a fixed random batch of ``--batch`` × ``--seq`` tokens: tokens/s of the GPU work alone;
2. **trainer rate** — ``mixbench run task=c4_pretrain model=<model>`` on real text (``--text``, packed ``--seq`` tokens, the embedded
   tokenizer) with the same micro-batch and no gradient accumulation (``data.global_batch_size`` = ``--batch``),
   ``compile=true``, bf16-mixed: the median of the ``perf/items_per_sec`` windows the trainer logs after the first
   (:class:`mixbench.training.callbacks.ThroughputMonitor`: Lightning's loop, data loading, logging and the learning-rate
   schedule included; validation excluded).

Prints both and their ratio (the target is ≥ 0.95) and writes JSON (``--out``) with the card, versions and commit.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_throughput import random_batch  # noqa: E402  (bench/speed/ is not a package)
from harness import REPO, fmt, free_device_memory, text_table, write_table_result  # noqa: E402
from lm_throughput import Variant, make_step, measure, ours_loss_fn  # noqa: E402
from multi_gpu import window_throughputs  # noqa: E402

from mixbench import build_model  # noqa: E402

log = logging.getLogger("trainer_rate")


def step_rate(name: str, norm: str, args) -> dict:
    """Tokens/s of the bare compiled training step (the LLaMA bench's ``ours pre defaults`` row)."""
    ids, labels = random_batch(name, args.batch, args.seq, args.device)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = build_model(name, norm=norm).train()
    step = make_step(model, ours_loss_fn(model, Variant(), not args.no_compile), ids, labels, args.device, compile_opt=False)
    result = measure(step, args.steps, args.warmup, args.device, ids.numel())
    del model, step
    free_device_memory(args.device)  # the mixbench run that follows needs the card to itself
    return result


def run_command(name: str, norm: str, args, results_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mixbench.cli",
        "run",
        "task=c4_pretrain",
        f"model={name}",
        f"norm={norm}",
        f"data.path={Path(args.text).resolve()}",
        "data.tokenizer=embedded",
        "data.mode=pack",
        f"data.seq_len={args.seq}",
        f"data.batch_size={args.batch}",
        f"data.global_batch_size={args.batch}",
        f"data.num_workers={args.workers}",
        "data.max_val_tokens=100000",
        f"compile={str(not args.no_compile).lower()}",
        "save_weights=false",
        f"trainer.max_steps={args.run_steps}",
        f"trainer.log_every_n_steps={args.log_every}",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1000",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",
        f"results_dir={results_dir}",
    ]


def trainer_rate(name: str, norm: str, args) -> dict:
    """The median logged tokens/s of a short ``mixbench run`` (its first window holds compilation and is left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = run_command(name, norm, args, Path(tmp))
        log.info("%s", " ".join(cmd[2:]))
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        records = list(Path(tmp).rglob("record.json"))
        if proc.returncode or not records:
            log.error("mixbench run failed (%s):\n%s", proc.returncode, proc.stderr[-3000:])
            return {"status": "failed", "returncode": proc.returncode, "stderr_tail": proc.stderr[-3000:], "command": cmd[2:]}
        record = json.loads(records[0].read_text())
        windows = window_throughputs(records[0].parent)
    steady = windows[1:] or windows
    return {
        "status": record["status"],
        "tokens_per_sec": statistics.median(steady) if steady else None,
        "windows": windows,
        "wall_s": record.get("wall_time_s"),
        "effective": record.get("effective"),
        "command": cmd[2:],
    }


COLUMNS = (  # title, width (negative: left-aligned), cell of a row; "-" where the mixbench run failed
    ("model", -12, lambda r: r["model"]),
    ("norm", -6, lambda r: r["norm"]),
    ("step tok/s", 12, lambda r: f"{r['step_tokens_per_sec']:,.0f}"),
    ("trainer tok/s", 15, lambda r: fmt(r["trainer_tokens_per_sec"], ",.0f")),
    ("ratio", 8, lambda r: fmt(r["ratio"], ".3f")),
)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama_130m")
    ap.add_argument("--norms", nargs="+", default=["pre"])
    ap.add_argument("--text", required=True, help="C4-format training shards (glob) for the mixbench run")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30, help="timed steps of the bare step")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--run-steps", type=int, default=300, help="optimizer steps of the mixbench run")
    ap.add_argument("--log-every", type=int, default=25, help="steps per logged throughput window")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/trainer_rate.json"))
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    rows = []
    for norm in args.norms:
        bare = step_rate(args.model, norm, args)
        trainer = trainer_rate(args.model, norm, args)
        ratio = trainer["tokens_per_sec"] / bare["tokens_per_sec"] if trainer.get("tokens_per_sec") else None
        rows.append(
            {
                "model": args.model,
                "norm": norm,
                "batch": args.batch,
                "seq": args.seq,
                "step_tokens_per_sec": bare["tokens_per_sec"],
                "trainer_tokens_per_sec": trainer.get("tokens_per_sec"),
                "ratio": ratio,
                "step": bare,
                "trainer": trainer,
            }
        )
        log.info(
            "%s %s: step %.0f tok/s, trainer %s tok/s, ratio %s",
            args.model,
            norm,
            bare["tokens_per_sec"],
            f"{trainer['tokens_per_sec']:.0f}" if trainer.get("tokens_per_sec") else "n/a",
            f"{ratio:.3f}" if ratio else "n/a",
        )
    write_table_result(args, "trainer_rate", rows, partial(text_table, columns=COLUMNS), device=device)


if __name__ == "__main__":
    main()
