"""Supervised fine-tuning data (Commonsense170K format): response-only loss in both sequence modes, clear errors, and
`mixbench run task=sft_commonsense` from a pretraining run (its tokenizer and weights)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _support.downstream import RECORDS, write_records

from mixbench.core.constants import IGNORE_INDEX
from mixbench.core.errors import ConfigError
from mixbench.data.tokens import TokenizerSpec
from mixbench.sft.data import InstructionDataModule, encode_examples
from mixbench.sft.prompt import build_prompt


def test_prompt_is_the_alpaca_template():
    assert build_prompt("Say hi.") == (
        "Below is an instruction that describes a task. Write a response that appropriately completes "
        "the request.\n\n### Instruction:\nSay hi.\n\n### Response:\n"
    )
    assert "### Input:\nctx\n\n### Response:\n" in build_prompt("Say hi.", "ctx")
    with pytest.raises(ConfigError, match="unknown prompt template"):
        build_prompt("x", template="chatml")


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_only_response_tokens_are_scored(tmp_path, mode):
    dm = InstructionDataModule(
        path=str(write_records(tmp_path / "d.json")), val_size=4, tokenizer="embedded", mode=mode, seq_len=128, batch_size=4
    )
    dm.setup()
    tok = TokenizerSpec("embedded").load()
    eos = tok.token_to_id("<eos>")
    batch = next(iter(dm.train_dataloader()))
    ids, labels = batch["input_ids"], batch["labels"]
    assert ids.shape == labels.shape and ids.shape[0] == 4
    scored = labels != IGNORE_INDEX
    # every scored target is a response token or EOS, and it is the next input token
    for row in range(ids.shape[0]):
        positions = scored[row].nonzero().flatten().tolist()
        assert positions or mode == "pack", "each padded row scores its response"
        for t in positions[:-1]:
            assert labels[row, t] == ids[row, t + 1]
        text = tok.decode([int(x) for x in labels[row][scored[row]] if int(x) != eos])
        assert "Instruction" not in text and "question" not in text
    assert all("correct answer is" in tok.decode(labels[r][scored[r]].tolist()) for r in range(4) if scored[r].sum() > 8)
    assert (labels == eos).any()
    if mode == "pad":  # pads are never targets, rows are padded to a multiple of 8
        assert ids.shape[1] % 8 == 0
        assert not scored[ids == tok.token_to_id("<pad>")].any()


def test_prompt_mask_matches_the_tokenized_prompt():
    tok = TokenizerSpec("embedded").load()
    [(ids, m)] = encode_examples(RECORDS[:1], tok, 1, "alpaca", train_on_inputs=False)
    prompt = tok.encode(build_prompt(RECORDS[0]["instruction"]), add_special_tokens=False).ids
    assert m == len(prompt) and list(ids[:m]) == prompt and ids[-1] == 1
    assert tok.decode(list(ids[m:-1])) == RECORDS[0]["output"]


def test_held_out_split_is_fixed_and_json_lines_are_read(tmp_path):
    a = InstructionDataModule(path=str(write_records(tmp_path / "d.jsonl", lines=True)), val_size=5, tokenizer="embedded", seed=1)
    b = InstructionDataModule(path=str(write_records(tmp_path / "e.json")), val_size=5, tokenizer="embedded", seed=2)
    a.setup()
    b.setup()
    assert len(a.val_set) == len(b.val_set) == 5 and len(a.train_set) == 19
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a.val_set.items, b.val_set.items))


def test_clear_errors_for_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="set data.path"):
        InstructionDataModule(path=None, tokenizer="embedded")
    with pytest.raises(FileNotFoundError, match="no such file"):
        InstructionDataModule(path=str(tmp_path / "missing.json"), tokenizer="embedded")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"instruction": "x", "output": ')
    with pytest.raises(ConfigError, match="not valid JSON"):
        InstructionDataModule(path=str(bad), tokenizer="embedded").setup()
    bad.write_text('[{"instruction": "x"}]')
    with pytest.raises(ConfigError, match="record 0 is not an object with string fields instruction, output"):
        InstructionDataModule(path=str(bad), tokenizer="embedded").setup()
    with pytest.raises(ConfigError, match="set init_from"):
        InstructionDataModule(path=str(write_records(tmp_path / "ok.json")), tokenizer=None)


def test_sft_run_starts_from_the_pretraining_run(sft_run, pretrain_run):
    record = json.loads((sft_run / "record.json").read_text())
    assert record["status"] == "completed" and record["task"] == "sft_commonsense"
    assert Path(record["init_from"]["source"]) == pretrain_run
    assert record["dataset"]["tokenizer"] == "embedded"  # followed from the pretraining run's config
    assert record["dataset"]["train_on_inputs"] is False and record["dataset"]["num_train_target_tokens"] > 0
    assert record["config"]["optim"]["lr"] == 3.0e-4 and record["config"]["trainer"]["gradient_clip_val"] == 1.0
    from safetensors.torch import load_file

    a, b = load_file(str(pretrain_run / "model.safetensors")), load_file(str(sft_run / "model.safetensors"))
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)


def test_sft_needs_the_pretraining_model_and_norm(pretrain_run, tmp_path, caplog):
    from mixbench.cli.app import main

    data = write_records(tmp_path / "d.json")
    assert (
        main(
            [
                "run",
                "task=sft_commonsense",
                "model=llama_debug",
                "norm=pre",
                f"init_from={pretrain_run}",
                f"data.path={data}",
                "data.val_size=4",
                "model.vocab_size=8192",
                f"results_dir={tmp_path}",
                "trainer.max_steps=1",
            ]
        )
        == 2
    )
    assert "choose the same norm= and norm.* settings" in caplog.text
