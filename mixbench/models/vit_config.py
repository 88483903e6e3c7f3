"""The presets of the timm ViTs and their default options, free of torch and timm: the ``vision`` family lists its
models from here without importing the network (:mod:`mixbench.models.vit`, which re-exports these names)."""

from __future__ import annotations

# mixbench name -> (timm architecture, defaults in mixbench's vocabulary)
VIT_PRESETS: dict[str, dict] = {
    "vit_tiny": dict(timm_name="vit_tiny_patch16_224", hidden_size=192, num_heads=3, num_layers=12),
    "vit_small": dict(timm_name="vit_small_patch16_224", hidden_size=384, num_heads=6, num_layers=12),
    "vit_debug": dict(timm_name="vit_tiny_patch16_224", hidden_size=32, num_heads=2, num_layers=4),
}
# img_size / num_classes: None = taken from the data in `mixbench run` (timm's 224 / 1000 when built directly)
VIT_DEFAULTS = dict(
    img_size=None, patch_size=16, num_classes=None, mlp_ratio=4.0, drop_path_rate=0.0, global_pool="token", attention_backend="auto"
)  # SDPA kernel: auto (PyTorch chooses) | flash | cudnn | efficient | math


def vit_defaults(name: str) -> dict:
    preset = {k: v for k, v in VIT_PRESETS[name].items() if k != "timm_name"}
    return {**VIT_DEFAULTS, **preset}
