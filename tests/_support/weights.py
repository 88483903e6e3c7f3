"""The tiny runs of the weights tests (saving, init_from=, restricted loading): 2 steps of a ViT and of a LLaMA."""

from .runs import TINY_VIT as RUNS_TINY_VIT

TINY_VIT = [s if s != "trainer.max_steps=3" else "trainer.max_steps=2" for s in RUNS_TINY_VIT]  # runs.TINY_VIT for 2 steps


TINY_LM = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "trainer.max_steps=2",
    "trainer.val_check_interval=null",
    "trainer.limit_val_batches=1",
    "data.seq_len=32",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]
