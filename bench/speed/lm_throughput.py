"""LLaMA training throughput: mixbench (pre / post / mix) and its speed options next to HF ``LlamaForCausalLM``.

Measures, in one process on one GPU, a full training step (forward, loss, backward, Adam step) under bf16
autocast with ``torch.compile``: tokens/s, MFU (PaLM FLOPs convention, against the card's dense bf16 peak:
989 TFLOP/s for an H100/H200) and peak memory.  The HF model has the same shapes (hidden, intermediate,
heads, layers, vocab 32000, untied head), SDPA attention and the same optimizer (fused Adam).

One invocation, for the first of ``--models`` (llama_130m):

1. the HF + compile peer and mixbench pre with every option at its default (the baseline, profiled);
2. each ``--candidates`` option alone (axis=value, see :class:`Variant`) on pre, while ``--budget-s`` lasts;
3. the best config — per axis the fastest candidate that beats the baseline by ``--min-gain`` (or ``--best``) —
   for pre (profiled when it differs from the baseline), post and mix;
4. the best config (pre) and the HF peer for each of ``--size-models``, while ``--max-s`` lasts.

    python bench/speed/lm_throughput.py --out bench/speed/results/lm_throughput.json

Prints a table and writes JSON (after every row) and ``<out>_profile.txt`` (top kernels of the profiled rows).
``--device cpu --no-compile --no-hf --models llama_debug --size-models`` gives a quick smoke run.
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
import types
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from pathlib import Path

import kernel_profile  # bench/speed/ is this script's directory
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import add_ratios, fmt, free_device_memory, row_budget_arguments, text_table, write_table_result

from mixbench import build_model
from mixbench.core.constants import IGNORE_INDEX
from mixbench.layers.attention import causal_attention, project_qkv
from mixbench.models.llama import CausalSelfAttention, SwiGLU, llama_config
from mixbench.training.callbacks import peak_flops
from mixbench.training.lit.lm import causal_lm_loss_sum

log = logging.getLogger("lm_throughput")
AUTOTUNE = "max-autotune-no-cudagraphs"


@dataclass(frozen=True)
class Variant:
    """One speed configuration of a mixbench row; every field is an axis the bench can vary."""

    loss: str = "torch"  # loss.impl: torch | chunked | liger | cce; bf16_logits = torch without the fp32 up-cast (bench only)
    sdpa: str = "auto"  # model.attention_backend: auto | flash | cudnn | efficient
    kernels: str = "torch"  # torch (compiled PyTorch) | liger (liger-kernel RMSNorm, SwiGLU, RoPE; bench only)
    mode: str = "default"  # torch.compile mode: default | max-autotune-no-cudagraphs
    compile_opt: bool = False  # optimizer step under torch.compile (foreach Adam) instead of eager fused Adam

    def options(self) -> str:
        changed = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) != f.default]
        return " ".join(changed) or "defaults"

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``"loss=cce sdpa=cudnn"`` (space or comma separated axis=value pairs; ``defaults`` = none)."""
        values = {}
        for item in text.replace(",", " ").split():
            if item == "defaults":
                continue
            key, _, value = item.partition("=")
            kind = {f.name: f.type for f in fields(cls)}.get(key)
            if kind is None:
                raise SystemExit(f"unknown axis {key!r}; valid: {', '.join(f.name for f in fields(cls))}")
            values[key] = value.lower() in ("1", "true", "yes") if kind in (bool, "bool") else value
        return cls(**values)


DEFAULT_CANDIDATES = [
    "loss=cce",
    "sdpa=cudnn",
    f"mode={AUTOTUNE}",
    "compile_opt=true",
    "loss=liger",
    "kernels=liger",
    "loss=bf16_logits",
    "sdpa=efficient",
    "loss=chunked",
]  # by expected value


def estimated_s(variant: Variant) -> float:
    """Rough wall time of one row (compile + steps) on an H100, for the time budget."""
    return 120.0 if variant.mode != "default" else 40.0 if variant.compile_opt else 20.0


