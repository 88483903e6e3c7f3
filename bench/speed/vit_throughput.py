"""ViT training throughput: mixbench ViT (pre / post / mix) and its speed options next to timm's own vit_*_patch16_224.

One process, one GPU: a full training step (forward, cross-entropy, backward, AdamW step with the training's
parameter groups) under bf16 autocast with ``torch.compile``, 224 px, on random images — the model's speed, not
the input pipeline's.  Rows are compared only within their phase: every row of a phase is built and warmed up,
then all are timed in ``--rounds`` interleaved rounds of about ``--window-s`` seconds each (garbage collection off
while timing); a row reports the median round and the rounds' spread, (max - min) / median.

1. ``candidates`` (first of ``--models``, vit_small): the timm + compile peer, mixbench pre with every option at
   its default (the baseline) and each of ``--candidates`` alone on pre (axis=value, see :class:`Variant`);
2. ``norms``: the peer, the baseline and the best config — per axis the fastest candidate value that beats the
   baseline by ``--min-gain`` (or ``--best``) — on pre, post and mix; then top-kernel profiles of the baseline and
   the best pre (``<out>_profile.txt``);
3. ``sizes`` (each of ``--size-models``, vit_tiny): the peer, the baseline's pre, post and mix, then the best pre
   and (best +) CUDA graphs on pre;
4. ``late``: the peer, the baseline, the best pre and ``--late-candidates`` (max-autotune: minutes of GEMM
   autotuning) on pre.

Each phase keeps the rows, in the order above, that fit: candidates within ``--budget-s`` seconds from the start,
everything within ``--max-s`` (estimates: the mean time of the builds so far, plus tuning); the others are listed
as skipped.  The JSON (and the profile file) is written after every phase, so a run stopped from outside keeps
what it measured.

    python bench/speed/vit_throughput.py --out bench/speed/results/vit_throughput.json

``--device cpu --no-compile --img-size 32 --batch 4 --window-s 0.05`` gives a quick smoke run.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from harness import add_ratios, fmt, free_device_memory, row_budget_arguments, text_table, write_table_result
from kernel_profile import profile_table  # bench/speed/ is this script's directory

from mixbench import build_model
from mixbench.models.vit import VIT_PRESETS
from mixbench.training.optim import build_optimizer

log = logging.getLogger("vit_throughput")


@dataclass(frozen=True)
class Variant:
    """One speed configuration of a row; every field is an axis the bench can vary."""

    sdpa: str = "auto"  # model.attention_backend: auto | flash | cudnn | efficient
    cudagraphs: bool = False  # torch.compile option triton.cudagraphs (= mode="reduce-overhead"): the step replays CUDA graphs
    tune: str = "none"  # none | pointwise (Inductor coordinate-descent tuning of its Triton kernels) |
    # max (mode="max-autotune-no-cudagraphs": also GEMM autotuning with fused epilogues)
    optimizer: str = "fused"  # AdamW implementation: fused | foreach

    def options(self) -> str:
        changed = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) != f.default]
        return " ".join(changed) or "defaults"

    def compile_options(self) -> dict:
        """Inductor options of ``torch.compile(options=...)``."""
        tuned = {
            "none": {},
            "pointwise": {"coordinate_descent_tuning": True},
            "max": {"coordinate_descent_tuning": True, "max_autotune": True},
        }[self.tune]
        return tuned | ({"triton.cudagraphs": True} if self.cudagraphs else {})

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``"sdpa=cudnn cudagraphs=true"`` (space or comma separated axis=value pairs; ``defaults`` = none)."""
        values, kinds = {}, {f.name: f.type for f in fields(cls)}
        for item in text.replace(",", " ").split():
            if item == "defaults":
                continue
            key, _, value = item.partition("=")
            if key not in kinds:
                raise SystemExit(f"unknown axis {key!r}; valid: {', '.join(kinds)}")
            values[key] = value.lower() in ("1", "true", "yes") if kinds[key] in (bool, "bool") else value
        return cls(**values)


