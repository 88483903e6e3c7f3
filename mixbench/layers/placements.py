"""The placement registry: one object per norm placement, owning everything that placement means.

A *placement* resolves a model-level choice (``norm=<name>``) into one block placement per block
(:meth:`Placement.plan`) and names itself in tables (:meth:`Placement.label`).  A *block placement*
(:class:`BlockPlacement`) is also a per-block rule: the modules it adds to a block and their init
(:meth:`~BlockPlacement.build`), the sub-layer formula (:meth:`~BlockPlacement.sublayer`), its depth
constants, its weight init after the family's own (:meth:`~BlockPlacement.init_weights`), and its
parameter count, derived from the modules it built (:meth:`~BlockPlacement.extra_parameters`).

Every block of both model families carries ``norm1`` / ``norm2`` (the norms of the attention / MLP
sub-layer) and the sub-modules ``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2``
(:class:`mixbench.contracts.PlacedBlock`); a placement may rely on those and nothing else.

Adding a placement = subclass :class:`BlockPlacement` (or :class:`Placement` for a per-block mix),
decorate it with :func:`register_placement`, and add ``configs/norm/<name>.yaml``.  A task's ``task.py``
may register one too.

==========  ===============================  ==========================================
placement   sub-layer output                 reference
==========  ===============================  ==========================================
pre         x + F(N(x))                      Pre-LN, Mix-LN paper Eq. 2
post        N(x + F(x))                      Post-LN, Mix-LN paper Eq. 1
sandwich    x + N_b(F(N_a(x)))               Sandwich-LN (Ding et al., 2021)
deepnorm    N(a·x + F(x)),  a = (2L)^(1/4)   DeepNorm (Wang et al., DeepNet)
admin       N(w ⊙ x + F(x)),  w learnable    Admin (Liu et al., 2020), per-channel w
mix         post in the first ⌊αL⌋ blocks,   Mix-LN (Li et al., ICLR 2025)
            pre in the rest
custom      per block from ``norm.layers``   ablations (e.g. a reversed mix)
==========  ===============================  ==========================================
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
import torch.nn as nn

from ..errors import ConfigError

Branch = Callable[[torch.Tensor], torch.Tensor]


class NormConfigError(ConfigError):
    """A norm setting is invalid; the message says which values are valid."""


@dataclass(frozen=True)
class BlockContext:
    """What a block placement may know while building block ``depth`` (0-based) of ``num_layers``."""

    spec: Any  # the model's NormSpec
    depth: int
    num_layers: int
    dim: int
    make_norm: Callable[[int], nn.Module]


class Placement:
    """A model-level placement: which block placement each block gets, and the label in tables.

    ``options``: settings of this placement alone, with their defaults (``norm.<key>``); they are added to
    the ``norm`` config group when this placement is chosen and read back with ``spec.option(key)``.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}

    def plan(self, spec, num_layers: int) -> list[str]:
        return [self.name] * num_layers

    def label(self, spec) -> str:
        return self.name

    def validate(self, spec) -> None:
        """Raise :class:`NormConfigError` for settings this placement cannot use."""


class BlockPlacement(Placement):
    """A placement that is also a per-block rule (the two sub-layers of one block)."""

    added_modules: ClassVar[tuple[str, ...]] = ()  # attribute names of the modules/parameters build() adds

    def build(self, block: nn.Module, ctx: BlockContext) -> None:
        """Create the modules and constants this placement adds to ``block`` (beyond ``norm1``/``norm2``)."""

    def sublayer(self, block: nn.Module, which: int, x: torch.Tensor, branch: Branch) -> torch.Tensor:
        """Output of sub-layer ``which`` (1 = attention, 2 = MLP) with branch F."""
        raise NotImplementedError

    def init_weights(self, block: nn.Module, ctx: BlockContext) -> None:
        """Placement-specific init, applied after the model family's own init of ``block``."""

    def extra_parameters(self, block: nn.Module) -> int:
        """Parameters this placement added to ``block`` (counted on the built modules)."""
        total = 0
        for name in self.added_modules:
            item = getattr(block, name)
            total += item.numel() if isinstance(item, nn.Parameter) else sum(p.numel() for p in item.parameters())
        return total

    def extra_repr(self, block: nn.Module) -> str:
        return ""


_PLACEMENTS: dict[str, Placement] = {}


def register_placement(cls: type[Placement]) -> type[Placement]:
    """Class decorator: register one instance of ``cls`` under ``cls.name`` (re-registering the same class is a no-op)."""
    existing = _PLACEMENTS.get(cls.name)
    if existing is not None and type(existing).__qualname__ != cls.__qualname__:
        raise ValueError(f"placement {cls.name!r} is already registered by {type(existing).__module__}.{type(existing).__qualname__}")
    _PLACEMENTS[cls.name] = cls()
    return cls


def list_placements() -> list[str]:
    return list(_PLACEMENTS)


def block_placements() -> list[str]:
    return [name for name, p in _PLACEMENTS.items() if isinstance(p, BlockPlacement)]


def get_placement(name: str) -> Placement:
    if name not in _PLACEMENTS:
        hint = difflib.get_close_matches(name, _PLACEMENTS, n=1)
        raise NormConfigError(f"unknown norm placement {name!r}" + (f" — did you mean {hint[0]!r}?" if hint else "")
                              + f"; valid: {', '.join(_PLACEMENTS)}")
    return _PLACEMENTS[name]


