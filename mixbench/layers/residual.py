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

from collections.abc import Callable

import torch
import torch.nn as nn

from .attention import add_qk_norm
from .norm import by_position
from .placements import BlockContext, get_block_placement

Branch = Callable[[torch.Tensor], torch.Tensor]


class PlacedResidual:
    """Mixin for a block with ``norm1``/``norm2`` that applies its placement to both sub-layers.

    ``placement`` is a plain Python string per block, so ``torch.compile`` specializes each block
    without tensor-level branching.
    """

    placement: str = "pre"
    option_modules: tuple[str, ...] = ()  # modules the norm options (norm.qk_norm) added, relative to the block

    def setup_placement(self, spec, depth: int, num_layers: int, dim: int, make_norm: Callable[..., nn.Module]) -> None:
        """Take block ``depth``'s placement from ``spec``, let it add its modules, then add the q/k norms of
        ``spec.qk_norm``.

        ``make_norm`` is the model's norm factory (the one ``norm1``/``norm2`` were made with).  If the block's
        placement brings its own (:meth:`~mixbench.layers.Placement.norm_factory`, e.g. a ``dyt`` block in a
        per-block plan), or the factory depends on the position (DyT's α0), ``norm1``/``norm2`` are re-made with
        their positions (``attn``/``mlp``; in place, so ``state_dict`` keys keep their order).
        """
        self.placement = spec.plan(num_layers)[depth]
        rule = get_block_placement(self.placement)
        rule.validate_block(spec)
        block_norm = rule.norm_factory(spec, make_norm)
        if block_norm is not make_norm or by_position(block_norm):
            self.norm1 = block_norm(dim, position="attn")
            self.norm2 = block_norm(dim, position="mlp")
        self.placement_context = BlockContext(spec, depth, num_layers, dim, block_norm)
        rule.build(self, self.placement_context)
        self.option_modules = add_qk_norm(self.attn, spec.qk_norm, block_norm)

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


def option_parameters(block) -> int:
    """Parameters the norm options (``norm.qk_norm``) added to ``block``, counted on the modules."""
    return sum(p.numel() for name in block.option_modules for p in block.get_submodule(name).parameters())


def placement_parameters(blocks) -> int:
    """Parameters the placements and the norm options added to ``blocks`` beyond Pre-LN's (e.g. Sandwich-LN's output
    norms, HybridNorm's q/k/v norms less its dropped input norm, ``norm.qk_norm``'s q/k norms), counted on the modules.
    A model-level embedding norm (``norm.embed_norm``) is not in the blocks: see ``model.embed_norm`` / ``norm_pre``."""
    return sum(block.placement_rule.extra_parameters(block) + option_parameters(block) for block in blocks)
