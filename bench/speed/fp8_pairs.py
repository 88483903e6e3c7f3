"""fp8 against bf16 through ``mixbench run``: tokens/s and final validation loss of seed pairs, for llama_350m / llama_1b.

For each ``--models`` and each seed of ``--seeds`` (≥ 3 for the issue's test), two short runs on the same text
(``trainer.precision=bf16-mixed`` and ``trainer.precision=fp8``, torchao float8 with ``fp8.recipe``; compiled): the
trainer's own tokens/s (median of its logged windows after the first) and the final ``val/loss``.  Per model: the mean
speed ratio fp8 / bf16, the mean paired loss difference with a 95 % interval (Student t), and the bf16 repeat noise
(the spread of the bf16 seeds).  fp8 pays where the ratio is ≥ 1.2 and the loss difference sits inside that noise.
Needs ``pip install -e ".[fp8]"`` and a GPU of compute capability ≥ 8.9.  The throughput alone (no loss) is
``bench/speed/fp8_throughput.py``.

    python bench/speed/fp8_pairs.py --models llama_350m --text '.data/textmix3/pkgtext-train.*.json.gz' \\
        --out bench/speed/results/fp8_pairs_350m.json
    python bench/speed/fp8_pairs.py --dry-run
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, Runner, machine, markdown, start_logging, write_result  # noqa: E402  (bench/speed/ is not a package)
from multi_gpu import lm_args  # noqa: E402

log = logging.getLogger("fp8_pairs")
PRECISIONS = ("bf16-mixed", "fp8")


def tokens_per_sec(record: dict) -> float | None:
    return (record.get("throughput") or {}).get("perf/items_per_sec")


def paired(differences: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % interval of paired differences (Student t)."""
    from scipy import stats

    mean = statistics.mean(differences)
    if len(differences) < 2:
        return mean, float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(differences) - 1) * statistics.stdev(differences) / len(differences) ** 0.5
    return mean, float(mean - half), float(mean + half)


def summary(model: str, runs: list[dict]) -> dict:
    by = {(r["seed"], r["precision"]): r for r in runs if r["status"] == "completed"}
    seeds = sorted({s for s, _ in by if (s, "bf16-mixed") in by and (s, "fp8") in by})
    if not seeds:
        return {"model": model, "pairs": 0}
    ratios = [by[s, "fp8"]["tokens_per_sec"] / by[s, "bf16-mixed"]["tokens_per_sec"] for s in seeds]
    diffs = [by[s, "fp8"]["val_loss"] - by[s, "bf16-mixed"]["val_loss"] for s in seeds]
    mean, low, high = paired(diffs)
    bf16 = [by[s, "bf16-mixed"]["val_loss"] for s in seeds]
    return {
        "model": model,
        "pairs": len(seeds),
        "speed_ratio": statistics.mean(ratios),
        "loss_diff": mean,
        "loss_diff_95": [low, high],
        "bf16_loss_spread": max(bf16) - min(bf16),
        "pays": statistics.mean(ratios) >= 1.2 and abs(mean) <= max(bf16) - min(bf16),
    }


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["llama_350m"], choices=["llama_350m", "llama_1b"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch", type=int, default=32, help="data.batch_size (sequences of 256 tokens)")
    ap.add_argument("--recipe", default="tensorwise", choices=["tensorwise", "rowwise"])
    ap.add_argument("--text", default=".data/textmix3/pkgtext-train.*.json.gz", help="C4-format training shards (glob)")
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/fp8_pairs.json"))
    ap.add_argument("--resume", action="store_true", help="keep the complete pairs --out already holds (same cards, settings)")
    ap.add_argument("--dry-run", action="store_true", help="print what would run and exit")
    return ap.parse_args(argv)


SAME_SETTINGS = ("models", "steps", "batch", "recipe", "text")  # what a resumed file must share with this call


def finished_runs(args) -> list[dict]:
    """``--resume``: the completed runs of ``--out`` when it was measured on this machine's cards with these settings
    (a pair is only ever measured within one call, so each ratio still comes from one machine and one call)."""
    if not args.resume or not args.out.is_file():
        return []
    earlier = json.loads(args.out.read_text())
    if earlier.get("machine", {}).get("cards") != machine()["cards"]:
        raise SystemExit(f"--resume: {args.out} was measured on {earlier.get('machine', {}).get('cards')}, not on this machine's cards")
    settings = earlier.get("settings", {})
    if any(settings.get(k) != str(getattr(args, k)) for k in SAME_SETTINGS):
        raise SystemExit(f"--resume: {args.out} has other settings ({', '.join(SAME_SETTINGS)}): write to a new --out")
    return [r for r in earlier["rows"] if "summary" not in r and r.get("status") == "completed"]


def save(args, rows: list[dict]) -> None:
    """The rows so far and each model's summary over its complete pairs: written after every pair, so a call stopped by
    its time limit keeps what finished (``--resume`` continues from it)."""
    summaries = [summary(model, [r for r in rows if r["model"] == model]) for model in args.models]
    table = markdown(
        [("model", "model"), ("seed", "seed"), ("precision", "precision"), ("tokens/s", "tokens_per_sec"), ("val/loss", "val_loss")], rows
    )
    table += "\n\n" + markdown(
        [
            ("model", "model"),
            ("pairs", "pairs"),
            ("fp8 / bf16 speed", "speed_ratio"),
            ("loss fp8 − bf16", "loss_diff"),
            ("95 % interval", "loss_diff_95"),
            ("bf16 seed spread", "bf16_loss_spread"),
            ("pays", "pays"),
        ],
        summaries,
    )
    write_result(args.out, "fp8_pairs", {k: str(v) for k, v in vars(args).items()}, rows + [{"summary": s} for s in summaries], table)


def main(argv=None) -> None:
    start_logging()
    args = parse_args(argv)
    rows = finished_runs(args)
    measured = {precision: {(r["model"], r["seed"]) for r in rows if r["precision"] == precision} for precision in PRECISIONS}
    done = set.intersection(*measured.values())
    rows = [r for r in rows if (r["model"], r["seed"]) in done]  # a half pair is measured again, with its partner
    if done:
        log.info("--resume: %d complete pair(s) from %s: %s", len(done), args.out, sorted(done))
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(Path(tmp), args.dry_run, timeout=900)
        for model in args.models:
            for seed in args.seeds:
                if (model, seed) in done:
                    continue
                for precision in PRECISIONS:
                    record = runner.mixbench(run_args(args, model, seed, precision), args.gpu)
                    rows.append(
                        {
                            "model": model,
                            "seed": seed,
                            "precision": precision,
                            "status": record["status"],
                            "tokens_per_sec": tokens_per_sec(record),
                            "val_loss": (record.get("metrics") or {}).get("val/loss"),
                            "error": record.get("error"),
                        }
                    )
                if not args.dry_run:
                    save(args, rows)


def run_args(args, model: str, seed: int, precision: str) -> list[str]:
    return [
        f"task=c4_{model}",
        "norm=pre",
        f"seed={seed}",
        f"trainer.precision={precision}",
        f"fp8.recipe={args.recipe}",
        f"data.batch_size={args.batch}",
        f"data.global_batch_size={args.batch}",
        "compile=true",
        "save_weights=false",
        "divergence.unigram_floor=false",
        "trainer.enable_progress_bar=false",
        *lm_args(args.text, args.steps, max(1, args.steps // 8), REPO / ".data" / "token_cache"),
    ]


if __name__ == "__main__":
    main()
