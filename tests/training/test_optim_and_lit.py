import math

import pytest
import torch

from mixbench import build_model
from mixbench.training.lit import CausalLMModule, OptimConfig
from mixbench.training.optim import param_groups, warmup_cosine


def test_warmup_then_cosine_to_the_floor():
    total, warmup, floor = 100, 10, 0.1
    assert warmup_cosine(0, total, warmup, floor) == 0.0
    assert warmup_cosine(5, total, warmup, floor) == pytest.approx(0.5)
    assert warmup_cosine(10, total, warmup, floor) == pytest.approx(1.0)
    assert warmup_cosine(55, total, warmup, floor) == pytest.approx(floor + (1 - floor) * 0.5)
    assert warmup_cosine(100, total, warmup, floor) == pytest.approx(floor)


def test_no_weight_decay_on_norms_biases_pos_embed_and_cls_token():
    model = build_model("vit_debug", img_size=16, patch_size=8)
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert {"pos_embed", "cls_token", "blocks.0.norm1.weight", "blocks.0.attn.qkv.bias"} <= skipped
    assert "blocks.0.attn.qkv.weight" not in skipped and no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.05


def test_validation_loss_is_token_weighted_whatever_the_batch_size():
    torch.manual_seed(0)
    model = build_model("llama_debug", seed=0)
    ids = torch.randint(0, 512, (6, 10))
    labels = ids.roll(-1, 1)
    labels[:, -1] = -100
    labels[0, 3:] = -100  # unequal token counts per row
    logits = model(ids)
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    for batch_size in (1, 2, 3, 6):
        module = CausalLMModule(model, OptimConfig())
        for start in range(0, 6, batch_size):
            module.validation_step({"input_ids": ids[start : start + batch_size], "labels": labels[start : start + batch_size]}, 0)
        assert module.val_loss.compute().item() == pytest.approx(expected.item(), rel=1e-5)
        assert math.isfinite(expected.item())


@pytest.mark.parametrize("clip, fused", [(1.0, False), (None, None), (0.0, None)])
def test_gradient_clipping_takes_the_unfused_optimizer(monkeypatch, clip, fused):
    """Lightning raises at the first clipped step of a fused optimizer (it unscales inside its step), so a run with
    trainer.gradient_clip_val gets foreach Adam(W); without clipping the fused one stays the default on GPU."""
    import types

    import mixbench.training.lit.base as base

    seen = {}
    real = base.build_optimizer
    monkeypatch.setattr(base, "build_optimizer", lambda *a, **k: seen.update(k) or real(*a, **k))
    module = CausalLMModule(build_model("llama_debug", seed=0), OptimConfig())
    trainer = types.SimpleNamespace(
        gradient_clip_val=clip,
        estimated_stepping_batches=10,
        max_epochs=None,
        world_size=1,
        accumulate_grad_batches=1,
        datamodule=types.SimpleNamespace(batch_size=4),
    )
    monkeypatch.setattr(type(module), "trainer", property(lambda self: trainer))
    module.configure_optimizers()
    assert seen["fused"] is fused


def test_the_optimizer_is_fused_on_the_cpu_too():
    """torch's CPU default is a loop over the tensors (2.7× the CPU time a step for ViT-S): the fused kernel is used."""
    from mixbench.training.optim import build_optimizer

    for name in ("adam", "adamw"):
        assert build_optimizer(build_model("llama_debug", seed=0), name, lr=1e-3).defaults["fused"] is True
