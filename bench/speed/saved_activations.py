"""What a training step keeps for its backward pass, with and without ``activation_checkpointing``: on the CPU, before
a GPU lease, whether a model fits a card.

One eager forward (bf16 autocast, as ``bf16-mixed`` runs) of 1 row and of 2 rows of ``--seq`` tokens counts the bytes
of every distinct tensor autograd saves (``torch.autograd.graph.saved_tensors_hooks``), the parameters aside; the
difference is a row's share, the rest (the bf16 copies of the weights autocast makes) is fixed:

    saved(rows) = fixed + rows × per_row;   step ≈ 16 B × parameters (fp32 weights, gradients, AdamW's two moments)
                                                  + saved(rows) + what the backward pass holds at its peak

A row recomputed block by block keeps each block's input only; the backward pass then holds one block's activations at
a time besides (``block_row_mib``: (per_row without − per_row with) / blocks).  An upper bound for a compiled run: Inductor
saves fewer tensors than eager code (the 1B ladder run, compiled, held 78.8 GiB of an H200 where this counts ~102).

    python bench/speed/saved_activations.py --model llama_1b --rows 128 --out bench/speed/results/saved_activations_1b.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import start_logging, text_table, write_table_result  # noqa: E402

from mixbench.models import build_model  # noqa: E402

GIB, MIB = 2**30, 2**20
ADAM_BYTES = 16  # a parameter's fp32 weight, gradient and AdamW's two moments


def saved_bytes(model, rows: int, seq: int) -> int:
    """Bytes of the distinct non-parameter tensors autograd saves in one training forward of ``rows`` × ``seq`` tokens."""
    seen: dict[tuple[int, torch.dtype], int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[(storage.data_ptr(), tensor.dtype)] = storage.nbytes()
        return tensor

    ids = torch.randint(0, model.cfg.vocab_size, (rows, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids, labels=ids)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(nbytes for (ptr, _), nbytes in seen.items() if ptr not in params)


def measure(model, seq: int, rows: int) -> list[dict]:
    """One row of the table each for the blocks' activations kept and recomputed."""
    parameters = sum(p.numel() for p in model.parameters())
    out = []
    for recompute in (False, True):
        model.set_grad_checkpointing(recompute)
        one, two = saved_bytes(model, 1, seq), saved_bytes(model, 2, seq)
        per_row = two - one
        out.append({"recompute": recompute, "per_row_mib": per_row / MIB, "fixed_gib": (one - per_row) / GIB})
    block_row = (out[0]["per_row_mib"] - out[1]["per_row_mib"]) / model.cfg.num_layers
    for row in out:
        saved = row["fixed_gib"] + rows * row["per_row_mib"] * MIB / GIB
        held = rows * block_row * MIB / GIB if row["recompute"] else 0.0  # one block recomputed at a time
        row |= {"rows": rows, "saved_gib": saved, "block_row_mib": block_row, "optimizer_state_gib": ADAM_BYTES * parameters / GIB}
        row["estimate_gib"] = row["optimizer_state_gib"] + saved + held
    return out


def table(rows: list[dict], markdown: bool = False) -> str:
    def num(key: str, spec: str = ".1f"):
        return lambda r: format(r[key], spec)

    columns = [
        ("blocks", -12, lambda r: "recomputed" if r["recompute"] else "kept"),
        ("per row MiB", 12, num("per_row_mib")),
        ("fixed GiB", 10, num("fixed_gib", ".2f")),
        ("rows", 6, lambda r: str(r["rows"])),
        ("saved GiB", 10, num("saved_gib")),
        ("weights+grads+AdamW GiB", 24, num("optimizer_state_gib")),
        ("estimate GiB", 13, num("estimate_gib")),
    ]
    return text_table(rows, columns, markdown=markdown)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama_1b")
    ap.add_argument("--norm", default="pre")
    ap.add_argument("--vocab", type=int, default=8192, help="the proxy runs' embedded tokenizer")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rows", type=int, default=128, help="the micro-batch the estimate is for")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/saved_activations_1b.json"))
    args = ap.parse_args(argv)
    start_logging()
    torch.manual_seed(0)
    model = build_model(args.model, norm=args.norm, seed=0, vocab_size=args.vocab).train()
    rows = measure(model, args.seq, args.rows)
    write_table_result(args, "saved_activations", rows, table)
    print(table(rows))


if __name__ == "__main__":
    main()