# ---------------------------------------------------------------------------------------------- liger layers
class LigerRMSNorm(nn.Module):
    """liger-kernel's RMSNorm on the weight of an ``nn.RMSNorm`` (same parameter, so the optimizer sees no change)."""

    def __init__(self, norm: nn.RMSNorm):
        super().__init__()
        from liger_kernel.transformers.functional import liger_rms_norm

        self.weight, self.eps, self.fn = norm.weight, norm.eps or 1e-6, liger_rms_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.weight, self.eps, 0.0, "llama", False)


def _liger_swiglu_forward(self: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_swiglu

    gate, up = self.fc1(x).chunk(2, dim=-1)
    return self.fc2(liger_swiglu(gate.contiguous(), up.contiguous()))


def _liger_attention_forward(self: CausalSelfAttention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_rope

    b, t, h = x.shape
    q, k, v = project_qkv(self, x)
    q, k = liger_rope(q.contiguous(), k.contiguous(), cos[None].to(q.dtype), sin[None].to(q.dtype))
    y = causal_attention(q, k, v, self.backend)
    return self.proj(y.transpose(1, 2).reshape(b, t, h))


def use_liger_layers(model: nn.Module) -> None:
    """Swap RMSNorm, SwiGLU and RoPE of a mixbench LLaMA for liger-kernel's Triton kernels (parameters unchanged)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.RMSNorm):
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner) if owner else model, attr, LigerRMSNorm(module))
        elif isinstance(module, SwiGLU):
            module.forward = types.MethodType(_liger_swiglu_forward, module)
        elif isinstance(module, CausalSelfAttention):
            module.forward = types.MethodType(_liger_attention_forward, module)


# ------------------------------------------------------------------------------------------------ the rows
def hf_model(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    c = llama_config(name)
    cfg = LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_heads,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def ours_loss_fn(model, variant: Variant, compile_model: bool):
    """The mean token loss of ``model`` as training computes it (:func:`causal_lm_loss_sum`), compiled per ``variant``."""
    if variant.loss == "bf16_logits":  # the head and CE compiled together, logits left in the autocast dtype

        def loss_sum(ids, labels):
            logits = model.head(model(ids, return_hidden=True))
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")

        loss_sum = torch.compile(loss_sum, mode=variant.mode) if compile_model else loss_sum
    else:
        if compile_model:
            model.compile(mode=variant.mode)

        def loss_sum(ids, labels):
            return causal_lm_loss_sum(model, ids, labels, variant.loss)

    return lambda ids, labels: loss_sum(ids, labels) / (labels != IGNORE_INDEX).sum()


def make_step(model, loss_fn, ids, labels, device: str, compile_opt: bool):
    """One training step: bf16 autocast forward + loss, backward, Adam (fused, or foreach under torch.compile)."""
    cuda = device == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=cuda and not compile_opt, foreach=True if compile_opt else None)
    opt_step = torch.compile(opt.step) if compile_opt else opt.step
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=cuda)

    def step():
        with autocast:
            loss = loss_fn(ids, labels)
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def measure(step, steps: int, warmup: int, device: str, tokens: int) -> dict:
    cuda = device == "cuda"
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {
        "step_ms": 1000 * elapsed / steps,
        "tokens_per_sec": tokens * steps / elapsed,
        "warmup_s": warm_s,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "final_loss": float(loss.detach()),
    }


# --------------------------------------------------------------------------------------------- profiling
KERNEL_CLASSES = (  # (class, name fragments); the first class whose fragment occurs in a kernel's name wins
    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("loss kernels (liger/cce)", ("cross_entropy", "liger", "cce", "_lse")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "triton_tem", "matmul", "aten::mm", "aten::addmm", "aten::bmm")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("embedding", ("embedding", "indexselect", "index_put", "radix", "sort")),
    ("compiled pointwise/reductions (triton)", ("triton_",)),
    ("copies/fills", ("memcpy", "memset", "copy", "fill", "elementwise_kernel")),
)


kernel_class = partial(kernel_profile.kernel_class, classes=KERNEL_CLASSES)


# --------------------------------------------------------------------------------------------------- main
class Bench:
    """Runs rows (each in a fresh model and compile cache), writing the JSON after every row."""

    def __init__(self, args):
        self.args, self.rows, self.skipped, self.profiles = args, [], [], []
        self.t0 = time.perf_counter()
        self.device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
        self.peak = peak_flops(self.device_name)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def batch(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        size = dict(item.split("=") for item in self.args.batch_for).get(name, self.args.batch)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, llama_config(name).vocab_size, (int(size), self.args.seq + 1), generator=g).to(self.args.device)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def run(self, name: str, norm: str | None, variant: Variant | None, role: str, profile: bool = False) -> dict | None:
        """One row: ``norm=None`` is the HF peer; ``profile`` appends its top kernels to the profile file."""
        args, device = self.args, self.args.device
        impl = "HF LlamaForCausalLM" if norm is None else f"mixbench {norm}"
        row = {
            "model": name,
            "impl": impl,
            "norm": norm,
            "role": role,
            "options": variant.options() if variant else "HF defaults",
            "variant": asdict(variant) if variant else None,
        }
        ids, labels = self.batch(name)
        with torch.device("meta"):
            flops_per_token = build_model(name, norm="pre").flops_per_token(args.seq)
        torch.manual_seed(0)
        torch._dynamo.reset()
        try:
            with torch.device(device):
                if norm is None:
                    model = hf_model(name).train()
                    if not args.no_compile:
                        model.compile()
                    loss_fn = lambda ids, labels: model(input_ids=ids, labels=labels).loss  # noqa: E731
                else:
                    model = build_model(name, norm=norm, attention_backend=variant.sdpa).train()
                    if variant.kernels == "liger":
                        use_liger_layers(model)
                    loss_fn = ours_loss_fn(model, variant, not args.no_compile)
            step = make_step(model, loss_fn, ids, labels, device, bool(variant and variant.compile_opt and not args.no_compile))
            row |= measure(step, args.steps, args.warmup, device, ids.numel())
            if profile:
                self.profiles.append(
                    f"== {name} {impl} [{row['options']}]: {row['tokens_per_sec']:,.0f} tok/s\n"
                    + kernel_profile.profile_table(step, device, KERNEL_CLASSES)
                )
        except Exception as err:  # a missing extra, an unsupported kernel, out of memory: record it and go on
            log.warning("%s %s [%s] failed: %s", name, impl, row["options"], err)
            row |= {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}", "tokens_per_sec": None}
        finally:
            model = loss_fn = step = None  # noqa: F841 — free the model (and its compiled graphs) before the next row
            free_device_memory(device)
        tps = row["tokens_per_sec"]
        row |= {
            "batch": ids.shape[0],
            "seq": args.seq,
            "flops_per_token": flops_per_token,
            "mfu": tps * flops_per_token / self.peak if tps and self.peak else None,
        }
        self.rows.append(row)
        if tps:
            log.info(
                "%-10s %-22s %-44s %10.0f tok/s  MFU %s  %6.1f ms/step  warm-up %4.0f s  [%4.0f s]",
                name,
                impl,
                row["options"],
                tps,
                f"{row['mfu']:.1%}" if row["mfu"] else "n/a",
                row["step_ms"],
                row["warmup_s"],
                self.elapsed(),
            )
        self.write()
        return row if tps else None

    def fits(self, limit_s: float, cost_s: float, what: str) -> bool:
        if self.elapsed() + cost_s <= limit_s:
            return True
        self.skipped.append(what)
        log.warning("skipped %s: %.0f s elapsed + ~%.0f s would pass the %.0f s budget", what, self.elapsed(), cost_s, limit_s)
        return False

    def best_variant(self, base: dict | None, tried: list[tuple[Variant, dict | None]]) -> Variant:
        """Per axis, the fastest candidate value that beats ``base`` by ``--min-gain``; combined."""
        if self.args.best is not None:
            return Variant.parse(self.args.best)
        if base is None:
            return Variant()
        best, gains = {}, {}
        for variant, row in tried:
            if row is None:
                continue
            for f in fields(Variant):
                value = getattr(variant, f.name)
                gain = row["tokens_per_sec"] / base["tokens_per_sec"] - 1
                if value != f.default and gain > self.args.min_gain and gain > gains.get(f.name, 0.0):
                    best[f.name], gains[f.name] = value, gain
        return Variant(**best)

    def write(self, final: bool = False) -> None:
        """The JSON (``final``: with the table, and the table as Markdown beside it)."""
        add_ratios(self.rows, rate="tokens_per_sec", peer="vs_hf")  # the table's ratios, among the rows so far
        extra = dict(versions=kernel_versions(), device=self.device_name, peak_bf16_flops=self.peak, skipped=self.skipped)
        write_table_result(self.args, "lm_throughput", self.rows, format_table, final, **extra)
        if self.profiles:
            profile_path(self.args.out).write_text("\n\n".join(self.profiles) + "\n")


def kernel_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("liger-kernel", "cut-cross-entropy", "triton", "transformers"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def profile_path(out: Path) -> Path:
    return out.with_name(out.stem + "_profile.txt")


COLUMNS = (  # title, width (negative: left-aligned), cell of a row
    ("model", -12, lambda r: r["model"]),
    ("implementation", -22, lambda r: r["impl"]),
    ("options", -54, lambda r: r["options"]),
    ("tokens/s", 11, lambda r: f"{r['tokens_per_sec']:,.0f}"),
    ("MFU", 7, lambda r: fmt(r["mfu"], ".1%")),
    ("vs HF", 8, lambda r: fmt(r["vs_hf"], ".2f", "x")),
    ("vs base", 8, lambda r: fmt(r["vs_base"], ".3f")),
    ("vs pre", 8, lambda r: fmt(r["vs_pre"], ".3f")),
    ("ms/step", 9, lambda r: f"{r['step_ms']:.1f}"),
    ("GiB", 6, lambda r: fmt(r["peak_mem_gib"], ".1f")),
    ("warm s", 7, lambda r: f"{r['warmup_s']:.0f}"),
)


def format_table(rows: list[dict], markdown: bool = False) -> str:
    return text_table(rows, COLUMNS, ok=lambda r: bool(r["tokens_per_sec"]), lead=3, markdown=markdown)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["llama_130m"], help="models of the full comparison (candidates, best, norms)")
    ap.add_argument("--size-models", nargs="*", default=["llama_71m", "llama_250m", "llama_1b"], help="models of best-pre + HF rows")
    ap.add_argument("--norms", nargs="+", default=["pre", "post", "mix"])
    ap.add_argument("--candidates", nargs="*", default=DEFAULT_CANDIDATES, help="options tried alone on pre: axis=value[,axis=value]")
    ap.add_argument("--best", default=None, help="use this config (e.g. 'loss=cce sdpa=cudnn') instead of choosing from the candidates")
    ap.add_argument("--min-gain", type=float, default=0.01, help="a candidate joins the best config when it is this much faster")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batch-for", nargs="*", default=["llama_1b=32"], help="per-model micro-batch, MODEL=N")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    row_budget_arguments(ap, 260, 420, "bench/speed/results/lm_throughput.json", "cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-hf", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = True
    bench = Bench(args)
    base_variant = best = Variant()
    for name in args.models:
        if not args.no_hf:
            bench.run(name, None, None, "peer")
        base = bench.run(name, "pre", base_variant, "baseline", profile=True)
        tried = []
        for text in args.candidates:
            variant = Variant.parse(text)
            if bench.fits(args.budget_s, estimated_s(variant), f"{name} pre [{variant.options()}]"):
                tried.append((variant, bench.run(name, "pre", variant, "candidate")))
        best = bench.best_variant(base, tried)
        log.info("best config for %s: %s", name, best.options())
        for norm in args.norms:
            if norm == "pre" and best == base_variant:
                continue  # the baseline row is this row
            if bench.fits(args.max_s, estimated_s(best), f"{name} {norm} [{best.options()}]"):
                bench.run(name, norm, best, "best", profile=norm == "pre")
    for name in args.size_models:  # new shapes: GEMM autotuning starts over, so without it where it would not fit
        scale = 3 if name in ("llama_1b", "llama_7b") else 1
        quick = replace(best, mode="default")
        variant = best if bench.elapsed() + scale * estimated_s(best) <= args.max_s else quick
        if bench.fits(args.max_s, scale * estimated_s(variant), f"{name} pre [{variant.options()}]"):
            bench.run(name, "pre", variant, "size")
        if not args.no_hf and bench.fits(args.max_s, scale * estimated_s(Variant()), f"{name} HF"):
            bench.run(name, None, None, "peer")
    if bench.skipped:
        log.info("skipped (time budget): %s", "; ".join(bench.skipped))
    bench.write(final=True)


if __name__ == "__main__":
    main()
