"""The model EMA of the image recipe: timm's ``ModelEmaV3`` with its update over tensor lists built once."""

from __future__ import annotations

import torch
from timm.utils import ModelEmaV3


class CachedModelEma(ModelEmaV3):
    """timm's ``ModelEmaV3`` (same decay, warm-up, stochastic rounding and state dict), updating from tensor lists it
    builds on its first update instead of walking both models' ``state_dict()`` every step.

    ema ← decay · ema + (1 − decay) · model for every floating-point parameter and buffer (timm's multi-tensor update:
    a few foreach kernels for all tensors), other buffers copied.  timm rebuilds the lists each step, ~5 ms of host time
    a step for ViT-S with the GPU idle (docs/speed.md).  The lists hold the Parameter objects and buffers themselves,
    so in-place changes (optimizer steps, a restored checkpoint) are seen; :meth:`forget_tensors` drops them where a
    module may have been moved or rebuilt (the LightningModule calls it when training starts)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lists = None

    def forget_tensors(self) -> None:
        self._lists = None

    def _tensor_lists(self, model: torch.nn.Module):
        if self._lists is None:
            pairs = list(zip(self.module.state_dict(keep_vars=True).values(), model.state_dict(keep_vars=True).values()))
            floating = [(e, m) for e, m in pairs if e.is_floating_point()]
            self._lists = ([e for e, _ in floating], [m for _, m in floating], [(e, m) for e, m in pairs if not e.is_floating_point()])
        return self._lists

    @torch.no_grad()
    def apply_update_(self, model: torch.nn.Module, decay: float) -> None:
        if not self.foreach:  # the EMA on another device than the model: timm's per-tensor path
            return super().apply_update_(model, decay)
        ema_values, model_values, copies = self._tensor_lists(model)
        for ema_v, model_v in copies:
            ema_v.copy_(model_v)
        if hasattr(self, "_foreach_lerp_"):  # timm ≥ 1.0.30: its multi-tensor update (stochastic rounding for bf16 EMAs)
            self._foreach_lerp_(ema_values, model_values, weight=1.0 - decay)
        else:  # older timm: the one foreach lerp its apply_update_ makes
            torch._foreach_lerp_(ema_values, model_values, weight=1.0 - decay)
