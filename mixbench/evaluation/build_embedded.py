"""Rebuild the embedded evaluation sample ``mixbench/assets/eval/<task>.jsonl`` from the shared registry samples.

    python -m mixbench.evaluation.build_embedded --shared ../shared/data/mc-registry [--per-task 100]

MMLU: all of ``mmlu_like.jsonl`` (the genuine MMLU dev questions); every other Table 2 task (and SocialIQA):
``--per-task`` items drawn without replacement with seed 0, kept in file order.  ARC-Easy takes ``arc_like``.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from ..core.jsonitems import read_items
from .formats import TABLE2_TASKS, get_task_format
from .suites import EMBEDDED_DIR

log = logging.getLogger(__name__)


def build(shared: Path, per_task: int = 100, out: Path = EMBEDDED_DIR) -> dict[str, int]:
    counts = {}
    out.mkdir(parents=True, exist_ok=True)
    for task in (*TABLE2_TASKS, "social_iqa"):
        rows = read_items(shared / f"{get_task_format(task).registry}.jsonl")
        if task != "mmlu" and len(rows) > per_task:
            keep = np.sort(np.random.default_rng(0).choice(len(rows), per_task, replace=False))
            rows = [rows[i] for i in keep]
        (out / f"{task}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        counts[task] = len(rows)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", required=True, type=Path, help="the folder of the registry samples (*_like.jsonl)")
    parser.add_argument("--per-task", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for task, n in build(args.shared, args.per_task).items():
        log.info("%-12s %4d items", task, n)


if __name__ == "__main__":
    main()
