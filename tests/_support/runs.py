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

# the debug LLaMA for 2 steps, no weights written (training/test_init_device's and test_activation_checkpointing's runs)
LM_TWO_STEPS = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "data.seq_len=32",
    "trainer.max_steps=2",
    "save_weights=false",
]

# the debug LLaMA for 4 steps, validated at 2 and 4 (grids/test_search's trials, training/test_status_and_loggers' runs)
LM_FOUR_STEPS = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.limit_val_batches=1",
    "data.seq_len=16",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]


def records(results_dir: Path) -> list[dict]:
    """Every record.json under ``results_dir``, in path order."""
    return [json.loads(p.read_text()) for p in sorted(results_dir.rglob("record.json"))]
