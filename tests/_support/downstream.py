"""Shared by the downstream tests: one tiny pretraining run on the embedded text and one fine-tuning run from it, made
once per test session (2 optimizer steps each, LLaMA of width 64 with 2 blocks and the embedded 8k tokenizer)."""

import json
from pathlib import Path

import pytest

TINY = [
    "model=llama_tiny",
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_heads=4",
    "model.intermediate_size=176",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]
RECORDS = [
    {
        "instruction": f"Please answer the following question with true or false, question: is {i} even?\n\nAnswer format: true/false",
        "input": "",
        "output": f"the correct answer is {'true' if i % 2 == 0 else 'false'}",
        "answer": "true" if i % 2 == 0 else "false",
    }
    for i in range(24)
]
_RUNS: dict[str, Path] = {}


def write_records(path: Path, records=RECORDS, lines: bool = False) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) if lines else json.dumps(records))
    return path


def _only_run(results: Path) -> Path:
    (record,) = results.rglob("record.json")
    return record.parent


@pytest.fixture(scope="session")
def pretrain_run(tmp_path_factory) -> Path:
    if "pretrain" not in _RUNS:
        from mixbench.cli.app import main

        results = tmp_path_factory.mktemp("pretrain")
        assert (
            main(
                [
                    "run",
                    "task=llama_lm",
                    *TINY,
                    "norm=mix",
                    "norm.alpha=0.5",
                    "trainer.max_steps=2",
                    "trainer.val_check_interval=2",
                    "trainer.limit_val_batches=1",
                    f"results_dir={results}",
                ]
            )
            == 0
        )
        _RUNS["pretrain"] = _only_run(results)
    return _RUNS["pretrain"]


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory, pretrain_run) -> Path:
    if "sft" not in _RUNS:
        from mixbench.cli.app import main

        results = tmp_path_factory.mktemp("sft")
        data = write_records(results / "train.json")
        assert (
            main(
                [
                    "run",
                    "task=sft_commonsense",
                    *TINY,
                    "norm=mix",
                    "norm.alpha=0.5",
                    "model.vocab_size=8192",
                    f"init_from={pretrain_run}",
                    f"data.path={data}",
                    "data.val_size=4",
                    "data.batch_size=4",
                    "data.global_batch_size=4",
                    "trainer.max_steps=2",
                    f"results_dir={results / 'results'}",
                ]
            )
            == 0
        )
        _RUNS["sft"] = _only_run(results / "results")
    return _RUNS["sft"]
