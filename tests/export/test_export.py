"""`mixbench export --format hf`: for every registered placement (and the q/k-norm option) the exported folder loads
with transformers' AutoModelForCausalLM (trust_remote_code) and gives our logits; `lm_eval --model hf` runs it on a
local task with the same accuracy as the in-process harness model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _support.models import make_run

from mixbench.export.bundle import BundleError, module_closure, rewrite_module
from mixbench.export.hf import export_hf
from mixbench.layers import NormSpec, block_placements, list_placements

transformers = pytest.importorskip("transformers")


def norm_specs() -> dict[str, NormSpec]:
    """One spec per registered placement (custom: a per-block list of every block placement) plus q/k norms."""
    specs = {}
    for name in list_placements():
        if name == "custom":
            specs[name] = NormSpec(placement="custom", layers=tuple((block_placements() * 2)[:3]))
        elif name == "mix":
            specs[name] = NormSpec(placement="mix", alpha=0.34)
        else:
            specs[name] = NormSpec(placement=name)
    specs["pre+qk_norm=full"] = NormSpec(placement="pre", qk_norm="full")
    specs["sandwich+qk_norm=head+layernorm"] = NormSpec(placement="sandwich", qk_norm="head", kind="layernorm")
    return specs


def test_exported_model_gives_our_logits_for_every_placement(tmp_path):
    from transformers import AutoModelForCausalLM

    from mixbench.training.trained import load_trained

    ids = torch.randint(0, 8192, (2, 11), generator=torch.Generator().manual_seed(0))
    specs = norm_specs()
    assert {"pre", "post", "mix", "deepnorm", "sandwich"} <= set(specs)
    for i, (name, spec) in enumerate(specs.items()):
        run = make_run(tmp_path / f"run{i}", spec, seed=i)
        out = export_hf(run, tmp_path / f"hf{i}")
        hf = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
        ours = load_trained(run).model
        with torch.no_grad():
            expected = ours(ids)
            assert torch.allclose(hf(ids).logits, expected, atol=1e-5, rtol=1e-5), name
            mask = torch.ones_like(ids)
            mask[0, :4] = 0  # left padding: the real tokens' logits are those of the unpadded sequence
            assert torch.allclose(hf(ids, attention_mask=mask).logits[0, 4:], ours(ids[:1, 4:])[0], atol=1e-5, rtol=1e-5), name
        config = json.loads((out / "config.json").read_text())
        assert (
            config["mixbench_plan"] == ours.plan and config["auto_map"]["AutoModelForCausalLM"] == "modeling_mixbench.MixbenchForCausalLM"
        )


def test_bundle_covers_the_model_code_and_rewrites_only_imports():
    modules = module_closure("mixbench.models.llama")
    assert {"mixbench.models.llama", "mixbench.layers", "mixbench.layers.placements", "mixbench.core.errors"} <= set(modules)
    text = rewrite_module("mixbench.models.llama")
    assert "from .mb_layers import" in text and "from ..layers" not in text and "class Llama(" in text
    norm = rewrite_module("mixbench.layers.norm")
    assert "try:  # needed only on a code path" in norm  # timm, only for ViTs, is not a load-time requirement
    with pytest.raises(BundleError, match="not a mixbench module"):
        module_closure("json")


def test_export_cli_tokenizer_and_generation(sft_run, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mixbench.cli.app import main

    capsys.readouterr()
    assert main(["export", "--format", "hf", str(sft_run), "--out", str(tmp_path / "hf")]) == 0
    out = Path(capsys.readouterr().out.strip())
    tok = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    assert tok.eos_token == "<eos>" and tok.pad_token == "<pad>"
    from mixbench.data.tokens import TokenizerSpec

    assert tok("The sea is blue.")["input_ids"] == TokenizerSpec("embedded").load().encode("The sea is blue.").ids
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    generated = model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=3, do_sample=False)
    from mixbench.training.trained import load_trained

    ours, expected = load_trained(sft_run).model.eval(), [5, 6, 7]  # greedy decoding by our model, ending at <eos> as HF's
    with torch.no_grad():
        while len(expected) < 6 and expected[-1:] != [tok.eos_token_id]:
            expected.append(ours(torch.tensor([expected]))[0, -1].argmax().item())
    assert generated[0].tolist() == expected
    assert main(["export", "--format", "hf", str(sft_run), "--out", str(tmp_path / "hf")]) == 2  # refuses a non-empty folder


def test_lm_eval_hf_runs_the_export_on_a_local_task_with_our_accuracy(sft_run, tmp_path):
    pytest.importorskip("lm_eval")
    from mixbench.evaluation.runner import evaluate
    from mixbench.evaluation.suites import find_task_data, write_harness_tasks

    out = export_hf(sft_run, tmp_path / "hf")
    write_harness_tasks([find_task_data("arc_easy", ["embedded"])], tmp_path / "tasks")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={out},trust_remote_code=True,dtype=float32",
            "--tasks",
            "arc_easy",
            "--include_path",
            str(tmp_path / "tasks"),
            "--device",
            "cpu",
            "--batch_size",
            "8",
            "--limit",
            "20",
            "--output_path",
            str(tmp_path / "lm_eval_out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result_file,) = (tmp_path / "lm_eval_out").rglob("results*.json")
    theirs = json.loads(result_file.read_text())["results"]["arc_easy"]
    ours = evaluate(str(sft_run), ["arc_easy"], data=["embedded"], limit=20, out=str(tmp_path / "ours"), update_record=False)["tasks"][
        "arc_easy"
    ]
    assert theirs["acc,none"] == pytest.approx(ours["acc"]) and theirs["acc_norm,none"] == pytest.approx(ours["acc_norm"])
