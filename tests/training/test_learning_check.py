"""The families' learning checks, on as users run them (``divergence.unigram_floor`` at its default), guarded both ways:
a short run that learns ends ``completed``, one that cannot learn ends ``stalled``.  Most other tests turn the check off
because their runs are too short to learn; these are the tests that keep it from marking learning runs stalled."""

import json

import pytest
from _support.text import write_c4_shards

from mixbench.cli.app import main

# one short passage repeated: its unigram entropy is ~2.8 nats, and a tiny LLaMA learns the passage itself (its next
# token from the context) within 30 steps, far below that floor — while a model kept at its initial weights sits at ~ln V
PASSAGE = "the cat sat on the mat and the dog sat on the log while the bird sang in the tree"
QUIET = ["trainer.enable_progress_bar=false", "data.num_workers=0", "save_weights=false"]


def only_record(results_dir):
    (path,) = results_dir.rglob("record.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def passage_shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("passage") / "c4" / "en"
    folder.mkdir(parents=True)
    write_c4_shards(folder, "train", [[PASSAGE] * 40])
    write_c4_shards(folder, "validation", [[PASSAGE] * 10])
    return folder


@pytest.mark.parametrize("lr, steps, status", [(1e-2, 30, "completed"), (1e-9, 8, "stalled")], ids=["learns", "cannot-learn"])
def test_llama_learning_check_both_ways(tmp_path, passage_shards, lr, steps, status):
    """LLaMA: final val/loss against the unigram entropy of the validation tokens, with the check at its default."""
    args = [
        "run",
        "task=c4_llama_71m",
        "model=llama_debug",
        "model.vocab_size=8192",
        "norm=pre",
        "compile=false",
        "trainer.precision=32-true",
        f"data.path={passage_shards}/c4-train.*.json.gz",
        "data.tokenizer=embedded",
        "data.seq_len=32",
        "data.batch_size=4",
        "data.global_batch_size=4",
        "data.max_val_tokens=300",
        f"trainer.max_steps={steps}",
        "trainer.val_check_interval=null",
        f"optim.lr={lr}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"results_dir={tmp_path / 'results'}",
        *QUIET,
    ]
    assert main(args) == 0
    record = only_record(tmp_path / "results")
    floor, loss = record["learning_floor"]["val/loss"], record["metrics"]["val/loss"]
    assert 2.0 < floor < 3.5  # the passage's unigram entropy, stored with the record
    assert record["status"] == status
    if status == "completed":
        assert loss < floor - 1.0 and "divergence" not in record
    else:
        assert loss > floor + 3.0 and record["divergence"]["reason"].startswith("never learned beyond token frequencies")


def test_a_short_vit_run_that_learns_is_completed(tmp_path):
    """ViT: 30 steps of a 2-block ViT on the embedded CIFAR-10 beat chance (val/loss below 98 % of ln 10, top-1 above
    11 %) → completed with the check at its default.  The other way (lr 1e-12 → stalled) is
    test_status_and_loggers.py::test_a_vit_run_that_never_beat_chance_is_recorded_stalled."""
    args = [
        "run",
        "task=vit_tiny",
        "model.num_layers=2",
        "model.hidden_size=32",
        "model.num_heads=2",
        "optim.lr=4e-3",
        "trainer.max_steps=30",
        "trainer.max_epochs=1",
        "trainer.limit_val_batches=1",
        f"results_dir={tmp_path}",
        *QUIET,
    ]
    assert main(args) == 0
    record = only_record(tmp_path)
    assert record["learning_floor"] == pytest.approx({"val/loss": 2.302585, "val/top1": 10.0})
    assert record["metrics"]["val/top1"] > 15.0 and record["metrics"]["val/loss"] < 0.98 * 2.302585
    assert record["status"] == "completed" and "divergence" not in record
