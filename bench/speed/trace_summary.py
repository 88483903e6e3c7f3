"""What a ``profiler.trace=true`` timeline says about a step: how busy the GPU is and what the host does meanwhile.

Reads a torch.profiler trace (``fit-profile*.pt.trace.json``, or ``.gz``) of a few training steps and prints, per
recorded step (on average):

* each CUDA stream's busy milliseconds (kernels, copies, memsets; overlapping work counted once) and the union of all
  streams: the GPU's busy share of the step;
* each Lightning action the main thread ran (the ``[pl][profile]...`` ranges: ``training_step``, ``backward``,
  ``train_dataloader_next``, ``on_train_batch_end`` …): host milliseconds and how busy the GPU was during them.  An
  action with much host time and an idle GPU is where the step waits on the host.

The profiler slows every host operation it records, so host times here are inflated; the device times are not.

    python bench/speed/trace_summary.py bench/speed/results/vit_e2e_profile_h200_b2c5b53_row2_fit-profile.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import write_files  # noqa: E402  (bench/speed/ is not a package)

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
ACTION_PREFIX = "[pl][profile]"


def load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def union_ms(intervals, start: float, end: float) -> float:
    """Milliseconds of [start, end] covered by the (begin, finish) µs ``intervals`` (overlaps counted once)."""
    covered, reach = 0.0, start
    for begin, finish in sorted(intervals):
        begin, finish = max(begin, reach), min(finish, end)
        if finish > begin:
            covered += finish - begin
            reach = finish
    return covered / 1e3


def summarise(events: list[dict]) -> dict:
    steps = [e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")]
    if not steps:
        raise SystemExit("no ProfilerStep# ranges in the trace: was it written by profiler.kind=pytorch?")
    main_thread = max({e["tid"] for e in steps}, key=lambda tid: sum(e["tid"] == tid for e in steps))
    steps = [e for e in steps if e["tid"] == main_thread]
    start, end, count = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps), len(steps)
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES and "dur" in e and start <= e["ts"] <= end]
    by_stream = defaultdict(list)
    for e in device:
        by_stream[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    everything = sorted(
        interval for intervals in by_stream.values() for interval in intervals
    )  # sorted once: union_ms's sort is then linear
    streams = {str(s): union_ms(iv, start, end) / count for s, iv in by_stream.items()}
    actions = defaultdict(lambda: [0.0, 0.0])
    for e in events:
        if e.get("tid") == main_thread and e.get("name", "").startswith(ACTION_PREFIX) and start <= e["ts"] < end:
            finish, action = min(e["ts"] + e["dur"], end), actions[e["name"][len(ACTION_PREFIX) :]]
            action[0] += (finish - e["ts"]) / 1e3 / count
            action[1] += union_ms(everything, e["ts"], finish) / count
    step_ms = (end - start) / 1e3 / count
    return {
        "steps": count,
        "step_ms": step_ms,
        "gpu_busy_ms": union_ms(everything, start, end) / count,
        "streams_busy_ms": dict(sorted(streams.items(), key=lambda kv: -kv[1])),
        "actions": {
            name: {"host_ms": host, "gpu_busy_ms": busy} for name, (host, busy) in sorted(actions.items(), key=lambda kv: -kv[1][0])
        },
    }


def markdown(summary: dict, top: int = 12) -> str:
    lines = [
        f"{summary['steps']} steps, {summary['step_ms']:.1f} ms a step (under the profiler); GPU busy "
        f"{summary['gpu_busy_ms']:.1f} ms a step ({summary['gpu_busy_ms'] / summary['step_ms']:.0%})",
        "",
        "| CUDA stream | busy ms a step |",
        "|---|---|",
        *(f"| {stream} | {ms:.2f} |" for stream, ms in list(summary["streams_busy_ms"].items())[:top]),
        "",
        "| Lightning action (main thread) | host ms a step | GPU busy meanwhile, ms |",
        "|---|---|---|",
        *(f"| {name} | {a['host_ms']:.1f} | {a['gpu_busy_ms']:.1f} |" for name, a in list(summary["actions"].items())[:top]),
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="also write the summary here (.json and .md beside it)")
    args = parser.parse_args(argv)
    summary = summarise(load(args.trace))
    text = markdown(summary)
    sys.stdout.write(text)
    if args.out:  # a summary of a trace recorded elsewhere: no machine of this process's in it
        write_files(args.out.with_suffix(".json"), {"trace": args.trace.name, **summary}, text.rstrip("\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
