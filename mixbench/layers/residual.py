"""Residual wiring of one transformer block: the mixin through which every model family applies its placement.

Both model families (LLaMA in :mod:`mixbench.models.llama`, timm ViT in :mod:`mixbench.models.vit`)
inherit :class:`PlacedResidual` and call :meth:`PlacedResidual.placed_forward` with their two
branch functions; what each placement computes lives in its registry object
(:mod:`mixbench.layers.placements`).  Module names are shared: ``norm1`` / ``norm2`` are the norms of
the attention / MLP sub-layer (pre-norms for ``pre``, post-add norms for ``post`` / ``deepnorm`` /
``admin``, input norms for ``sandwich``), and a placement's own additions (e.g. ``norm1_post``,
``omega1``) are named by it.  So Pre-LN, Post-LN and Mix-LN models have identical ``state_dict`` keys.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from .placements import BlockContext, get_block_placement

Branch = Callable[[torch.Tensor], torch.Tensor]


class PlacedResidual:
    """Mixin for a block with ``norm1``/``norm2`` that applies its placement to both sub-layers.

    ``placement`` is a plain Python string per block, so ``torch.compile`` specializes each block
    without tensor-level branching.
    """

    placement: str = "pre"

    def setup_placement(self, spec, depth: int, num_layers: int, dim: int, make_norm: Callable[..., nn.Module]) -> None:
        """Take block ``depth``'s placement from ``spec`` and let it add its modules."""
        self.placement = spec.plan(num_layers)[depth]
        self.placement_context = BlockContext(spec, depth, num_layers, dim, make_norm)
        get_block_placement(self.placement).build(self, self.placement_context)

    @property
    def placement_rule(self):
        return get_block_placement(self.placement)

    def placed_forward(self, x: torch.Tensor, attn_branch: Branch, mlp_branch: Branch) -> torch.Tensor:
        rule = self.placement_rule
        return rule.sublayer(self, 2, rule.sublayer(self, 1, x, attn_branch), mlp_branch)

    def extra_repr(self) -> str:  # shown by print(model)
        extra = self.placement_rule.extra_repr(self)
        return f"placement={self.placement}" + (f", {extra}" if extra else "")


def init_placements_(blocks) -> None:
    """Every block's placement-specific init (after the family's own init)."""
    for block in blocks:
        block.placement_rule.init_weights(block, block.placement_context)


def placement_parameters(blocks) -> int:
    """Parameters the placements added to ``blocks`` (e.g. Sandwich-LN's output norms), counted on the modules."""
    return sum(block.placement_rule.extra_parameters(block) for block in blocks)
