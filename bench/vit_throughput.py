"""ViT training throughput: mixbench ViT-Ti/S (pre / post / mix) next to timm's own vit_*_patch16_224.

One process, one GPU: a full training step (forward, cross-entropy, backward, fused AdamW step) under
bf16 autocast with ``torch.compile``, 224 px, on random images — the model's speed, not the input
pipeline's.  All candidates of a model are compiled and warmed up first, then timed in ``--rounds`` interleaved
rounds of ``--steps`` steps (median reported).  Prints images/s, the ratio to timm, the ratio to our Pre-LN and
peak memory, and writes JSON.

    python bench/vit_throughput.py --models vit_tiny vit_small --out bench/results/vit_throughput.json

``--device cpu --no-compile --img-size 32 --batch 4`` gives a quick smoke run.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import time
from pathlib import Path

import timm
import torch
import torch.nn.functional as F

from mixbench import build_model
from mixbench.models.vit import VIT_PRESETS
from mixbench.provenance import git_commit, package_versions

log = logging.getLogger("vit_throughput")


class Candidate:
    """A compiled model with its fused AdamW and a timed training step (forward, CE, backward, step)."""

    def __init__(self, model, images, targets, device: str, compile_model: bool):
        self.model, self.images, self.targets, self.device = model.to(device).train(), images, targets, device
        if compile_model:
            self.model.compile()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.05, fused=device == "cuda")
        self.autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
        self.peak_mem_gib = None

    def step(self, images: torch.Tensor | None = None, targets: torch.Tensor | None = None) -> None:
        """One training step on the given batch (default: the candidate's own random one)."""
        images, targets = (self.images, self.targets) if images is None else (images, targets)
        with self.autocast:
            loss = F.cross_entropy(self.model(images), targets)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def warm_up(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.step()
            torch.cuda.synchronize()
            self.peak_mem_gib = torch.cuda.max_memory_allocated() / 2**30

    def images_per_sec(self, steps: int) -> float:
        if self.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return len(self.images) * steps / (time.perf_counter() - start)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["vit_tiny", "vit_small"])
    ap.add_argument("--norms", nargs="+", default=["pre", "post", "mix"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds (median reported)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/vit_throughput.json"))
    args = ap.parse_args()
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    images = torch.randn(args.batch, 3, args.img_size, args.img_size, generator=torch.Generator().manual_seed(0)).to(args.device)
    targets = torch.randint(0, 1000, (args.batch,), generator=torch.Generator().manual_seed(1)).to(args.device)
    rows = []
    for name in args.models:
        candidates = {f"mixbench {n}": n for n in args.norms} | {f"timm {VIT_PRESETS[name]['timm_name']}": None}
        built = {}
        for label, norm in candidates.items():
            torch.manual_seed(0)
            if norm is None:
                model = timm.create_model(VIT_PRESETS[name]["timm_name"], pretrained=False, img_size=args.img_size)
            else:
                model = build_model(name, norm=norm, img_size=args.img_size)
            built[label] = Candidate(model, images, targets, args.device, not args.no_compile)
            built[label].warm_up(args.warmup)
        # measured in interleaved rounds, so that clock and background drift hit every candidate alike; median reported
        rates = {label: [] for label in built}
        for _ in range(args.rounds):
            for label, candidate in built.items():
                rates[label].append(candidate.images_per_sec(args.steps))
        for label, norm in candidates.items():
            median = statistics.median(rates[label])
            rows.append({"model": name, "impl": label, "norm": norm, "batch": args.batch, "img_size": args.img_size,
                         "images_per_sec": median, "step_ms": 1000 * args.batch / median, "rounds": rates[label],
                         "peak_mem_gib": built[label].peak_mem_gib})
            log.info("%-10s %-32s %9.0f img/s (rounds: %s)", name, label, median, ", ".join(f"{r:.0f}" for r in rates[label]))
        del built
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch._dynamo.reset()
    for name in args.models:
        group = [r for r in rows if r["model"] == name]
        ref = next(r for r in group if r["norm"] is None)
        pre = next((r for r in group if r["norm"] == "pre"), None)
        for r in group:
            r["vs_timm"] = r["images_per_sec"] / ref["images_per_sec"]
            r["vs_pre"] = r["images_per_sec"] / pre["images_per_sec"] if pre and r["norm"] else None
    header = f"{'model':<11}{'implementation':<34}{'img/s':>10}{'vs timm':>9}{'vs pre':>8}{'ms/step':>9}{'peak GiB':>9}"
    lines = [header, "-" * len(header)] + [
        f"{r['model']:<11}{r['impl']:<34}{r['images_per_sec']:>10,.0f}{r['vs_timm']:>8.2f}x{(format(r['vs_pre'], '.3f') if r['vs_pre'] else '-'):>8}"
        f"{r['step_ms']:>9.1f}{(format(r['peak_mem_gib'], '.1f') if r['peak_mem_gib'] else 'n/a'):>9}" for r in rows]
    table = "\n".join(lines)
    log.info("\n%s", table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "vit_throughput", "device": device_name, "settings": vars(args) | {"out": str(args.out)},
                                    "versions": package_versions(), "git": git_commit(), "torch": torch.__version__,
                                    "rows": rows, "table": table}, indent=1, default=str))


if __name__ == "__main__":
    main()
