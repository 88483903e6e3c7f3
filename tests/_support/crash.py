"""The crash-safety runs' settings: a tiny deterministic LLaMA run that checkpoints every 2 steps, and its record."""

import json
from pathlib import Path

COMMON = [
    "task=llama_lm",
    "norm=mix",
    "model=llama_debug",
    "model.vocab_size=8192",
    "data.seq_len=16",
    "data.batch_size=4",
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "trainer.limit_val_batches=3",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "checkpoint.every_n_steps=2",
    "checkpoint.keep_last=2",
    "trainer.deterministic=true",
]


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "record.json").read_text())
