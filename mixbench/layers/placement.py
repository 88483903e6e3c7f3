"""The shared norm-placement switch: the ``norm`` config group as a validated :class:`NormSpec`.

A model-level choice (``norm=<placement>``) resolves to one block placement per block through the
placement registry (:mod:`mixbench.layers.placements`, which also documents every formula):

* ``pre`` / ``post`` / ``sandwich`` / ``deepnorm`` / ``admin`` (and every other block placement): every block the same;
* ``group_ln``: ``pre`` with ``kind=groupnorm`` (GroupNorm over the channels of each token);
* ``mix`` (Mix-LN): the first ``floor(alpha * L)`` blocks ``post``, the rest ``pre`` (paper Sec. 3);
  ``num_post`` gives the count directly (the official code's ``POST_NUM``);
* ``layers``: an explicit per-block list (``norm=custom``; it overrides any placement);
* the placements beyond the paper (``lns``, ``peri``, ``reordered``, ``hybrid``, ``hybrid_star``, ``dyt``)
  and the ``qk_norm`` option: see :mod:`mixbench.layers.placements` and :mod:`mixbench.layers.attention`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .norm import NORM_KINDS, NormConfigError
from .placements import (
    block_placements,
    get_block_placement,
    get_placement,
    list_placements,
)

QK_NORMS = ("none", "head", "full")


def block_codes() -> dict[str, str]:
    """Each block placement's code in a custom plan's label: its first two letters (``post`` → ``po``), a multi-word
    name's initials (``hybrid_first`` → ``hf``); a code that two registered placements share is neither's, and they keep
    their whole names, so that two plans never share a label (the label is the table row)."""
    codes = {n: "".join(w[0] for w in n.split("_")) if "_" in n else n[:2] for n in block_placements()}
    shared = Counter(codes.values())
    return {n: c if shared[c] == 1 else n for n, c in codes.items()}


def __getattr__(name: str):
    """``BLOCK_PLACEMENTS`` / ``MODEL_PLACEMENTS``: the registered names now (plugins may add some)."""
    if name == "BLOCK_PLACEMENTS":
        return tuple(block_placements())
    if name == "MODEL_PLACEMENTS":
        return tuple(list_placements())
    raise AttributeError(name)


@dataclass(frozen=True)
class NormSpec:
    """Model-level normalization settings (the ``norm`` config group).

    Attributes:
        placement: a registered placement (``mixbench.layers.list_placements()``).
        alpha: Mix-LN post-LN ratio; the first ``floor(alpha*L)`` blocks are Post-LN.
        num_post: Mix-LN integer count of leading Post-LN blocks (overrides ``alpha``).
        layers: explicit per-block placements (``placement='custom'``, or overrides any placement).
        kind: ``rmsnorm`` | ``layernorm`` | ``groupnorm``; ``None`` = the model family's default.
        eps: norm epsilon; ``None`` = the family default (1e-6).
        final_norm: apply a norm after the last block, before the head.
        paper_compat: DeepNorm only — reproduce the official Mix-LN code (a = sqrt(8) for
            every depth, xavier-normal init with gain (8L)^(+1/4)) instead of DeepNet's constants.
        groups: number of channel groups of ``kind=groupnorm``.
        admin_init: Admin's initial residual weights ω: ``profile`` = Admin's profiling pass over a real
            batch (:func:`mixbench.layers.placements.profile_admin`); ``sqrt`` = the fixed schedule
            w_k = sqrt(k + 1) for the k-th sub-layer (0-based, attention and MLP counted separately), the
            profiled values when every branch output has unit variance (``None``, in configs written before
            profiling existed, means ``sqrt``); a positive number = that constant.
        scaled_init: output projections (attention out, MLP down) ~ N(0, std/sqrt(2L)) (paper App. B).
        scaled_embed: multiply the token / patch embeddings by sqrt(d) (Takase et al., 2023).
        qk_norm: ``none`` | ``head`` (a norm of width head_dim on q and k after the head split) | ``full``
            (a norm over the whole projected q and k, OLMo 2); before RoPE; on any placement.
        options: settings that the chosen placement declares (``Placement.options``), e.g. ``norm.embed_norm``.
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
    admin_init: float | str | None = "profile"
    scaled_init: bool = False
    scaled_embed: bool = False
    qk_norm: str = "none"
    options: dict[str, Any] = field(default_factory=dict, compare=True)

    def __post_init__(self) -> None:
        placement = get_placement(self.placement)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise NormConfigError(f"norm.alpha must be a number in [0, 1], got {self.alpha!r}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise NormConfigError(f"norm.alpha must be in [0, 1], got {self.alpha}")
        if self.num_post is not None and (isinstance(self.num_post, bool) or not isinstance(self.num_post, int) or self.num_post < 0):
            raise NormConfigError(f"norm.num_post must be a non-negative integer, got {self.num_post!r}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
            valid = block_placements()
            bad = [p for p in self.layers if p not in valid]
            if bad:
                raise NormConfigError(f"norm.layers has unknown placement(s) {bad}; valid per-block values: {', '.join(valid)}")
        if self.kind is not None and self.kind not in NORM_KINDS:
            raise NormConfigError(f"unknown norm.kind {self.kind!r}; valid: {', '.join(NORM_KINDS)}")
        if self.eps is not None and not (isinstance(self.eps, (int, float)) and self.eps > 0):
            raise NormConfigError(f"norm.eps must be a positive number, got {self.eps!r}")
        if not isinstance(self.groups, int) or self.groups < 1:
            raise NormConfigError(f"norm.groups must be a positive integer, got {self.groups!r}")
        if self.qk_norm not in QK_NORMS:
            raise NormConfigError(f"unknown norm.qk_norm {self.qk_norm!r}; valid: {', '.join(QK_NORMS)}")
        declared = placement.options
        unknown = sorted(set(self.options) - set(declared))
        if unknown:
            raise NormConfigError(
                f"unknown norm option(s) {unknown} for norm={self.placement}"
                + (f"; its own options: {', '.join(declared)}" if declared else "")
            )
        object.__setattr__(self, "options", {**declared, **self.options})
        placement.validate(self)
        for name in dict.fromkeys(self.layers or ()):
            get_block_placement(name).validate_block(self)

    @classmethod
    def from_dict(cls, d: dict) -> NormSpec:
        """From the ``norm`` config group: common settings are fields, the placement's own settings go to ``options``."""
        common = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "options"}
        extra = {k: v for k, v in d.items() if k not in common}
        declared = get_placement(d.get("placement", "pre")).options
        unknown = sorted(set(extra) - set(declared))
        if unknown:
            valid = [f for f in cls.__dataclass_fields__ if f != "options"] + list(declared)
            raise NormConfigError(f"unknown norm option(s) {unknown}; valid: {', '.join(valid)}")
        return cls(**common, options=extra)

    def option(self, key: str) -> Any:
        """A setting the placement declares (its default unless set)."""
        return self.options[key]

    def to_dict(self) -> dict:
        """The inverse of :meth:`from_dict` (the flat ``norm`` config group)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "options"}
        out["layers"] = list(self.layers) if self.layers is not None else None
        return {**out, **self.options}

    def plan(self, num_layers: int) -> list[str]:
        """Per-block placement list for a model with ``num_layers`` blocks."""
        if not isinstance(num_layers, int) or num_layers < 1:
            raise NormConfigError(f"num_layers must be a positive integer, got {num_layers!r}")
        if self.layers is not None:
            if len(self.layers) != num_layers:
                raise NormConfigError(
                    f"norm.layers has {len(self.layers)} entries but the model has {num_layers} blocks; "
                    f"give exactly one of {', '.join(block_placements())} per block"
                )
            return list(self.layers)
        return get_placement(self.placement).plan(self, num_layers)

    def label(self) -> str:
        """Short human-readable name used in tables, e.g. ``mix(α=0.25)``."""
        if self.layers is not None:
            codes = block_codes()
            return "custom[" + ",".join(codes.get(p, p) for p in self.layers) + "]"
        if self.placement == "pre" and self.kind == "groupnorm":
            name = "group_ln"
        else:
            name = get_placement(self.placement).label(self)
            if self.kind is not None:
                name += f"[{self.kind}]"
        if self.scaled_init:
            name += "+scaled_init"
        if self.scaled_embed:
            name += "+scaled_embed"
        if not self.final_norm:
            name += "[no-final-norm]"
        if self.qk_norm != "none":
            name += f"+qk_norm={self.qk_norm}"
        return name


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
    spec = NormSpec(placement=norm, alpha=alpha, num_post=num_post, layers=tuple(layers) if layers is not None else None)
    return spec.plan(num_layers)
