"""LLaMA training throughput, bf16 against fp8 (``trainer.precision=fp8``: torchao float8 Linear layers).

One process, one GPU: the training step of ``bench/speed/lm_throughput.py`` (forward with the loss inside the compiled
model, backward, fused Adam; bf16 autocast; ``torch.compile``) for the bf16 model and, per ``--recipes``, the same
model with the Linear layers that ``mixbench run trainer.precision=fp8`` converts (dims divisible by 16, the LM head
kept in bf16 unless ``--skip`` says otherwise).  Prints tokens/s, the speed-up over bf16, MFU against the card's
dense bf16 peak (so fp8 rows can pass 100 % of what bf16 reaches) and peak memory; writes JSON.

    python bench/speed/fp8_throughput.py --models llama_130m --out bench/speed/results/fp8_throughput.json

Needs ``pip install -e ".[fp8]"`` and a GPU of compute capability ≥ 8.9 for the fp8 rows; ``--recipes`` with no
value measures bf16 only (``--device cpu --no-compile --recipes`` is a smoke run).
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import free_device_memory, text_table, write_table_result  # noqa: E402
from lm_throughput import Variant, make_step, measure, ours_loss_fn  # noqa: E402  (bench/speed/ is not a package)

from mixbench import build_model  # noqa: E402
from mixbench.core.errors import ConfigError  # noqa: E402
from mixbench.models.llama import llama_config  # noqa: E402
from mixbench.training.callbacks import peak_flops  # noqa: E402
from mixbench.training.precision import FP8_RECIPES, check_fp8_runtime, convert_fp8  # noqa: E402

log = logging.getLogger("fp8_throughput")


def candidates(recipes: list[str]) -> list[tuple[str, str | None]]:
    """(label, fp8 recipe or None for bf16) of every row, bf16 first."""
    return [("bf16", None), *((f"fp8 {recipe}", recipe) for recipe in recipes)]


COLUMNS = (  # title, width (negative: left-aligned), cell of a row
    ("model", -12, lambda r: r["model"]),
    ("precision", -17, lambda r: r["precision"]),
    ("tokens/s", 12, lambda r: f"{r['tokens_per_sec']:,.0f}"),
    ("vs bf16", 9, lambda r: f"{r['vs_bf16']:.3f}x"),
    ("MFU", 8, lambda r: f"{r['mfu']:.1%}" if r["mfu"] else "n/a"),
    ("ms/step", 9, lambda r: f"{r['step_ms']:.1f}"),
    ("peak GiB", 9, lambda r: f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] else "n/a"),
    ("fp8 layers", 11, lambda r: str(r["fp8_layers"])),
)


def write_json(args, device_name: str, peak: float | None, rows: list[dict], final: bool = False) -> None:
    """The JSON after each row; ``final``: the table as Markdown beside it too."""
    write_table_result(args, "fp8_throughput", rows, partial(text_table, columns=COLUMNS), final, device=device_name, peak_bf16_flops=peak)


def random_batch(name: str, batch: int, seq: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed random token ids (seed 0) and their next-token labels."""
    ids = torch.randint(0, llama_config(name).vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(0)).to(device)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["llama_130m"])
    ap.add_argument("--norm", default="pre")
    ap.add_argument("--recipes", nargs="*", default=["tensorwise"], choices=FP8_RECIPES, help="fp8 rows (none: bf16 only)")
    ap.add_argument("--skip", nargs="*", default=["head"], help="Linear layers kept in bf16 (fnmatch patterns, as fp8.skip)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--loss", default="torch", help="loss.impl of every row: torch | chunked | liger | cce")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/fp8_throughput.json"))
    args = ap.parse_args()
    if args.recipes:
        try:
            check_fp8_runtime()
        except ConfigError as err:
            ap.error(f"{err} (or pass --recipes with no value for bf16 only)")
    torch.backends.cuda.matmul.allow_tf32 = True
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    peak, rows = peak_flops(device_name), []
    for name in args.models:
        ids, labels = random_batch(name, args.batch, args.seq, args.device)
        baseline = None
        for label, recipe in candidates(args.recipes):
            model = build_model(name, norm=args.norm, seed=0).to(args.device)
            converted = convert_fp8(model, recipe, args.skip) if recipe else []
            step = make_step(
                model, ours_loss_fn(model, Variant(loss=args.loss), not args.no_compile), ids, labels, args.device, compile_opt=False
            )
            result = measure(step, args.steps, args.warmup, args.device, ids.numel())
            baseline = baseline or result["tokens_per_sec"]
            flops_per_token = model.flops_per_token(args.seq)
            result.update(
                model=name,
                precision=label,
                recipe=recipe,
                fp8_layers=len(converted),
                batch=args.batch,
                seq=args.seq,
                vs_bf16=result["tokens_per_sec"] / baseline,
                flops_per_token=flops_per_token,
                mfu=result["tokens_per_sec"] * flops_per_token / peak if peak else None,
            )
            rows.append(result)
            write_json(args, device_name, peak, rows)  # partial results survive a time-out
            log.info(
                "%-10s %-16s %10.0f tok/s  %.3fx bf16  loss %.3f",
                name,
                label,
                result["tokens_per_sec"],
                result["vs_bf16"],
                result["final_loss"],
            )
            del model, step
            free_device_memory(args.device)  # the next row compiles and allocates afresh
    write_json(args, device_name, peak, rows, final=True)


if __name__ == "__main__":
    main()
