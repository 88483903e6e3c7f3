"""Layer analyses: only properties that really hold."""

import json
import math
from pathlib import Path

import pytest
import torch

import mixbench
from mixbench.analysis import angular_distance, block_grad_norms
from mixbench.analysis.angular import AngularAccumulator
from mixbench.analysis.runner import prune_profile, subject_at_init, subject_from_run
from mixbench.cli.app import main
from mixbench.core.errors import AnalysisMismatch

TINY_LM = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "data.seq_len=32",
    "trainer.precision=32-true",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]  # plumbing runs of a few steps have not learned anything yet


def test_angular_distance_of_a_vector_with_itself_is_0_and_of_orthogonal_vectors_one_half():
    x = torch.randn(5, 16)
    assert torch.allclose(angular_distance(x, x), torch.zeros(5), atol=1e-3)
    e1, e2 = torch.eye(16)[0], torch.eye(16)[1]
    assert angular_distance(e1, e2).item() == pytest.approx(0.5)
    assert angular_distance(e1, -e1).item() == pytest.approx(1.0)


def test_angular_matrix_layout():
    e1, e2 = torch.eye(4)[0].expand(3, 4), torch.eye(4)[1].expand(3, 4)
    acc = AngularAccumulator(num_layers=2)
    acc.add([e1, e1, e2])  # x^0 = x^1 = e1, x^2 = e2
    d = acc.mean()
    assert d[0, 0].item() == pytest.approx(0.0, abs=1e-3) and d[0, 1].item() == pytest.approx(0.5)  # n = 1
    assert d[1, 0].item() == pytest.approx(0.5) and math.isnan(d[1, 1].item())  # n = 2
    assert acc.tokens == 3


