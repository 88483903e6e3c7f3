"""Tiny run settings and reading the records a run wrote."""

import json
from pathlib import Path

# a 2-block ViT for 3 steps on the embedded CIFAR-10 (tests/cli/test_cli.py's runs and the tests that reuse its settings)
TINY_VIT = [
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "trainer.max_steps=3",
    "trainer.max_epochs=1",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
]


def records(results_dir: Path) -> list[dict]:
    """Every record.json under ``results_dir``, in path order."""
    return [json.loads(p.read_text()) for p in sorted(results_dir.rglob("record.json"))]
