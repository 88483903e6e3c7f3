"""Rebuild tests/_support/data/commonsense: LLM-Adapters records (the layout of ``<shared>/data/commonsense``) made from the
package's embedded evaluation items (mixbench/assets/eval, shippable) by mixbench's own converter.  The real test sets
may not be shipped (../shared/data/README.md); the tests read them too where they are present."""

import json
from pathlib import Path

from mixbench.core.jsonitems import read_items
from mixbench.evaluation.formats import TASKS, to_instruction
from mixbench.evaluation.suites import EMBEDDED_DIR

OUT = Path(__file__).resolve().parent / "commonsense"
SOURCES = {"arc_challenge": "arc_easy"}  # no embedded ARC-Challenge: the ARC-format items serve for both
TRAIN = ("boolq", "arc_challenge")  # the RLHF proxy pairs read these train.json files


def main() -> None:
    for task in ("boolq", "piqa", "arc_easy", "arc_challenge", "openbookqa", "winogrande", "social_iqa"):
        items = read_items(EMBEDDED_DIR / f"{SOURCES.get(task, task)}.jsonl")
        folder = OUT / TASKS[task].adapters_dir
        folder.mkdir(parents=True, exist_ok=True)
        splits = {"test": items[:6], **({"train": items[6:12]} if task in TRAIN else {})}
        for split, docs in splits.items():
            records = [to_instruction(task, doc) for doc in docs]
            (folder / f"{split}.json").write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
