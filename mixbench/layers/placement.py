"""The shared norm-placement switch: which normalization layout each transformer block uses.

Every block has two sub-layers F (attention, then MLP).  With N a norm module, each sub-layer of
block i computes, according to that block's placement:

==========  ===============================  ==========================================
placement   sub-layer output                 reference
==========  ===============================  ==========================================
pre         x + F(N(x))                      Pre-LN, Mix-LN paper Eq. 2
post        N(x + F(x))                      Post-LN, Mix-LN paper Eq. 1
sandwich    x + N_b(F(N_a(x)))               Sandwich-LN (Ding et al., 2021)
deepnorm    N(a·x + F(x)),  a = (2L)^(1/4)   DeepNorm (Wang et al., DeepNet)
admin       N(w ⊙ x + F(x)),  w learnable    Admin (Liu et al., 2020), per-channel w
==========  ===============================  ==========================================

A *model-level* choice (``norm=...``) resolves to one placement per block:

* ``pre`` / ``post`` / ``sandwich`` / ``deepnorm`` / ``admin``: every block the same.
* ``group_ln``: ``pre`` with ``kind=groupnorm`` (GroupNorm over the channels of each token).
* ``mix`` (Mix-LN): the first ``floor(alpha * L)`` blocks ``post``, the rest ``pre``
  (paper Sec. 3).  ``num_post`` gives the count directly (the official code's ``POST_NUM``);
  ``layers`` gives an explicit per-block list (e.g. a reversed mix for ablations).

This module is pure Python (no torch) so configs can be validated cheaply.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..errors import ConfigError

BLOCK_PLACEMENTS = ("pre", "post", "sandwich", "deepnorm", "admin")
MODEL_PLACEMENTS = ("pre", "post", "mix", "sandwich", "deepnorm", "admin", "custom")
NORM_KINDS = ("rmsnorm", "layernorm", "groupnorm")


class NormConfigError(ConfigError):
    """A norm setting is invalid; the message says which values are valid."""


@dataclass(frozen=True)
class NormSpec:
    """Model-level normalization settings (the ``norm`` config group).

    Attributes:
        placement: one of ``MODEL_PLACEMENTS``.
        alpha: Mix-LN post-LN ratio; the first ``floor(alpha*L)`` blocks are Post-LN.
        num_post: Mix-LN integer count of leading Post-LN blocks (overrides ``alpha``).
        layers: explicit per-block placements (``placement='custom'``, or overrides any placement).
        kind: ``rmsnorm`` | ``layernorm``; ``None`` = the model family's default.
        eps: norm epsilon; ``None`` = the family default (1e-6).
        final_norm: apply a norm after the last block, before the head.
        paper_compat: DeepNorm only — reproduce the official Mix-LN code (a = sqrt(8) for
            every depth, xavier-normal init with gain (8L)^(+1/4)) instead of DeepNet's constants.
        groups: number of channel groups of ``kind=groupnorm``.
        admin_init: Admin's initial residual weight; ``None`` = Admin's rule w_k = sqrt(k + 1) for
            the k-th sub-layer (0-based, attention and MLP counted separately), i.e. its profiled
            init under the assumption that every earlier sub-layer output has unit variance.
        scaled_init: output projections (attention out, MLP down) ~ N(0, std/sqrt(2L)) (paper App. B).
        scaled_embed: multiply the token / patch embeddings by sqrt(d) (Takase et al., 2023).
    """

    placement: str = "pre"
    alpha: float = 0.25
    num_post: int | None = None
    layers: tuple[str, ...] | None = None
    kind: str | None = None
    eps: float | None = None
    final_norm: bool = True
    paper_compat: bool = False
    groups: int = 8
    admin_init: float | None = None
    scaled_init: bool = False
    scaled_embed: bool = False

    def __post_init__(self) -> None:
        if self.placement not in MODEL_PLACEMENTS:
            raise NormConfigError(
                f"unknown norm placement {self.placement!r}; valid: {', '.join(MODEL_PLACEMENTS)}"
            )
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise NormConfigError(f"norm.alpha must be a number in [0, 1], got {self.alpha!r}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise NormConfigError(f"norm.alpha must be in [0, 1], got {self.alpha}")
        if self.num_post is not None and (
            isinstance(self.num_post, bool) or not isinstance(self.num_post, int) or self.num_post < 0
        ):
            raise NormConfigError(f"norm.num_post must be a non-negative integer, got {self.num_post!r}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
            bad = [p for p in self.layers if p not in BLOCK_PLACEMENTS]
            if bad:
                raise NormConfigError(
                    f"norm.layers has unknown placement(s) {bad}; valid per-block values: "
                    f"{', '.join(BLOCK_PLACEMENTS)}"
                )
        if self.placement == "custom" and self.layers is None:
            raise NormConfigError("norm=custom needs norm.layers=[...], one placement per block")
        if self.kind is not None and self.kind not in NORM_KINDS:
            raise NormConfigError(f"unknown norm.kind {self.kind!r}; valid: {', '.join(NORM_KINDS)}")
        if self.eps is not None and not (isinstance(self.eps, (int, float)) and self.eps > 0):
            raise NormConfigError(f"norm.eps must be a positive number, got {self.eps!r}")
        if not isinstance(self.groups, int) or self.groups < 1:
            raise NormConfigError(f"norm.groups must be a positive integer, got {self.groups!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "NormSpec":
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise NormConfigError(f"unknown norm option(s) {unknown}; valid: {', '.join(cls.__dataclass_fields__)}")
        return cls(**d)

    def plan(self, num_layers: int) -> list[str]:
        """Per-block placement list for a model with ``num_layers`` blocks."""
        return layer_plan(self.placement, num_layers, alpha=self.alpha, num_post=self.num_post, layers=self.layers)

    def label(self) -> str:
        """Short human-readable name used in tables, e.g. ``mix(α=0.25)``."""
        if self.layers is not None:
            return "custom[" + ",".join(p[:2] for p in self.layers) + "]"
        name = self.placement
        if self.placement == "mix":
            name = f"mix(post={self.num_post})" if self.num_post is not None else f"mix(α={self.alpha:g})"
        if self.placement == "deepnorm" and self.paper_compat:
            name += "[paper-compat]"
        if self.kind is not None and not (self.placement == "pre" and self.kind == "groupnorm"):
            name += f"[{self.kind}]"
        if self.placement == "pre" and self.kind == "groupnorm":
            name = "group_ln"
        if self.scaled_init:
            name += "+scaled_init"
        if self.scaled_embed:
            name += "+scaled_embed"
        if not self.final_norm:
            name += "[no-final-norm]"
        return name


def num_post_layers(alpha: float, num_layers: int) -> int:
    """Mix-LN count of Post-LN blocks: ``floor(alpha * L)``, robust to float rounding."""
    # alpha=1/6 with L=24 must give 4, not 3 from 3.9999999; round to 9 decimals before flooring.
    return int(math.floor(round(alpha * num_layers, 9)))


def layer_plan(
    norm: str,
    num_layers: int,
    alpha: float = 0.25,
    num_post: int | None = None,
    layers: Sequence[str] | None = None,
) -> list[str]:
    """Resolve a model-level placement into one block placement per layer.

    >>> layer_plan("mix", 12, alpha=0.25)
    ['post', 'post', 'post', 'pre', 'pre', 'pre', 'pre', 'pre', 'pre', 'pre', 'pre', 'pre']
    """
    if not isinstance(num_layers, int) or num_layers < 1:
        raise NormConfigError(f"num_layers must be a positive integer, got {num_layers!r}")
    spec = NormSpec(placement=norm, alpha=alpha, num_post=num_post, layers=tuple(layers) if layers is not None else None)
    if spec.layers is not None:
        if len(spec.layers) != num_layers:
            raise NormConfigError(
                f"norm.layers has {len(spec.layers)} entries but the model has {num_layers} blocks; "
                f"give exactly one of {', '.join(BLOCK_PLACEMENTS)} per block"
            )
        return list(spec.layers)
    if norm == "mix":
        k = num_post if num_post is not None else num_post_layers(alpha, num_layers)
        if k > num_layers:
            raise NormConfigError(f"norm.num_post={k} exceeds the model's {num_layers} blocks")
        return ["post"] * k + ["pre"] * (num_layers - k)
    return [norm] * num_layers


def deepnorm_constants(num_layers: int, paper_compat: bool = False) -> tuple[float, float]:
    """DeepNorm residual scale ``a`` and init gain ``b`` for ``num_layers`` blocks.

    DeepNet (decoder-only / encoder-only): ``a = (2L)^(1/4)``, ``b = (8L)^(-1/4)``.
    ``paper_compat`` returns what the official Mix-LN code uses: ``a = sqrt(8)`` for any depth and
    a xavier gain of ``(8L)^(+1/4)``.
    """
    if paper_compat:
        return math.sqrt(8.0), (8.0 * num_layers) ** 0.25
    return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25


def admin_omega_init(spec: NormSpec, block_index: int) -> tuple[float, float]:
    """Initial Admin residual weights of block ``block_index``'s attention and MLP sub-layers."""
    if spec.admin_init is not None:
        return float(spec.admin_init), float(spec.admin_init)
    k = 2 * block_index
    return math.sqrt(k + 1), math.sqrt(k + 2)
