"""The README's quick start, timed: `mixbench run task=vit_small norm=mix` (ViT-S, Mix-LN, the embedded CIFAR-10
subset, 8 epochs) as a user runs it, whole process, with its top-1 — the numbers the README's quick start states.

Each repeat runs the command in a fresh results folder; the table gives the median wall time, the top-1 (the run is
deterministic: it should not vary), the time in training steps and outside them (start-up, data and model set-up,
validation, the record), and the machine's load average before and after, which on a shared machine decides the time.
The README's number is this file's last result (tests/test_docs.py checks that they agree).

    python bench/quickstart/quickstart.py                    # writes bench/quickstart/results/quickstart.{json,md}
    python bench/quickstart/quickstart.py --repeats 2
    python bench/quickstart/quickstart.py --steps 40 --out /tmp/qs.json   # a short smoke run, not the quick start

Run it from the repository root with the environment's Python, on an otherwise idle machine (2 cores for the README).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "speed"))
from harness import write_result  # noqa: E402 (bench/speed/harness.py: the JSON with machine, versions, git commit)

COMMAND = ["run", "task=vit_small", "norm=mix"]  # the README's quick start
RESULT = ROOT / "bench" / "quickstart" / "results" / "quickstart.json"


def one_run(extra: list[str]) -> dict:
    """The quick start once, in a fresh results folder: whole-process seconds and what its record says."""
    with tempfile.TemporaryDirectory() as scratch:
        argv = [sys.executable, "-m", "mixbench.cli", *COMMAND, *extra, f"results_dir={scratch}"]
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        seconds = time.perf_counter() - start
        records = list(Path(scratch).rglob("record.json"))
        if done.returncode != 0 or not records:
            raise SystemExit(f"the quick start failed (exit {done.returncode}): {done.stderr[-2000:]}")
        record = json.loads(records[0].read_text())
    epochs = (record.get("throughput") or {}).get("epochs") or []
    training = sum(e.get("seconds", 0.0) for e in epochs)  # the training steps alone (the monitor leaves validation out)
    return {
        "wall_s": round(seconds, 1),
        "record_wall_s": record.get("wall_time_s"),
        "training_s": round(training, 1),
        "other_s": round(seconds - training, 1),  # start-up, data and model set-up, validation, the record
        "steps": record.get("steps"),
        "top1": record["metrics"].get("val/top1"),
        "status": record["status"],
        "torch_threads": (record.get("hardware") or {}).get("torch_threads"),
    }


def markdown(result: dict) -> str:
    load, cores = result["load_average"], len(os.sched_getaffinity(0))
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Quick start `mixbench {' '.join(result['command'])}`, whole process, {result['repeats']} run(s) ({date}, "
        f"{cores} cores, load average {load['before'][0]:.2f} before / {load['after'][0]:.2f} after)",
        "",
        "| run | wall s | training steps s | other s | steps | top-1 % | torch threads |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, run in enumerate(result["runs"], 1):
        cells = (run["wall_s"], run["training_s"], run["other_s"])
        lines.append(f"| {i} | {' | '.join(f'{c:.1f}' for c in cells)} | {run['steps']} | {run['top1']:.2f} | {run['torch_threads']} |")
    lines += [
        "",
        f"median wall time {result['median_wall_s']:.1f} s ({result['median_wall_s'] / 60:.1f} min), top-1 {result['top1']:.2f} %",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs of the quick start (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="trainer.max_steps for a short smoke run (not the quick start)")
    parser.add_argument("--out", default=str(RESULT), help="the JSON; the .md beside it")
    args = parser.parse_args()
    extra = [f"trainer.max_steps={args.steps}"] if args.steps else []
    before = os.getloadavg()
    runs = [one_run(extra) for _ in range(args.repeats)]
    load = {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in os.getloadavg()]}
    median = round(statistics.median(r["wall_s"] for r in runs), 1)
    summary = {"command": [*COMMAND, *extra], "repeats": args.repeats, "load_average": load, "median_wall_s": median}
    table = markdown({**summary, "runs": runs, "top1": runs[-1]["top1"]})
    settings = {"command": [*COMMAND, *extra], "repeats": args.repeats}
    write_result(Path(args.out), "quickstart", settings, runs, table, load_average=load, median_wall_s=median, top1=runs[-1]["top1"])
    sys.stdout.write(table)


if __name__ == "__main__":
    main()