BASE = Variant()
DEFAULT_CANDIDATES = ["sdpa=cudnn", "cudagraphs=true", "optimizer=foreach", "tune=pointwise", "sdpa=efficient"]  # by priority
LATE_CANDIDATES = ["tune=max"]  # minutes of GEMM autotuning
EXTRA_TUNING_S = {"none": 0.0, "pointwise": 25.0, "max": 130.0}  # rough extra compile time on an H100 host (16 cores)


def build_row_model(name: str, norm: str | None, variant: Variant, img_size: int) -> torch.nn.Module:
    """mixbench ``name`` with placement ``norm`` and the variant's model options, or timm's own model (``norm=None``)."""
    torch.manual_seed(0)
    if norm is None:
        return timm.create_model(VIT_PRESETS[name]["timm_name"], pretrained=False, img_size=img_size)
    return build_model(name, norm=norm, img_size=img_size, attention_backend=variant.sdpa)


class Candidate:
    """A model compiled per ``variant`` with its AdamW (the training's parameter groups) and a training step
    (forward, cross-entropy, backward, step) on a fixed batch.  Also used by ``bench/speed/image_loader.py``."""

    def __init__(self, model, images, targets, device: str, compile_model: bool, variant: Variant = BASE):
        self.model, self.images, self.targets, self.device = model.to(device).train(), images, targets, device
        self.cudagraphs = compile_model and variant.cudagraphs
        if compile_model:
            self.model.compile(options=variant.compile_options() or None)
        cuda = device == "cuda"
        self.opt = build_optimizer(self.model, "adamw", 1e-4, 0.05, fused=cuda and variant.optimizer == "fused")
        self.autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=cuda)
        self.rates: list[float] = []
        self.compile_s = self.step_s = self.peak_mem_gib = None
        self.cudagraph_skips = 0  # graphs Inductor declined to capture (its log says why)

    def step(self, images: torch.Tensor | None = None, targets: torch.Tensor | None = None) -> None:
        """One training step on the given batch (default: the candidate's own)."""
        images, targets = (self.images, self.targets) if images is None else (images, targets)
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast:
            loss = F.cross_entropy(self.model(images), targets)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def warm_up(self, steps: int) -> None:
        """Compile (the first step) and warm up; then time 3 steps (for the window's step count) and take their peak memory."""
        from torch._dynamo.utils import counters

        skips, start = counters["inductor"]["cudagraph_skips"], time.perf_counter()
        self.step()
        self.sync()
        self.compile_s = time.perf_counter() - start
        for _ in range(steps):
            self.step()
        self.sync()
        self.cudagraph_skips = counters["inductor"]["cudagraph_skips"] - skips
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        self.step_s = len(self.images) / self.images_per_sec(3)
        if self.device == "cuda":
            self.peak_mem_gib = torch.cuda.max_memory_allocated() / 2**30

    def images_per_sec(self, steps: int) -> float:
        self.sync()
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        return len(self.images) * steps / (time.perf_counter() - start)

    def time_window(self, window_s: float) -> None:
        """One round: about ``window_s`` seconds of steps (at least 5), garbage collection off; appends images/s."""
        gc.collect()
        gc.disable()
        try:
            self.rates.append(self.images_per_sec(self.window_steps(window_s)))
        finally:
            gc.enable()

    def window_steps(self, window_s: float) -> int:
        return max(5, round(window_s / self.step_s))