def get_block_placement(name: str) -> BlockPlacement:
    placement = _PLACEMENTS.get(name)
    if not isinstance(placement, BlockPlacement):
        raise NormConfigError(f"unknown block placement {name!r}; valid per-block values: {', '.join(block_placements())}")
    return placement


# ------------------------------------------------------------------------------------------------ paper placements
@register_placement
class PreLN(BlockPlacement):
    name, summary = "pre", "x + F(N(x)) — Pre-LN (Mix-LN paper Eq. 2)"

    def sublayer(self, block, which, x, branch):
        return x + branch(getattr(block, f"norm{which}")(x))


@register_placement
class PostLN(BlockPlacement):
    name, summary = "post", "N(x + F(x)) — Post-LN (Mix-LN paper Eq. 1)"

    def sublayer(self, block, which, x, branch):
        return getattr(block, f"norm{which}")(x + branch(x))


def num_post_layers(alpha: float, num_layers: int) -> int:
    """Mix-LN count of Post-LN blocks: ``floor(alpha * L)``, robust to float rounding."""
    # alpha=1/6 with L=24 must give 4, not 3 from 3.9999999; round to 9 decimals before flooring.
    return int(math.floor(round(alpha * num_layers, 9)))


@register_placement
class MixLN(Placement):
    name, summary = "mix", "post in the first ⌊αL⌋ blocks, pre in the rest — Mix-LN (norm.alpha, or norm.num_post=K)"

    def plan(self, spec, num_layers):
        k = spec.num_post if spec.num_post is not None else num_post_layers(spec.alpha, num_layers)
        if k > num_layers:
            raise NormConfigError(f"norm.num_post={k} exceeds the model's {num_layers} blocks")
        return ["post"] * k + ["pre"] * (num_layers - k)

    def label(self, spec):
        return f"mix(post={spec.num_post})" if spec.num_post is not None else f"mix(α={spec.alpha:g})"


@register_placement
class SandwichLN(BlockPlacement):
    name, summary = "sandwich", "x + N_b(F(N_a(x))) — Sandwich-LN (Ding et al., 2021)"
    added_modules = ("norm1_post", "norm2_post")

    def build(self, block, ctx):
        block.norm1_post = ctx.make_norm(ctx.dim)
        block.norm2_post = ctx.make_norm(ctx.dim)

    def sublayer(self, block, which, x, branch):
        return x + getattr(block, f"norm{which}_post")(branch(getattr(block, f"norm{which}")(x)))


def deepnorm_constants(num_layers: int, paper_compat: bool = False) -> tuple[float, float]:
    """DeepNorm residual scale ``a`` and init gain ``b`` for ``num_layers`` blocks.

    DeepNet (decoder-only / encoder-only): ``a = (2L)^(1/4)``, ``b = (8L)^(-1/4)``.
    ``paper_compat`` returns what the official Mix-LN code uses: ``a = sqrt(8)`` for any depth and
    a xavier gain of ``(8L)^(+1/4)``.
    """
    if paper_compat:
        return math.sqrt(8.0), (8.0 * num_layers) ** 0.25
    return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25


@register_placement
class DeepNorm(BlockPlacement):
    name, summary = "deepnorm", "N(a·x + F(x)), a = (2L)^¼; v/out/MLP init × (8L)^-¼ — DeepNorm (DeepNet)"

    def build(self, block, ctx):
        block.residual_scale = deepnorm_constants(ctx.num_layers, ctx.spec.paper_compat)[0]

    def sublayer(self, block, which, x, branch):
        return getattr(block, f"norm{which}")(x * block.residual_scale + branch(x))

    def init_weights(self, block, ctx):
        from .init import init_deepnorm_

        init_deepnorm_(block.attn.qkv.weight, block.attn.proj.weight, block.mlp.fc1.weight, block.mlp.fc2.weight,
                       ctx.dim, block.mlp.fc2.in_features, ctx.num_layers, ctx.spec.paper_compat)

    def label(self, spec):
        return self.name + ("[paper-compat]" if spec.paper_compat else "")

    def extra_repr(self, block):
        return f"residual_scale={block.residual_scale:.4f}"


def admin_omega_init(spec, block_index: int) -> tuple[float, float]:
    """Initial Admin residual weights of block ``block_index``'s attention and MLP sub-layers: ``norm.admin_init``
    if set, else w_k = sqrt(k + 1) for the k-th sub-layer (0-based; attention and MLP counted separately)."""
    if spec.admin_init is not None:
        return float(spec.admin_init), float(spec.admin_init)
    k = 2 * block_index
    return math.sqrt(k + 1), math.sqrt(k + 2)


@register_placement
class Admin(BlockPlacement):
    name, summary = "admin", "N(w ⊙ x + F(x)), w learnable per channel — Admin (Liu et al., 2020)"
    added_modules = ("omega1", "omega2")

    def build(self, block, ctx):
        w1, w2 = admin_omega_init(ctx.spec, ctx.depth)
        block.omega1 = nn.Parameter(torch.full((ctx.dim,), w1))
        block.omega2 = nn.Parameter(torch.full((ctx.dim,), w2))

    def sublayer(self, block, which, x, branch):
        omega = block.omega1 if which == 1 else block.omega2
        return getattr(block, f"norm{which}")(x * omega + branch(x))


@register_placement
class Custom(Placement):
    name, summary = "custom", "one block placement per block from norm.layers=[pre,post,...]"

    def validate(self, spec):
        if spec.layers is None:
            raise NormConfigError("norm=custom needs norm.layers=[...], one placement per block")

    def plan(self, spec, num_layers):
        return list(spec.layers)