def gradient_profile(norm: str, seed: int, num_layers: int = 12) -> torch.Tensor:
    model = mixbench.build_model("llama_debug", norm=norm, seed=seed, num_layers=num_layers)
    ids = torch.randint(0, model.cfg.vocab_size, (4, 64), generator=torch.Generator().manual_seed(seed))
    (model(ids, labels=ids.roll(-1, 1)) / ids.numel()).backward()
    return torch.tensor([b["total"] for b in block_grad_norms(model.blocks)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pre_ln_gradient_norm_falls_with_depth_at_init(seed):
    """Measured: 12-block debug LLaMA, random tokens — Pre-LN's block gradient norm decreases monotonically
    (Spearman −1) and the first block's is > 2× the last's.  (Post-LN is nearly flat at exact init.)"""
    norms = gradient_profile("pre", seed)
    ranks = norms.argsort().argsort().float()
    spearman = torch.corrcoef(torch.stack([torch.arange(12.0), ranks]))[0, 1]
    assert spearman < -0.9 and norms[0] / norms[-1] > 2.0


def test_post_ln_gradient_norm_is_nearly_flat_at_exact_init():
    norms = gradient_profile("post", 0)
    assert (norms.std() / norms.mean()) < 0.05


def test_attention_and_mlp_norms_compose_the_block_norm():
    model = mixbench.build_model("llama_debug", norm="sandwich", seed=0)
    ids = torch.randint(0, 512, (2, 16))
    model(ids, labels=ids).backward()
    for b in block_grad_norms(model.blocks):
        assert b["total"] == pytest.approx((b["attn"] ** 2 + b["mlp"] ** 2) ** 0.5, rel=1e-5) and b["attn"] > 0 and b["mlp"] > 0


def test_skipping_a_block_that_computes_the_identity_changes_nothing(tmp_path, token_cache):
    subject = subject_at_init([*TINY_LM, "norm=pre", f"data.cache_dir={token_cache}"], tmp_path)
    with torch.no_grad():  # a Pre-LN block with zero output projections computes x + 0 + 0
        subject.model.blocks[2].attn.proj.weight.zero_()
        subject.model.blocks[2].mlp.fc2.weight.zero_()
    profile = prune_profile(subject, limit_val_batches=2)
    assert profile["delta"][2] == 0.0
    assert all(d != 0.0 for i, d in enumerate(profile["delta"]) if i != 2)


def test_analyze_commands_on_a_run_and_at_init(tmp_path, token_cache):
    run_args = [
        "run",
        *TINY_LM,
        "norm=mix",
        "trainer.max_steps=3",
        "trainer.val_check_interval=null",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "grad_norm_every_n_steps=1",
        f"data.cache_dir={token_cache}",
        f"results_dir={tmp_path}",
    ]
    assert main(run_args) == 0
    (record,) = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    run_dir = Path(record["run_dir"])
    assert len(json.loads((run_dir / "gradnorm.json").read_text())["history"]) == 3
    assert main(["analyze", "angular", "--run", str(run_dir), "--tokens", "2000"]) == 0
    assert main(["analyze", "prune", "--run", str(run_dir), "--limit-val-batches", "1"]) == 0
    assert main(["analyze", "grad-norm", "--run", str(run_dir), "--batches", "2"]) == 0
    angular = json.loads((run_dir / "analysis" / "angular.json").read_text())[0]
    assert angular["tokens"] >= 2000 and angular["dataset"] == "text_embedded" and len(angular["distance"]) == 4
    prune = json.loads((run_dir / "analysis" / "prune.json").read_text())[0]
    assert prune["metric"] == "val/ppl" and len(prune["delta"]) == 4
    # on the run's own validation batches the unpruned model must give the run's recorded value, or ΔP stops
    whole = prune_profile(subject_from_run(run_dir))
    assert whole["original"] == pytest.approx(record["metrics"]["val/ppl"], rel=1e-5)
    assert whole["original_check"]["relative_difference"] < 1e-5
    assert whole["precision"] == "32-true" and len(whole["delta"]) == 4
    tampered = {**record, "primary_metric": {**record["primary_metric"], "value": record["metrics"]["val/ppl"] * 1.02}}
    (run_dir / "record.json").write_text(json.dumps(tampered))
    with pytest.raises(AnalysisMismatch, match="recorded"):
        prune_profile(subject_from_run(run_dir))
    (run_dir / "record.json").write_text(json.dumps(record))
    config = run_dir / "config.yaml"  # as a run with init_device=cuda saves it: its weights load on this CPU all the same
    saved = config.read_text()
    config.write_text(saved.replace("init_device: cpu", "init_device: cuda"))
    assert "init_device: cuda" in config.read_text()
    assert prune_profile(subject_from_run(run_dir))["original"] == whole["original"]
    config.write_text(saved)
    assert (run_dir / "analysis" / "grad_norm.png").stat().st_size > 0
    assert main(["analyze", "training-grad-norm", "--run", str(run_dir), "--steps", "0", "1", "-1"]) == 0
    (logged,) = json.loads((run_dir / "analysis" / "training_grad_norm.json").read_text())
    history = json.loads((run_dir / "gradnorm.json").read_text())["history"]
    assert [p["step"] for p in logged["profiles"]] == [0, 1, 2] and logged["profiles"][2]["blocks"] == history[2]["blocks"]
    out = tmp_path / "init"
    assert (
        main(
            [
                "analyze",
                "grad-norm",
                *TINY_LM,
                "norm=pre,post,mix",
                "--batches",
                "1",
                "--out",
                str(out),
                f"data.cache_dir={token_cache}",
            ]
        )
        == 0
    )
    profiles = json.loads((out / "grad_norm.json").read_text())
    assert [p["name"] for p in profiles] == ["pre", "post", "mix(α=0.25)"] and (out / "grad_norm.png").is_file()


def test_vit_angular_distance_runs_on_images(tmp_path):
    subject = subject_at_init(["task=vit_tiny", "model.num_layers=3", "model.hidden_size=32", "model.num_heads=2", "norm=mix"], tmp_path)
    from mixbench.analysis.runner import angular_profile

    profile = angular_profile(subject, token_budget=500)
    assert profile["tokens"] >= 500 and len(profile["distance"]) == 3
