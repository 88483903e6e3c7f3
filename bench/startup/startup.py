"""Start-up: the whole-process wall time of everyday `mixbench` commands beside `python -c "import torch"` (issue 44).

Each command runs once untimed (warm caches), then ``--rounds`` times, the commands in a rotating order so that a
change of the machine's load falls on all of them; the table shows the median, the range and the target.  The
machine's load average is recorded before and after: on a shared machine it decides the numbers.

    python bench/startup/startup.py                 # writes bench/startup/results/startup.{json,md}
    python bench/startup/startup.py --rounds 5 --out /tmp/startup.json

Run it from the repository root with the environment's Python (the `mixbench` script beside it is timed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEP = "results/proxy/lr_sensitivity"
MIXBENCH = str(Path(sys.executable).parent / "mixbench")


def commands(scratch: Path) -> list[tuple[str, list[str], float | None]]:
    """(label, argv, target in seconds or None)."""
    return [
        ('python -c "import torch"', [sys.executable, "-c", "import torch"], None),
        ('python -c "import lightning"', [sys.executable, "-c", "import lightning"], None),
        ("mixbench --help", [MIXBENCH, "--help"], 0.5),
        (
            f"mixbench table --results-dir {SWEEP} --best-over optim.lr",
            [MIXBENCH, "table", "--results-dir", SWEEP, "--best-over", "optim.lr"],
            1.5,
        ),
        ("mixbench list", [MIXBENCH, "list"], 2.5),
        (
            f"mixbench plot lr --results-dir {SWEEP}",
            [MIXBENCH, "plot", "lr", "--results-dir", SWEEP, "--out", str(scratch / "lr.png")],
            None,
        ),
        (f"mixbench status {SWEEP}", [MIXBENCH, "status", SWEEP], None),
        (f"mixbench reclassify --results-dir {SWEEP} --dry-run", [MIXBENCH, "reclassify", "--results-dir", SWEEP, "--dry-run"], None),
        ("mixbench run task=llama_lm norm=nope (a config error)", [MIXBENCH, "run", "task=llama_lm", "norm=nope"], None),
    ]


def wall(argv: list[str]) -> tuple[float, int]:
    """Seconds from start to exit of ``argv`` (output discarded), and its exit status."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start, done.returncode


def measure(rounds: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as scratch:
        todo = commands(Path(scratch))
        status = {label: wall(argv)[1] for label, argv, _ in todo}  # warm-up, untimed
        times: dict[str, list[float]] = {label: [] for label, _, _ in todo}
        for r in range(rounds):
            for label, argv, _ in todo[r % len(todo) :] + todo[: r % len(todo)]:
                seconds, code = wall(argv)
                times[label].append(seconds)
                status[label] = code
    return [
        {
            "command": label,
            "median_s": round(statistics.median(times[label]), 3),
            "min_s": round(min(times[label]), 3),
            "max_s": round(max(times[label]), 3),
            "times_s": [round(t, 3) for t in times[label]],
            "exit_status": status[label],
            "target_s": target,
            "met": None if target is None else statistics.median(times[label]) <= target,
        }
        for label, _, target in todo
    ]


def markdown(result: dict) -> str:
    load = result["load_average"]
    lines = [
        f"Start-up, whole process, median of {result['rounds']} warm runs ({result['date']}, commit {result['commit']}, "
        f"{result['cores']} cores, load average {load['before'][0]:.2f} before / {load['after'][0]:.2f} after)",
        "",
        "| command | median s | range s | target s | met |",
        "|---|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        target = "" if row["target_s"] is None else f"{row['target_s']:g}"
        met = "" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| `{row['command']}` | {row['median_s']:.2f} | {row['min_s']:.2f}-{row['max_s']:.2f} | {target} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each command (default 3)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "startup" / "results" / "startup.json"), help="the JSON; the .md beside it")
    args = parser.parse_args()
    before = os.getloadavg()
    rows = measure(args.rounds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    result = {
        "benchmark": "startup",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in os.getloadavg()]},
        "rounds": args.rounds,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    sys.stdout.write(markdown(result))


if __name__ == "__main__":
    main()
