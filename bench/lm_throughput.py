"""LLaMA training throughput: mixbench (pre / post / mix) next to HF ``transformers.LlamaForCausalLM``.

Measures, in one process on one GPU, a full training step (forward, loss, backward, fused Adam step)
under bf16 autocast with ``torch.compile``: tokens/s, MFU (PaLM FLOPs convention, against the card's
dense bf16 peak: 989 TFLOP/s for an H100/H200) and peak memory.  The HF model has the same shapes
(hidden, intermediate, heads, layers, vocab 32000, untied head), SDPA attention and the same optimizer.

    python bench/lm_throughput.py --models llama_71m llama_130m llama_250m --out bench/results/lm_throughput.json

Prints a table and writes JSON.  ``--device cpu --no-compile --no-hf`` gives a quick smoke run.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import time
from pathlib import Path

import torch

from mixbench import build_model
from mixbench.callbacks import peak_flops
from mixbench.lit.losses import chunked_cross_entropy_sum
from mixbench.models.llama import llama_config
from mixbench.provenance import git_commit, package_versions

log = logging.getLogger("lm_throughput")


def ours_step_fn(model, chunk: int | None):
    def loss_fn(ids, labels):
        if chunk:
            hidden = model(ids, return_hidden=True)
            return chunked_cross_entropy_sum(hidden, model.head.weight, labels, chunk) / labels.numel()
        return model(ids, labels=labels) / labels.numel()  # what CausalLMModule does: loss inside the compiled forward
    return loss_fn


def hf_model(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    c = llama_config(name)
    cfg = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                      num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_heads,
                      max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    return model, lambda ids, labels: model(input_ids=ids, labels=labels).loss


def measure(model, loss_fn, ids, labels, steps: int, warmup: int, device: str, compile_model: bool) -> dict:
    model.to(device).train()
    if compile_model:
        model.compile()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=device == "cuda")
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")

    def step():
        with autocast:
            loss = loss_fn(ids, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_compile = time.perf_counter()
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warm_s = time.perf_counter() - t_compile
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {"step_ms": 1000 * elapsed / steps, "tokens_per_sec": ids.numel() * steps / elapsed, "warmup_s": warm_s,
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None, "final_loss": float(loss)}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["llama_71m", "llama_130m", "llama_250m"])
    ap.add_argument("--norms", nargs="+", default=["pre", "post", "mix"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--chunk", type=int, nargs="+", default=[0, 8192], help="loss variants for ours: 0 = full logits, N = chunked CE")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/lm_throughput.json"))
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    peak = peak_flops(device_name)
    rows = []
    for name in args.models:
        g = torch.Generator().manual_seed(0)
        vocab = llama_config(name).vocab_size
        ids = torch.randint(0, vocab, (args.batch, args.seq + 1), generator=g).to(args.device)
        ids, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        flops_per_token = None  # set by our models (they come first); the HF rows reuse it (same shapes)
        candidates = [(f"mixbench {norm}" + (f" chunk{c}" if c else ""), norm, c) for norm in args.norms for c in args.chunk]
        if not args.no_hf:
            candidates.append(("HF LlamaForCausalLM", None, None))
        for label, norm, chunk in candidates:
            torch.manual_seed(0)
            if args.device == "cuda":
                torch._dynamo.reset()
            if norm is None:
                model, loss_fn = hf_model(name)
            else:
                model = build_model(name, norm=norm)
                flops_per_token = model.flops_per_token(args.seq)
                loss_fn = ours_step_fn(model, chunk)
            result = measure(model, loss_fn, ids, labels, args.steps, args.warmup, args.device, not args.no_compile)
            result.update(model=name, impl=label, norm=norm, chunk=chunk, batch=args.batch, seq=args.seq,
                          mfu=result["tokens_per_sec"] * flops_per_token / peak if peak else None, flops_per_token=flops_per_token)
            rows.append(result)
            write_json(args, device_name, peak, rows, table=None)  # partial results survive a time-out
            log.info("%-10s %-28s %10.0f tok/s  MFU %s  %6.1f ms/step  peak %s GiB", name, label, result["tokens_per_sec"],
                     f"{result['mfu']:.1%}" if result["mfu"] else "n/a", result["step_ms"],
                     f"{result['peak_mem_gib']:.1f}" if result["peak_mem_gib"] else "n/a")
            del model, loss_fn
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
    for name in args.models:  # ratios against the HF baseline and against our pre
        group = [r for r in rows if r["model"] == name]
        hf = next((r for r in group if r["norm"] is None), None)
        pre = max((r for r in group if r["norm"] == "pre"), key=lambda r: r["tokens_per_sec"])
        for r in group:
            r["vs_hf"] = r["tokens_per_sec"] / hf["tokens_per_sec"] if hf else None
            r["vs_pre"] = r["tokens_per_sec"] / pre["tokens_per_sec"] if r["norm"] else None
    header = f"{'model':<11}{'implementation':<30}{'tokens/s':>12}{'MFU':>8}{'vs HF':>8}{'vs pre':>8}{'ms/step':>9}{'peak GiB':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['model']:<11}{r['impl']:<30}{r['tokens_per_sec']:>12,.0f}{(format(r['mfu'], '.1%') if r['mfu'] else 'n/a'):>8}"
                     f"{(format(r['vs_hf'], '.2f') + 'x' if r['vs_hf'] else '-'):>8}{(format(r['vs_pre'], '.3f') if r['vs_pre'] else '-'):>8}"
                     f"{r['step_ms']:>9.1f}{(format(r['peak_mem_gib'], '.1f') if r['peak_mem_gib'] else 'n/a'):>9}")
    table = "\n".join(lines)
    log.info("\n%s", table)
    write_json(args, device_name, peak, rows, table)


def write_json(args, device_name: str, peak: float | None, rows: list[dict], table: str | None) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "lm_throughput", "device": device_name, "peak_bf16_flops": peak,
                                    "settings": vars(args) | {"out": str(args.out)}, "versions": package_versions(), "git": git_commit(),
                                    "torch": torch.__version__, "rows": rows, "table": table}, indent=1, default=str))


if __name__ == "__main__":
    main()
