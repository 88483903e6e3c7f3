"""Portable weights (model.safetensors + model_config.json) and starting a run from trained weights (init_from=)."""

import json
from pathlib import Path

import pytest
import timm
import torch
from _support.weights import TINY_LM

from mixbench import build_model
from mixbench.cli.app import main
from mixbench.training.weights import WeightsError, describe_model, init_from, load_weights, save_weights


def only_record(folder: Path) -> dict:
    (path,) = sorted(folder.rglob("record.json"))
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    "name, family, kwargs", [("llama_debug", "lm", {}), ("vit_debug", "vision", dict(img_size=16, patch_size=8, num_classes=3))]
)
@pytest.mark.parametrize("norm", ["mix", "sandwich"])
def test_round_trip_both_families(tmp_path, name, family, kwargs, norm):
    model = build_model(name, norm=norm, seed=1, **kwargs)
    save_weights(model, tmp_path, describe_model(family, name, kwargs, model))
    state, description, _ = load_weights(tmp_path)
    assert description["plan"] == model.plan and description["model"] == name and description["family"] == family
    fresh = build_model(name, norm=norm, seed=2, **kwargs)
    init_from(fresh, tmp_path, describe_model(family, name, kwargs, fresh))
    for key, value in model.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[key], value, rtol=0, atol=0)


def test_vit_weights_load_with_timm(tmp_path):
    ours = build_model("vit_tiny", norm="pre", seed=0, img_size=32, patch_size=8, num_classes=10).eval()
    save_weights(ours, tmp_path, describe_model("vision", "vit_tiny", {}, ours))
    theirs = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=True,
        img_size=32,
        patch_size=8,
        num_classes=10,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "model.safetensors"), num_classes=10),
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(theirs(x), ours(x))


def test_placement_and_architecture_mismatches_name_both_sides(tmp_path):
    mix = build_model("llama_debug", norm="mix", alpha=0.5)
    save_weights(mix, tmp_path, describe_model("lm", "llama_debug", {}, mix))
    pre = build_model("llama_debug", norm="pre")
    with pytest.raises(WeightsError, match=r"trained with norm mix\(α=0.5\) \[post×2 pre×2\] but this run uses pre \[pre×4\]"):
        init_from(pre, tmp_path, describe_model("lm", "llama_debug", {}, pre))
    wide = build_model("llama_debug", norm="mix", alpha=0.5, hidden_size=128)
    with pytest.raises(WeightsError, match=r"does not fit this model.*shape weights vs model"):
        init_from(wide, tmp_path, describe_model("lm", "llama_debug", {"hidden_size": 128}, wide))
    vit = build_model("vit_debug", norm="mix", alpha=0.5, img_size=16, patch_size=8)
    with pytest.raises(WeightsError, match="holds a lm model"):
        init_from(vit, tmp_path, describe_model("vision", "vit_debug", {}, vit))
    with pytest.raises(WeightsError, match="no such file"):
        init_from(mix, tmp_path / "nothere", {})


def test_legacy_model_pt_run_folder_still_loads(tmp_path):
    model = build_model("llama_debug", norm="post", seed=3)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    (tmp_path / "config.yaml").write_text("task: {family: lm}\nmodel: {name: llama_debug, num_layers: 4}\nnorm: {placement: post}\n")
    state, description, file = load_weights(tmp_path)
    assert file.name == "model.pt" and description["norm"]["placement"] == "post"
    fresh = build_model("llama_debug", norm="post", seed=4)
    init_from(fresh, tmp_path, describe_model("lm", "llama_debug", {}, fresh))
    torch.testing.assert_close(fresh.head.weight, model.head.weight)


def test_init_from_a_run_folder_and_a_checkpoint(tmp_path, tiny_lm_run):
    run_dir = tiny_lm_run  # the session's 2-step Pre-LN LLaMA, checkpointed (_support/shared_runs.py; read only)
    first = only_record(run_dir)
    assert first["weights"] == "model.safetensors" and first["norm"]["placement"] == "pre"
    for source in (run_dir, run_dir / "checkpoints" / "last.ckpt", run_dir / "model.safetensors"):
        out = tmp_path / f"from-{source.name}"
        assert main(["run", *TINY_LM, "norm=pre", "trainer.max_steps=1", f"init_from={source}", f"results_dir={out}"]) == 0
        record = only_record(out)
        assert record["status"] == "completed" and record["init_from"]["source"] == str(source)
    # a placement mismatch is one clear error, and nothing is trained
    assert main(["run", *TINY_LM, "norm=mix", f"init_from={run_dir}", f"results_dir={tmp_path / 'bad'}"]) == 2
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").rglob("*.safetensors"))


def test_init_from_changes_the_starting_point(tmp_path):
    """Sanity: starting from trained weights gives the trained model's validation loss before any step."""
    assert main(["run", *TINY_LM, "norm=pre", "trainer.max_steps=20", f"results_dir={tmp_path / 'a'}"]) == 0
    trained = only_record(tmp_path / "a")
    common = [*TINY_LM, "norm=pre", "trainer.max_steps=1", "optim.lr=1e-9", "optim.warmup_steps=0"]
    assert main(["run", *common, f"init_from={trained['run_dir']}", f"results_dir={tmp_path / 'b'}"]) == 0
    assert main(["run", *common, f"results_dir={tmp_path / 'c'}"]) == 0
    warm, cold = only_record(tmp_path / "b"), only_record(tmp_path / "c")
    assert warm["metrics"]["val/loss"] == pytest.approx(trained["metrics"]["val/loss"], rel=1e-3)
    assert cold["metrics"]["val/loss"] > warm["metrics"]["val/loss"] + 0.3
