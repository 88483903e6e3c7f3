"""The tiny runs of the weights tests (saving, init_from=, restricted loading): 2 steps of a ViT and of a LLaMA."""

TINY_VIT = [
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "trainer.max_steps=2",
    "trainer.max_epochs=1",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
]


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
