"""What a step's host-side draws cost the threads beside them: one busy worker process a core (stand-ins for DALI's
decoding threads) counts work units while the main process, once a step (a pause of ``--step-ms`` after each), draws a batch's
random-erasing boxes — with torch CPU ops (the DALI loader before the fix: ``exp`` and ``sqrt`` of a few thousand
elements, which torch spreads over its OpenMP threads), the same with torch held to one thread, timm's per-image rule
in a Python loop (the loader of ``fea7add``), with NumPy (the loader now, ``erase_boxes``), or not at all.
Rounds rotate the order; the table reports medians and the workers' units against the run without draws.

    python bench/speed/host_contention.py --out bench/speed/results/host_contention_cpu.json
    python bench/speed/host_contention.py --dry-run      # the plan, no measurement

On a GPU machine the workers are what DALI's threads are there: work that needs every core (docs/speed.md#dali-hand-over).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # each worker one thread, like one of DALI's (set before NumPy loads)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import markdown, start_logging, write_result  # noqa: E402  (bench/speed/ is not a package)

log = logging.getLogger("host_contention")
MODES = ("none", "loop", "torch", "torch_1thread", "numpy")


def worker(seconds: float, queue) -> None:
    """Work units (a 64×64 matrix product, one thread) done in ``seconds``."""
    a, units, end = np.random.rand(64, 64), 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a
        units += 1
    queue.put(units)


def torch_draws(eraser, n: int, size: int, attempts: int = 10):
    """The boxes' size draws as the loader made them before (torch CPU ops, float64, ``n`` × ``attempts``)."""
    import torch

    area = torch.empty(n, attempts, dtype=torch.float64).uniform_(eraser.min_area, eraser.max_area) * (size * size)
    aspect = torch.empty(n, attempts, dtype=torch.float64).uniform_(*eraser.log_aspect_ratio).exp()
    return (area * aspect).sqrt().round().long(), (area / aspect).sqrt().round().long()


def one_run(mode: str, args) -> dict:
    """``args.workers`` busy workers for ``args.seconds`` while this process draws every ``args.step_ms``."""
    import torch
    from timm.data.random_erasing import RandomErasing

    from mixbench.data.device_pipeline import erase_box, erase_boxes

    eraser = RandomErasing(0.25, mode="pixel", max_count=1, device="cpu")
    rng = np.random.default_rng(0)
    draw = {
        "none": lambda: None,
        "loop": lambda: torch.tensor([erase_box(eraser, args.size, args.size) for _ in range(args.batch)], dtype=torch.long),
        "torch": lambda: torch_draws(eraser, args.batch, args.size),
        "torch_1thread": lambda: torch_draws(eraser, args.batch, args.size),
        "numpy": lambda: erase_boxes(eraser, args.batch, args.size, args.size, rng),
    }[mode]
    threads = torch.get_num_threads()
    if mode == "torch_1thread":
        torch.set_num_threads(1)
    draw()  # first-call costs outside the timing
    queue = mp.Queue()
    procs = [mp.Process(target=worker, args=(args.seconds, queue)) for _ in range(args.workers)]
    for p in procs:
        p.start()
    steps, draw_s, end = 0, 0.0, time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        draw()
        draw_s += time.perf_counter() - t
        steps += 1
        time.sleep(args.step_ms / 1000)
    for p in procs:
        p.join()
    units = sum(queue.get() for _ in procs)
    used = torch.get_num_threads()
    torch.set_num_threads(threads)
    return {
        "mode": mode,
        "worker_units": units,
        "steps": steps,
        "draws_per_sec": steps / args.seconds,
        "draw_ms": 1000 * draw_s / steps,
        "torch_threads": used,
    }


def summarize(runs: list[dict]) -> list[dict]:
    """Per mode: the median worker units (and their share of the no-draw median), median draw time and draws a second
    (a mode whose draws are slow makes fewer of them), the runs."""
    base = statistics.median(r["worker_units"] for r in runs if r["mode"] == "none")
    rows = []
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        units = statistics.median(r["worker_units"] for r in mine)
        rows.append(
            {
                "mode": mode,
                "worker_units": units,
                "of_no_draws": units / base,
                "draw_ms": statistics.median(r["draw_ms"] for r in mine),
                "draws_per_sec": statistics.median(r["draws_per_sec"] for r in mine),
                "runs": [r["worker_units"] for r in mine],
            }
        )
    return rows


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="busy worker processes (default: one a usable core)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of a run")
    ap.add_argument("--step-ms", type=float, default=30.0, help="the main process's pause after each draw (a step's length)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224, help="image side the boxes are drawn for")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all modes, the order rotating by one")
    ap.add_argument("--dry-run", action="store_true", help="log the plan and exit")
    ap.add_argument("--out", type=Path, default=Path("bench/speed/results/host_contention.json"))
    return ap.parse_args(argv)


def plan(rounds: int) -> list[str]:
    """The modes in run order: round k starts k modes further on."""
    return [MODES[(i + k) % len(MODES)] for k in range(rounds) for i in range(len(MODES))]


def main(argv=None) -> int:
    args = parse_args(argv)
    start_logging()
    order = plan(args.rounds)
    log.info("%d workers, %.1f s a run, a draw every %.1f ms: %s", args.workers, args.seconds, args.step_ms, " ".join(order))
    if args.dry_run:
        return 0
    mp.set_start_method("fork", force=True)
    runs = []
    for mode in order:
        runs.append(one_run(mode, args))
        log.info("%s", runs[-1])
    rows = summarize(runs)
    columns = [("draws", "mode"), ("worker units (median)", "worker_units"), ("of no draws", "of_no_draws")]
    columns += [("draw ms", "draw_ms"), ("draws/s", "draws_per_sec"), ("runs", "runs")]
    write_result(args.out, "host_contention", vars(args) | {"out": str(args.out)}, rows, markdown(columns, rows), runs=runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