# --------------------------------------------------------------------------------------------- profiling
KERNEL_CLASSES = (  # of bench/speed/kernel_profile.py: (class, name fragments); the first class with a fragment in the name wins
    ("attention (SDPA fwd/bwd)", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("gemm (cuBLAS / Triton templates)", ("gemm", "nvjet", "cutlass", "xmma", "triton_tem", "splitk", "aten::mm", "aten::addmm")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("layer norm (+ fused add/cast)", ("layer_norm",)),
    ("gelu (+ fused)", ("gelu",)),
    ("other Triton (adds, casts, copies, bias grads)", ("triton_",)),
    ("copies / fills", ("memcpy", "memset", "copy", "fill", "elementwise_kernel", "cat")),
)


# -------------------------------------------------------------------------------------------------- bench
class Bench:
    """Builds rows (reused within a model's phases), measures phases in interleaved rounds, writes after each phase."""

    def __init__(self, args):
        self.args, self.rows, self.skipped, self.profiles = args, [], [], []
        self.t0 = time.perf_counter()
        self.device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        self.built: dict[tuple, Candidate] = {}
        self.build_s: list[float] = []  # wall time of each untuned build (compile and warm-up), for the estimates
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(args.batch, 3, args.img_size, args.img_size, generator=g).to(args.device)
        self.targets = torch.randint(0, 1000, (args.batch,), generator=g).to(args.device)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def estimated_build_s(self, variant: Variant) -> float:
        """Compile + warm-up time of a new row: the mean of the untuned builds so far (20 s before any), plus tuning."""
        return (statistics.mean(self.build_s) if self.build_s else 20.0) + EXTRA_TUNING_S[variant.tune]

    def affordable(self, name: str, specs: list[tuple], limit_s: float) -> list[tuple]:
        """The longest prefix of ``specs`` (norm, variant, role) whose builds and timing end within ``limit_s``; the rest is
        recorded as skipped."""
        args, cost = self.args, 0.0
        for i, (norm, variant, role) in enumerate(specs):
            cost += 0.0 if (name, norm, variant) in self.built else self.estimated_build_s(variant)
            if self.elapsed() + cost + (i + 1) * args.rounds * args.window_s > limit_s:
                for norm, variant, role in specs[i:]:
                    self.skipped.append(f"{name} {norm or 'timm'} [{variant.options()}] ({role})")
                log.warning("time budget (%.0f s, %.0f s elapsed): skipped %d %s rows", limit_s, self.elapsed(), len(specs) - i, name)
                return specs[:i]
        return specs

    def candidate(self, name: str, norm: str | None, variant: Variant) -> Candidate | dict:
        """The built and warmed-up row, or the row's error (a kernel the device lacks, out of memory, ...)."""
        key = (name, norm, variant)
        if key not in self.built:
            args = self.args
            if (variant.cudagraphs or variant.tune != "none") and args.no_compile:
                return {"error": "needs torch.compile"}
            if variant.cudagraphs and args.device != "cuda":
                return {"error": "CUDA graphs need --device cuda"}
            start = time.perf_counter()
            try:
                model = build_row_model(name, norm, variant, args.img_size)
                built = Candidate(model, self.images, self.targets, args.device, not args.no_compile, variant)
                built.warm_up(args.warmup)
            except Exception as err:  # noqa: BLE001 — recorded in the row, the bench goes on
                log.warning("%s %s [%s] failed: %s", name, norm or "timm", variant.options(), err)
                return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
            if variant.tune == "none":
                self.build_s.append(time.perf_counter() - start)
            log.info(
                "built %-10s %-8s %-36s compile+first step %5.1f s  [%4.0f s]",
                name,
                norm or "timm",
                variant.options(),
                built.compile_s,
                self.elapsed(),
            )
            self.built[key] = built
        return self.built[key]

    def phase(self, phase: str, name: str, specs: list[tuple[str | None, Variant, str]]) -> None:
        """Build ``specs`` (norm, variant, role), time them in interleaved rounds and add their rows."""
        if not specs:
            return
        found = [(self.candidate(name, norm, variant), norm, variant, role) for norm, variant, role in specs]
        timed = [c for c, *_ in found if isinstance(c, Candidate)]
        for c in timed:
            c.rates = []
        for _ in range(self.args.rounds):  # interleaved, so drift of clocks and background load hits every row alike
            for c in timed:
                c.time_window(self.args.window_s)
        for c, norm, variant, role in found:
            row = {
                "phase": phase,
                "model": name,
                "norm": norm,
                "role": role,
                "options": variant.options(),
                "variant": asdict(variant),
                "impl": f"timm {VIT_PRESETS[name]['timm_name']}" if norm is None else f"mixbench {norm}",
                "batch": self.args.batch,
                "img_size": self.args.img_size,
            }
            if isinstance(c, Candidate):
                median = statistics.median(c.rates)
                row |= {
                    "images_per_sec": median,
                    "step_ms": 1000 * self.args.batch / median,
                    "rounds": c.rates,
                    "spread": (max(c.rates) - min(c.rates)) / median,
                    "steps_per_round": c.window_steps(self.args.window_s),
                    "compile_s": c.compile_s,
                    "peak_mem_gib": c.peak_mem_gib,
                    "cudagraph_skips": c.cudagraph_skips,
                }
            else:
                row |= c | {"images_per_sec": None}
            self.rows.append(row)
        add_ratios(self.rows, rate="images_per_sec", peer="vs_timm", group=("phase", "model"))
        log.info("\n%s", format_table([r for r in self.rows if r["phase"] == phase and r["model"] == name]))
        self.write()

    def profile(self, name: str, variant: Variant, title: str) -> None:
        c = self.built.get((name, "pre", variant))
        if c is None:
            return
        try:
            table = profile_table(c.step, c.device, KERNEL_CLASSES)
        except Exception as err:  # noqa: BLE001 — a profiler failure must not cost the later phases
            table = f"profiling failed: {type(err).__name__}: {err}"
        self.profiles.append(f"== {title}: {name} mixbench pre [{variant.options()}], {statistics.median(c.rates):,.0f} img/s\n{table}")
        self.write()

    def release(self) -> None:
        """Free every built row and the compiled code (the next model's shapes compile afresh)."""
        self.built.clear()
        free_device_memory(self.args.device)

    def best_variant(self, name: str) -> Variant:
        """Per axis, the fastest candidate value that beats the baseline by ``--min-gain``; combined."""
        if self.args.best is not None:
            return Variant.parse(self.args.best)
        rows = [r for r in self.rows if r["phase"] == "candidates" and r["model"] == name and r["norm"] == "pre" and r["images_per_sec"]]
        base = next((r for r in rows if r["role"] == "baseline"), None)
        best, gains = {}, {}
        for r in rows if base else []:
            gain = r["images_per_sec"] / base["images_per_sec"] - 1
            for f in fields(Variant):
                value = r["variant"][f.name]
                if value != f.default and gain > self.args.min_gain and gain > gains.get(f.name, 0.0):
                    best[f.name], gains[f.name] = value, gain
        return Variant(**best)

    def write(self, final: bool = False) -> None:
        """The JSON after each phase; ``final``: the table as Markdown beside it too."""
        extra = dict(device=self.device_name, elapsed_s=self.elapsed(), skipped=self.skipped)
        write_table_result(self.args, "vit_throughput", self.rows, format_table, final, **extra)
        if self.profiles:
            profile_path(self.args.out).write_text("\n\n".join(self.profiles) + "\n")


def profile_path(out: Path) -> Path:
    return out.with_name(out.stem + "_profile.txt")


COLUMNS = (  # title, width (negative: left-aligned), cell of a row; "!" marks a spread of rounds over 3 %
    ("phase", -11, lambda r: r["phase"]),
    ("model", -10, lambda r: r["model"]),
    ("implementation", -31, lambda r: r["impl"]),
    ("options", -34, lambda r: r["options"]),
    ("img/s", 9, lambda r: f"{r['images_per_sec']:,.0f}"),
    ("vs timm", 8, lambda r: fmt(r["vs_timm"], ".3f", "x")),
    ("vs base", 8, lambda r: fmt(r["vs_base"], ".3f")),
    ("vs pre", 7, lambda r: fmt(r["vs_pre"], ".3f")),
    ("ms/step", 8, lambda r: f"{r['step_ms']:.1f}"),
    ("spread", 8, lambda r: f"{r['spread']:>7.1%}" + ("!" if r["spread"] > 0.03 else " ")),
    ("compile s", 10, lambda r: f"{r['compile_s']:.0f}"),
    ("peak GiB", 9, lambda r: fmt(r["peak_mem_gib"], ".1f")),
)


def format_table(rows: list[dict], markdown: bool = False) -> str:
    return text_table(rows, COLUMNS, ok=lambda r: bool(r["images_per_sec"]), lead=4, markdown=markdown)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["vit_small"], help="the first gets the candidates; each gets the norm rows")
    ap.add_argument("--size-models", nargs="*", default=["vit_tiny"], help="models of the norm rows with the best config")
    ap.add_argument("--norms", nargs="+", default=["pre", "post", "mix"])
    ap.add_argument("--candidates", nargs="*", default=DEFAULT_CANDIDATES, help="options tried alone on pre: axis=value[,axis=value]")
    ap.add_argument("--late-candidates", nargs="*", default=LATE_CANDIDATES, help="candidates timed last (long compiles)")
    ap.add_argument("--best", default=None, help="use this config (e.g. 'sdpa=cudnn cudagraphs=true') instead of choosing")
    ap.add_argument("--min-gain", type=float, default=0.01, help="a candidate joins the best config when it is this much faster")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=5, help="steps after the compiling one, before timing")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median and spread reported)")
    ap.add_argument("--window-s", type=float, default=1.0, help="seconds of steps per row and round")
    row_budget_arguments(ap, 120, 285, "bench/speed/results/vit_throughput.json", "cuda" if torch.cuda.is_available() else "cpu")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    # many rows share VisionTransformer.forward: never fall back to eager, every row static-shaped as in training
    wanted = dict(recompile_limit=64, fail_on_recompile_limit_hit=True, automatic_dynamic_shapes=False)
    with torch._dynamo.config.patch(**{k: v for k, v in wanted.items() if hasattr(torch._dynamo.config, k)}):
        run(args)


