"""compile.enabled / compile.mode through `mixbench run`: composition, the error for an unknown mode, old configs with a
boolean `compile`, what reaches torch.compile, and (GPU) a CUDA-graph run with EMA, Mixup and logging."""

import pytest
import torch
from _support.runs import TINY_VIT as CLI_TINY_VIT
from _support.runs import records
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.training.compile import COMPILE_MODES
from mixbench.training.config import compose, load_run_config
from mixbench.training.graph_marker import CudaGraphStepMarker

TINY_VIT = [*CLI_TINY_VIT, "save_weights=false"]


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], {"enabled": True, "mode": None, "scope": "model"}),  # the ImageNet recipe's `compile: true`, read as the group
        (["compile=false"], {"enabled": False, "mode": None, "scope": "model"}),
        (["compile=true"], {"enabled": True, "mode": None, "scope": "model"}),
        (["compile.mode=reduce-overhead"], {"enabled": True, "mode": "reduce-overhead", "scope": "model"}),
        (
            ["compile=false", "compile.mode=max-autotune-no-cudagraphs"],
            {"enabled": False, "mode": "max-autotune-no-cudagraphs", "scope": "model"},
        ),
        (["compile.scope=blocks"], {"enabled": True, "mode": None, "scope": "blocks"}),
    ],
)
def test_compile_settings_compose(args, expected):
    cfg = compose(["task=in1k_vit_small", *args])
    assert OmegaConf.to_container(cfg.compile) == expected


def test_an_unknown_mode_is_one_error_naming_the_allowed_modes():
    with pytest.raises(ConfigError) as err:
        compose(["task=vit_tiny", "compile.mode=fastest"])
    assert "compile.mode='fastest'" in str(err.value)
    assert all(mode in str(err.value) for mode in COMPILE_MODES)


def test_a_config_saved_with_a_boolean_compile_still_loads(tmp_path):
    cfg = compose(["task=vit_tiny"])
    saved = OmegaConf.to_container(cfg)
    saved["compile"] = True
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))
    assert OmegaConf.to_container(load_run_config(tmp_path).compile) == {"enabled": True, "mode": None, "scope": "model"}


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_the_mode_reaches_module_compile_and_the_record(tmp_path, monkeypatch, mode):
    """What `mixbench run` hands torch: Module.compile on the model, with the mode when one is set; CUDA-graph modes
    add the step marker (called before every training and validation batch)."""
    calls, markers = [], []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: calls.append((type(self).__name__, kwargs)))
    original = CudaGraphStepMarker.__init__

    def track(self):
        original(self)
        markers.append(self)

    monkeypatch.setattr(CudaGraphStepMarker, "__init__", track)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    setting = [f"compile.mode={mode}"] if mode else ["compile=true"]
    assert main(["run", "task=vit_tiny", *setting, f"results_dir={tmp_path}", *TINY_VIT]) == 0
    (record,) = records(tmp_path)
    assert calls == [("VisionTransformer", {"mode": mode} if mode else {})]
    assert record["compile"] == {"mode": mode or "default", "cudagraphs": mode == "reduce-overhead", "scope": "model"}
    if mode == "reduce-overhead":
        (marker,) = markers
        assert marker.marks == 3 + 1  # 3 training batches (max_steps stops fit before its validation), 1 final validation batch
    else:
        assert markers == []


def test_regional_compilation_compiles_each_block_and_not_the_model():
    """compile.scope=blocks: Module.compile on every block (one code object, compiled once and reused), none on the
    model; an unknown scope is one error naming both."""
    from mixbench.training.compile import compile_model

    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
    cfg = compose(["task=llama_lm", "compile=true", "compile.scope=blocks"])
    assert compile_model(cfg, model) == {"mode": "default", "cudagraphs": False, "scope": "blocks"}
    assert model._compiled_call_impl is None
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    with pytest.raises(ConfigError, match="compile.scope='layers'.*model.*blocks"):
        compose(["task=llama_lm", "compile.scope=layers"])


@pytest.mark.slow
def test_a_tiny_cpu_run_compiles_with_mode_default(tmp_path):
    assert main(["run", "task=vit_tiny", "compile.mode=default", "ema.decay=0.99", f"results_dir={tmp_path}", *TINY_VIT]) == 0
    (record,) = records(tmp_path)
    assert record["status"] == "completed" and record["compile"] == {"mode": "default", "cudagraphs": False, "scope": "model"}
    assert record["metrics"]["val_ema/loss"] != record["metrics"]["val/loss"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_cuda_graph_run_with_ema_mixup_and_logging(tmp_path, mode):
    """A compiled ViT run on the GPU with EMA, Mixup/CutMix, per-step logging and two validations finishes, and its
    training loss stays finite and its EMA differs from the raw weights."""
    args = [
        "task=vit_tiny",
        f"compile.mode={mode}",
        "ema.decay=0.9",
        "mixup.mixup_alpha=0.8",
        "mixup.cutmix_alpha=1.0",
        "trainer.log_every_n_steps=1",
        "trainer.val_check_interval=4",
        "trainer.limit_val_batches=2",
        "trainer.max_steps=8",
        "trainer.max_epochs=null",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        "save_weights=false",
        f"results_dir={tmp_path}",
    ]
    assert main(["run", *args]) == 0
    (record,) = records(tmp_path)
    assert record["status"] == "completed" and record["steps"] == 8
    assert record["compile"]["cudagraphs"] == (mode == "reduce-overhead")
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in record["train_loss_history"])
    assert record["metrics"]["val_ema/loss"] != record["metrics"]["val/loss"]
