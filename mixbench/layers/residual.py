"""Residual wiring of one transformer block for every placement — the only code that knows where norms go.

Both model families (LLaMA in :mod:`mixbench.models.llama`, timm ViT in :mod:`mixbench.models.vit`)
inherit :class:`PlacedResidual` and call :meth:`PlacedResidual.placed_forward` with their two
branch functions.  Module names are shared: ``norm1`` / ``norm2`` are the norms of the attention / MLP
sub-layer (pre-norms for ``pre``, post-add norms for ``post`` / ``deepnorm`` / ``admin``, input norms
for ``sandwich``), ``norm1_post`` / ``norm2_post`` are Sandwich-LN's extra output norms and
``omega1`` / ``omega2`` Admin's residual weights.  So Pre-LN, Post-LN and Mix-LN models have identical
``state_dict`` keys.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .placement import (
    BLOCK_PLACEMENTS,
    NormConfigError,
    NormSpec,
    admin_omega_init,
    deepnorm_constants,
)

Branch = Callable[[torch.Tensor], torch.Tensor]


def apply_placement(
    placement: str,
    x: torch.Tensor,
    branch: Branch,
    norm: nn.Module,
    out_norm: nn.Module | None = None,
    residual_scale: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """One sub-layer: ``pre`` x+F(N(x)), ``post`` N(x+F(x)), ``sandwich`` x+N_b(F(N_a(x))),
    ``deepnorm`` N(a·x+F(x)) (float a), ``admin`` N(w⊙x+F(x)) (learnable w)."""
    if placement == "pre":
        return x + branch(norm(x))
    if placement == "post":
        return norm(x + branch(x))
    if placement == "sandwich":
        return x + out_norm(branch(norm(x)))
    if placement in ("deepnorm", "admin"):
        return norm(x * residual_scale + branch(x))
    raise NormConfigError(f"unknown block placement {placement!r}; valid: {', '.join(BLOCK_PLACEMENTS)}")


class PlacedResidual:
    """Mixin for a block with ``norm1``/``norm2`` that applies its placement to both sub-layers.

    ``placement`` is a plain Python string per block, so ``torch.compile`` specializes each block
    without tensor-level branching.
    """

    placement: str = "pre"
    residual_scale: float = 1.0

    def setup_placement(self, spec: NormSpec, depth: int, num_layers: int, dim: int, make_norm: Callable[..., nn.Module]) -> None:
        """Take block ``depth``'s placement from ``spec`` and create the modules that placement adds."""
        self.placement = spec.plan(num_layers)[depth]
        self.residual_scale = deepnorm_constants(num_layers, spec.paper_compat)[0] if self.placement == "deepnorm" else 1.0
        if self.placement == "sandwich":
            self.norm1_post = make_norm(dim)
            self.norm2_post = make_norm(dim)
        if self.placement == "admin":
            w1, w2 = admin_omega_init(spec, depth)
            self.omega1 = nn.Parameter(torch.full((dim,), w1))
            self.omega2 = nn.Parameter(torch.full((dim,), w2))

    def _scale(self, which: int) -> float | torch.Tensor:
        if self.placement == "admin":
            return self.omega1 if which == 1 else self.omega2
        return self.residual_scale

    def placed_forward(self, x: torch.Tensor, attn_branch: Branch, mlp_branch: Branch) -> torch.Tensor:
        x = apply_placement(self.placement, x, attn_branch, self.norm1, getattr(self, "norm1_post", None), self._scale(1))
        return apply_placement(self.placement, x, mlp_branch, self.norm2, getattr(self, "norm2_post", None), self._scale(2))

    def extra_repr(self) -> str:  # shown by print(model)
        scale = f", residual_scale={self.residual_scale:.4f}" if self.placement == "deepnorm" else ""
        return f"placement={self.placement}{scale}"