def run(args) -> None:
    """The phases of the module docstring."""
    bench = Bench(args)
    reference, best = [(None, BASE, "peer"), ("pre", BASE, "baseline")], Variant.parse(args.best or "defaults")
    for i, name in enumerate(args.models + args.size_models):
        full = i < len(args.models)
        if i == 0 and full:  # each candidate alone on pre, while --budget-s lasts
            tried = [("pre", Variant.parse(text), "candidate") for text in args.candidates]
            bench.phase("candidates", name, bench.affordable(name, reference + tried, args.budget_s))
            best = bench.best_variant(name)
            log.info("best config for %s: %s", name, best.options())
        if full:  # the best config on every norm (the baseline's, when nothing won)
            specs = [(n, best, "best" if best != BASE else "baseline") for n in args.norms if (n, best) != ("pre", BASE)]
        else:  # the baseline's norms first (the stable ViT-T numbers), then the best config and CUDA graphs on pre
            specs = [(n, BASE, "baseline") for n in args.norms if n != "pre"] + [("pre", best, "best")] * (best != BASE)
            specs += [("pre", replace(best, cudagraphs=True), "+ CUDA graphs")] * (not best.cudagraphs)
        bench.phase("norms" if full else "sizes", name, bench.affordable(name, reference + specs, args.max_s))
        if i == 0 and full:
            bench.profile(name, BASE, "baseline")
            if best != BASE:
                bench.profile(name, best, "best")
        bench.release()
    if args.models and args.late_candidates:  # rebuilding the reference rows mostly hits the compile caches
        late = [("pre", best, "best")] * (best != BASE) + [("pre", Variant.parse(text), "candidate") for text in args.late_candidates]
        specs = bench.affordable(args.models[0], reference + late, args.max_s)
        if len(specs) > len(reference) + (best != BASE):
            bench.phase("late", args.models[0], specs)
    if bench.skipped:
        log.info("skipped (time budget): %s", "; ".join(bench.skipped))
    bench.write(final=True)


if __name__ == "__main__":
    main()
