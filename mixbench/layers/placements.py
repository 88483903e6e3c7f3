"""The placement registry: one object per norm placement, owning everything that placement means.

A *placement* resolves a model-level choice (``norm=<name>``) into one block placement per block
(:meth:`Placement.plan`) and names itself in tables (:meth:`Placement.label`).  A *block placement*
(:class:`BlockPlacement`) is also a per-block rule: the modules it adds to a block and their init
(:meth:`~BlockPlacement.build`), the sub-layer formula (:meth:`~BlockPlacement.sublayer`), its depth
constants, its weight init after the family's own (:meth:`~BlockPlacement.init_weights`), and its
parameter count, derived from the modules it built (:meth:`~BlockPlacement.extra_parameters`).

Every block of both model families carries ``norm1`` / ``norm2`` (the norms of the attention / MLP
sub-layer) and the sub-modules ``attn.qkv``, ``attn.proj``, ``mlp.fc1``, ``mlp.fc2``
(:class:`mixbench.core.contracts.PlacedBlock`); a placement may rely on those and nothing else — plus, for norms
inside attention, ``attn.num_heads`` / ``attn.head_dim`` and the slots of :mod:`mixbench.layers.attention`.

Adding a placement = subclass :class:`BlockPlacement` (or :class:`Placement` for a per-block mix),
decorate it with :func:`register_placement`, and add ``configs/norm/<name>.yaml``.  A task's ``task.py``
may register one too.

============  ===============================  ==========================================
placement     sub-layer output                 reference
============  ===============================  ==========================================
pre           x + F(N(x))                      Pre-LN, Mix-LN paper Eq. 2
post          N(x + F(x))                      Post-LN, Mix-LN paper Eq. 1
sandwich      x + N_b(F(N_a(x)))               Sandwich-LN (Ding et al., 2021)
deepnorm      N(a·x + F(x)),  a = (2L)^(1/4)   DeepNorm (Wang et al., DeepNet)
admin         N(w ⊙ x + F(x)),  w learnable    Admin (Liu et al., 2020), per-channel w
mix           post in the first ⌊αL⌋ blocks,   Mix-LN (Li et al., ICLR 2025)
              pre in the rest
custom        per block from ``norm.layers``   ablations (e.g. a reversed mix)
lns           x + F(N(x)/√l),  l = 1..L        LayerNorm Scaling (Sun et al., 2025)
peri          x + N_b(F(N_a(x))); optional     Peri-LN (Kim et al., ICML 2025)
              embedding norm (embed_norm)
reordered     x + N(F(x))                      OLMo 2 "reordered norm"
hybrid        attn: x + A_qkvn(x);             HybridNorm (Zhuo et al., 2025)
              MLP: z = N(x), z + M(z)
hybrid_first  x + A_qkvn(N(x)); x + M(N(x))    HybridNorm*'s first block
hybrid_star   hybrid_first, then hybrid        HybridNorm* (Zhuo et al., 2025)
dyt           pre with every norm (final       DyT (Zhu et al., CVPR 2025)
              too) → γ ⊙ tanh(α x) + β
============  ===============================  ==========================================

``A_qkvn``: attention whose q, k and v each get a per-head norm of width head_dim (shared across heads)
after the head split and before RoPE.  Independently of the placement, ``norm.qk_norm=head|full`` adds
norms on q and k (:mod:`mixbench.layers.attention`).

Norm factories: a placement may change the norms a model is built with (:meth:`Placement.norm_factory`;
DyT replaces every norm), and every norm is made with its *position* (``attn``, ``mlp``, ``attn_out``,
``mlp_out``, ``q``, ``k``, ``v``, ``final``, ``embed``; :mod:`mixbench.layers.norm`) so a factory may
depend on it (DyT's α0 per position).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn

from ..core.errors import did_you_mean
from ..core.traits import DYT_LLM_ALPHA0, ModelTraits, dyt_llm_alpha0  # noqa: F401 (their home was here)
from .attention import add_qkv_norm
from .init import deepnorm_constants, init_deepnorm_
from .norm import NormConfigError, dyt_factory, factory_setting

Branch = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class BlockContext:
    """What a block placement may know while building block ``depth`` (0-based) of ``num_layers``."""

    spec: Any  # the model's NormSpec
    depth: int
    num_layers: int
    dim: int
    make_norm: Callable[..., nn.Module]  # make_norm(dim, position=...): this block's norm factory


class Placement:
    """A model-level placement: which block placement each block gets, and the label in tables.

    ``options``: settings of this placement alone, with their defaults (``norm.<key>``); they are added to
    the ``norm`` config group when this placement is chosen and read back with ``spec.option(key)``.
    ``reads``: the shared settings of the ``norm`` group (``defaults.yaml``) that only this placement reads (Mix-LN's
    ``alpha``); a ``norm.<key>`` given on the command line that the chosen placement neither declares nor reads is an
    error naming the placements that do.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}
    reads: ClassVar[tuple[str, ...]] = ()

    def plan(self, spec, num_layers: int) -> list[str]:
        return [self.name] * num_layers

    def label(self, spec) -> str:
        return self.name

    def validate(self, spec) -> None:
        """Raise :class:`NormConfigError` for settings this placement cannot use."""

    def norm_factory(self, spec, make_norm: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        """The norm factory of the model (final / embedding norms, and the blocks' default): the family's
        ``make_norm`` unless this placement replaces the norms (DyT).  Used per block too: a block placement
        that returns another factory gets its own ``norm1``/``norm2`` (and attention norms) from it."""
        return make_norm

    def wants_embed_norm(self, spec) -> bool:
        """Whether the model normalises the embedding output before the first block (Peri-LN's ``norm.embed_norm``)."""
        return False

    def embed_gain(self, spec, dim: int) -> float | None:
        """Initial value of a learnable scalar that LLaMA multiplies its token embeddings by (DyT's ``norm.dyt_embed_gain``:
        √d, as the DyT LLaMA code's ``shared_scale``), or ``None`` for none.  ViT has no such scalar."""
        return None

    def for_model(self, spec, traits: ModelTraits, width: int):
        """``spec`` with this placement's model- or width-dependent defaults filled in, for a model with ``traits``
        (supplied by its family) and hidden ``width`` (DyT's α0 and embedding gain); most placements return it as it
        is.  The models call this before they build; a run's label stays that of the unresolved spec."""
        return spec


class BlockPlacement(Placement):
    """A placement that is also a per-block rule (the two sub-layers of one block)."""

    # names of the modules/parameters build() adds, relative to the block (dotted for sub-modules, e.g. "attn.v_norm")
    added_modules: ClassVar[tuple[str, ...]] = ()

    def build(self, block: nn.Module, ctx: BlockContext) -> None:
        """Create the modules and constants this placement adds to ``block`` (beyond ``norm1``/``norm2``)."""

    def validate(self, spec) -> None:
        self.validate_block(spec)

    def validate_block(self, spec) -> None:
        """Raise :class:`NormConfigError` for model settings a block of this placement cannot use (also checked
        for the blocks of ``norm.layers`` and of model-level plans)."""

    def sublayer(self, block: nn.Module, which: int, x: torch.Tensor, branch: Branch) -> torch.Tensor:
        """Output of sub-layer ``which`` (1 = attention, 2 = MLP) with branch F."""
        raise NotImplementedError

    @staticmethod
    def remove_module(block: nn.Module, name: str) -> None:
        """Replace ``block.<name>`` (e.g. an input norm this placement does without) by ``nn.Identity``; its
        parameters are subtracted in :meth:`extra_parameters`."""
        removed = sum(p.numel() for p in getattr(block, name).parameters())
        block.removed_parameters = getattr(block, "removed_parameters", 0) + removed
        setattr(block, name, nn.Identity())

    def init_weights(self, block: nn.Module, ctx: BlockContext) -> None:
        """Placement-specific init, applied after the model family's own init of ``block``."""

    def extra_parameters(self, block: nn.Module) -> int:
        """Parameters this placement added to ``block``, less those of the modules it removed (counted on the
        built modules; negative where a placement drops more than it adds)."""
        total = 0
        for name in self.added_modules:
            owner, _, attr = name.rpartition(".")
            item = getattr(block.get_submodule(owner) if owner else block, attr)
            total += item.numel() if isinstance(item, nn.Parameter) else sum(p.numel() for p in item.parameters())
        return total - getattr(block, "removed_parameters", 0)

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
    if name not in _PLACEMENTS:  # a project's own placement: registered when the project's code is imported
        import importlib

        # by name: `mixbench export` bundles every module this one imports, and an exported model needs no project search
        tasks = importlib.import_module("mixbench.core.tasks")
        project = tasks.load_project_plugins()
        if name not in _PLACEMENTS:  # norm= names a placement or a configs/norm/*.yaml (e.g. olmo2): both offered
            valid = list(dict.fromkeys([*_PLACEMENTS, *importlib.import_module("mixbench.core.project").config_choices("norm")]))
            raise NormConfigError(
                f"unknown norm placement {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}; "
                f"looked among {tasks.plugin_sources(project)}"
            )
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
    reads = ("alpha", "num_post")

    def plan(self, spec, num_layers):
        k = spec.num_post if spec.num_post is not None else num_post_layers(spec.alpha, num_layers)
        if k > num_layers:
            raise NormConfigError(f"norm.num_post={k} exceeds the model's {num_layers} blocks")
        return ["post"] * k + ["pre"] * (num_layers - k)

    def label(self, spec):
        return f"mix(post={spec.num_post})" if spec.num_post is not None else f"mix(α={spec.alpha:g})"


class OutputNormGain(BlockPlacement):
    """Placements whose norms sit on the branch output (``x + N_out(F(...))``): option ``norm.out_norm_gain``, the
    initial gain γ of those output norms (default 1, as Sandwich-LN, Peri-LN and OLMo 2 initialise them).  With γ = 1
    every residual increment has unit RMS from step 0; γ = 0 starts each branch at zero, as Swin-V2's res-post-norm
    (``x + N(F(x))``) does in its reference code (timm ``SwinTransformerV2._init_respostnorm``; timm's ``ResPostBlock``
    likewise initialises its output norms' weight to ``init_values``).  ``output_norms`` names them."""

    options = {"out_norm_gain": 1.0}
    output_norms: ClassVar[tuple[str, str]] = ("norm1_post", "norm2_post")

    def validate_block(self, spec):
        gain = spec.options.get("out_norm_gain", 1.0)
        if isinstance(gain, bool) or not isinstance(gain, (int, float)) or gain < 0:
            raise NormConfigError(f"norm.out_norm_gain must be a number ≥ 0, got {gain!r}")

    def init_weights(self, block, ctx):
        gain = float(ctx.spec.options.get("out_norm_gain", 1.0))
        with torch.no_grad():
            for name in self.output_norms:
                getattr(block, name).weight.fill_(gain)

    def label(self, spec):
        gain = float(spec.options.get("out_norm_gain", 1.0))
        return self.name + (f"(out_gain={gain:g})" if gain != 1.0 else "")


@register_placement
class SandwichLN(OutputNormGain):
    name, summary = "sandwich", "x + N_b(F(N_a(x))) — Sandwich-LN (Ding et al., 2021); norm.out_norm_gain"
    added_modules = ("norm1_post", "norm2_post")

    def build(self, block, ctx):
        block.norm1_post = ctx.make_norm(ctx.dim, position="attn_out")
        block.norm2_post = ctx.make_norm(ctx.dim, position="mlp_out")

    def sublayer(self, block, which, x, branch):
        return x + getattr(block, f"norm{which}_post")(branch(getattr(block, f"norm{which}")(x)))


@register_placement
class DeepNorm(BlockPlacement):
    name, summary = "deepnorm", "N(a·x + F(x)), a = (2L)^¼; v/out/MLP init × (8L)^-¼ — DeepNorm (DeepNet)"
    reads = ("paper_compat",)

    def build(self, block, ctx):
        block.residual_scale = deepnorm_constants(ctx.num_layers, ctx.spec.paper_compat)[0]

    def sublayer(self, block, which, x, branch):
        return getattr(block, f"norm{which}")(x * block.residual_scale + branch(x))

    def init_weights(self, block, ctx):
        init_deepnorm_(
            block.attn.qkv.weight,
            block.attn.proj.weight,
            block.mlp.fc1.weight,
            block.mlp.fc2.weight,
            ctx.dim,
            block.mlp.fc2.in_features,
            ctx.num_layers,
            ctx.spec.paper_compat,
        )

    def label(self, spec):
        return self.name + ("[paper-compat]" if spec.paper_compat else "")

    def extra_repr(self, block):
        return f"residual_scale={block.residual_scale:.4f}"


ADMIN_INITS = ("profile", "sqrt")  # norm.admin_init besides a positive number


def admin_omega_init(spec, block_index: int) -> tuple[float, float]:
    """Initial Admin residual weights of block ``block_index``'s attention and MLP sub-layers before any profiling:
    a number ``norm.admin_init`` everywhere, else w_k = sqrt(k + 1) for the k-th sub-layer (0-based; attention and MLP
    counted separately) — the fixed schedule ``norm.admin_init=sqrt`` (``null`` in configs written before profiling
    existed), and the placeholder that :func:`profile_admin` replaces for ``profile``."""
    if spec.admin_init not in (None, *ADMIN_INITS):
        return float(spec.admin_init), float(spec.admin_init)
    k = 2 * block_index
    return math.sqrt(k + 1), math.sqrt(k + 2)


class AdminProfile:
    """The running ratio of Admin's profiling pass: ω₁ = 1, then after each Admin sub-layer i with input x and branch
    output f_i, ω_{i+1} = √(Var(x · ω_i) + Var(f_i)) (population variances over every element, as the reference code's
    ``np.var``; Transformer-Clinic ``--init-type adaptive-profiling``).  :meth:`step` fills the sub-layer's ω with the
    current ratio before its output is computed, so later sub-layers see the profiled model."""

    def __init__(self):
        self.ratio, self.omegas = 1.0, []

    @torch.no_grad()
    def step(self, omega: nn.Parameter, x: torch.Tensor, branch_out: torch.Tensor) -> None:
        omega.fill_(self.ratio)
        self.omegas.append(self.ratio)
        variance = (x.double() * self.ratio).var(unbiased=False) + branch_out.double().var(unbiased=False)
        self.ratio = math.sqrt(float(variance))


def profile_admin(model: nn.Module, forward: Callable[[], Any]) -> list[float] | None:
    """Admin's profiling initialisation (Liu et al., 2020) of ``model``'s ``admin`` blocks when ``norm.admin_init=profile``:
    runs ``forward()`` once (a forward pass over a real batch; no gradients, eval mode: no dropout or drop path) with
    every Admin sub-layer setting its ω by :class:`AdminProfile`, in the order the forward pass meets them.  Returns
    the ω of every Admin sub-layer in that order, or None when there is nothing to profile."""
    blocks = [block for block in model.blocks if block.placement == "admin"]
    if not blocks or model.norm_spec.admin_init != "profile":
        return None
    profile, was_training = AdminProfile(), model.training
    model.eval()
    for block in blocks:
        block.admin_profile = profile
    try:
        with torch.no_grad():
            forward()
    finally:
        for block in blocks:
            del block.admin_profile
        model.train(was_training)
    if len(profile.omegas) != 2 * len(blocks):
        raise RuntimeError(
            f"Admin profiling met {len(profile.omegas)} sub-layers, expected {2 * len(blocks)}: forward() must run the model once"
        )
    return profile.omegas


@register_placement
class Admin(BlockPlacement):
    """Admin (Liu et al., 2020): ``N(ω ⊙ x + F(x))`` with a learnable per-channel ω per sub-layer.  ``norm.admin_init``:
    ``profile`` (default) — Admin's own profiled init, set by :func:`profile_admin` on a real batch before training
    (``mixbench run`` and ``mixbench analyze`` do it; a model built without data keeps the ``sqrt`` values); ``sqrt`` —
    the fixed schedule ω_k = √(k+1), Admin's profiled values when every branch output and the embedding have unit
    variance; a number — that constant everywhere."""

    name, summary = "admin", "N(w ⊙ x + F(x)), w learnable per channel — Admin (Liu et al., 2020)"
    reads = ("admin_init",)
    added_modules = ("omega1", "omega2")

    def validate_block(self, spec):
        value = spec.admin_init
        if value is None or value in ADMIN_INITS:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise NormConfigError(f"norm.admin_init must be profile, sqrt or a positive number, got {value!r}")

    def build(self, block, ctx):
        w1, w2 = admin_omega_init(ctx.spec, ctx.depth)
        block.omega1 = nn.Parameter(torch.full((ctx.dim,), w1))
        block.omega2 = nn.Parameter(torch.full((ctx.dim,), w2))

    def sublayer(self, block, which, x, branch):
        omega = block.omega1 if which == 1 else block.omega2
        out = branch(x)
        if (profile := getattr(block, "admin_profile", None)) is not None:  # only inside profile_admin
            profile.step(omega, x, out)
        return getattr(block, f"norm{which}")(x * omega + out)

    def label(self, spec):
        value = spec.admin_init
        if value == "profile":
            return self.name
        return self.name + ("(ω=√(k+1))" if value in (None, "sqrt") else f"(ω={float(value):g})")


@register_placement
class Custom(Placement):
    name, summary = "custom", "one block placement per block from norm.layers=[pre,post,...]"
    reads = ("layers",)

    def validate(self, spec):
        if spec.layers is None:
            raise NormConfigError("norm=custom needs norm.layers=[...], one placement per block")

    def plan(self, spec, num_layers):
        return list(spec.layers)


def plan_summary(plan: list[str]) -> str:
    """['post','post','pre','pre','pre'] → 'post×2 pre×3'."""
    parts, prev, count = [], None, 0
    for p in [*plan, None]:
        if p == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(f"{prev}×{count}")
        prev, count = p, 1
    return " ".join(parts)


# ------------------------------------------------------------------------------------- placements beyond the paper
# Formulas, inits and official code: /work/shared/notes/beyond-paper-placements.md (summarised in the README).
@register_placement
class LayerNormScaling(BlockPlacement):
    """LNS: ``x + F(s_l · N(x))`` in both sub-layers, ``s_l = 1/√l`` with ``l`` 1-based (block 1 unscaled); the scale
    is a constant applied after the norm's weight; no init of its own (the authors found scaled init hurts LNS),
    final norm unscaled (lmsdss/LayerNorm-Scaling, OLMo-core ``LayerNormScaledTransformerBlock``).
    With ``norm.qk_norm`` on, the scale cancels in q and k: only v and the MLP feel it."""

    name, summary = "lns", "x + F(N(x)/√l), l = 1..L — LayerNorm Scaling (Sun et al., 2025)"

    def build(self, block, ctx):
        block.lns_scale = 1.0 / math.sqrt(ctx.depth + 1)

    def sublayer(self, block, which, x, branch):
        return x + branch(getattr(block, f"norm{which}")(x) * block.lns_scale)

    def extra_repr(self, block):
        return f"lns_scale={block.lns_scale:.4f}"


@register_placement
class PeriLN(SandwichLN):
    """Peri-LN: the Sandwich-LN block ``x + N_out(F(N_in(x)))`` (output norm before the residual add), plus the
    option ``norm.embed_norm``: a norm on the embedding output before the first block (off by default)."""

    name, summary = "peri", "x + N_out(F(N_in(x))), optional norm.embed_norm — Peri-LN (Kim et al., ICML 2025)"
    options = {"embed_norm": False, **OutputNormGain.options}

    def validate(self, spec):
        super().validate(spec)
        if not isinstance(spec.option("embed_norm"), bool):
            raise NormConfigError(f"norm.embed_norm must be true or false, got {spec.option('embed_norm')!r}")

    def wants_embed_norm(self, spec):
        return bool(spec.options.get("embed_norm", False))

    def label(self, spec):
        return super().label(spec) + ("+embed_norm" if self.wants_embed_norm(spec) else "")


@register_placement
class ReorderedNorm(OutputNormGain):
    """OLMo 2's reordered norm: ``x + N(F(x))`` — output norms only (``norm1``/``norm2``), no input norm.  OLMo 2
    pairs it with ``norm.qk_norm=full`` (configs/norm/olmo2.yaml)."""

    name, summary = "reordered", "x + N(F(x)) — OLMo 2 reordered norm (output norms only); norm.out_norm_gain"
    output_norms = ("norm1", "norm2")

    def sublayer(self, block, which, x, branch):
        return x + getattr(block, f"norm{which}")(branch(x))


class _QKVNorm(BlockPlacement):
    """HybridNorm's attention: q, k, v each normalised per head (width head_dim, shared across heads), after the
    head split and before RoPE (BryceZhuo/HybridNorm ``OLMoBlock.attention``)."""

    added_modules = ("attn.q_norm", "attn.k_norm", "attn.v_norm")

    def validate_block(self, spec):
        if spec.qk_norm == "full":
            raise NormConfigError(
                f"norm.qk_norm=full cannot be combined with {self.name!r} blocks: HybridNorm normalises "
                "q, k and v per head itself (norm.qk_norm=none or head)"
            )

    def build(self, block, ctx):
        add_qkv_norm(block.attn, ctx.make_norm)


@register_placement
class HybridNorm(_QKVNorm):
    """HybridNorm: attention with QKV-norm and no input norm, ``y = x + A_qkvn(x)``; the MLP in Post-Norm form
    with the residual taken after the norm, ``z = N(y); x' = z + M(z)`` (``norm2``; ``norm1`` is dropped)."""

    name, summary = "hybrid", "x + A_qkvn(x); z = N(x), z + M(z) — HybridNorm (Zhuo et al., 2025)"

    def build(self, block, ctx):
        super().build(block, ctx)
        self.remove_module(block, "norm1")

    def sublayer(self, block, which, x, branch):
        if which == 1:
            return x + branch(x)
        z = block.norm2(x)
        return z + branch(z)


@register_placement
class HybridFirst(_QKVNorm, PreLN):
    """HybridNorm*'s first block: Pre-Norm in both sub-layers (PreLN's rule) and the QKV-norm,
    ``y = x + A_qkvn(N_a(x)); x' = y + M(N_f(y))`` (the official code's ``norm_pos_special_config``)."""

    name, summary = "hybrid_first", "x + A_qkvn(N(x)); x + M(N(x)) — HybridNorm*'s first block"


@register_placement
class HybridStar(Placement):
    """HybridNorm*: ``hybrid_first`` in block 1, ``hybrid`` in the rest."""

    name, summary = "hybrid_star", "hybrid_first in block 1, hybrid in the rest — HybridNorm* (Zhuo et al., 2025)"

    def validate(self, spec):
        get_block_placement("hybrid").validate_block(spec)

    def plan(self, spec, num_layers):
        return ["hybrid_first"] + ["hybrid"] * (num_layers - 1)


# the DyT paper's ViT value of α0, for every norm (LLaMA's by width: :func:`mixbench.core.traits.dyt_llm_alpha0`)
DYT_VIT_ALPHA0 = 0.5


@register_placement
class DynamicTanh(BlockPlacement):
    """DyT: the Pre-LN layout with every norm replaced one for one by ``γ ⊙ tanh(α x) + β`` — with ``norm=dyt`` the
    final norm too (and q/k norms of ``norm.qk_norm``); a ``dyt`` block inside ``norm.layers`` replaces its own
    norms only.  α is one learnable scalar per norm, initialised per position (``norm.dyt_alpha_attn`` for the
    attention-input norm and any q/k norm, ``norm.dyt_alpha_mlp``, ``norm.dyt_alpha_final``); γ = 1, β = 0.
    LLaMA has no β (the paper's LLaMA code), ViT has one (jiachenzhu/DyT ``convert_ln_to_dyt``).

    Defaults (``null``), as the DyT authors train each family: LLaMA takes α0 from the paper's width table
    (:func:`dyt_llm_alpha0`: attention / MLP and final) and multiplies its token embeddings by a learnable scalar
    initialised to √d (``norm.dyt_embed_gain``; jiachenzhu/DyT ``other_tasks/LLaMA/fms_fsdp/models/llama.py``:
    ``shared_scale``, always on there); ViT takes α0 = 0.5 everywhere and has no embedding scalar.  A number (or
    ``true``/``false``) overrides the default and shows in the label.  A ``dyt`` block inside ``norm.layers`` uses
    α0 = 0.5 (the per-model settings belong to ``norm=dyt``).  Without the embedding gain the N(0, 0.02) embeddings
    enter ``tanh(α x)`` in its linear range: every branch input is ~0.01 RMS, and the branch outputs, the logits and
    every block's gradient are ~10³ × smaller than Pre-LN's."""

    name, summary = "dyt", "pre-LN with every norm → γ ⊙ tanh(α x) + β — DyT (Zhu et al., CVPR 2025)"
    options = {"dyt_alpha_attn": None, "dyt_alpha_mlp": None, "dyt_alpha_final": None, "dyt_embed_gain": None}
    alpha_options: ClassVar[tuple[str, ...]] = ("dyt_alpha_attn", "dyt_alpha_mlp", "dyt_alpha_final")

    def for_model(self, spec, traits, width):
        """α0 from the family's table (``traits.dyt_alpha0``; DyT's 0.5 where it has none) and the embedding gain on
        wherever the model embeds tokens (``traits.token_embeddings``), for every option left unset."""
        if spec.options.get("dyt_embed_gain") and not traits.token_embeddings:
            raise NormConfigError(
                "norm.dyt_embed_gain scales a model's token embeddings; this model has none (a ViT): leave it unset (null)"
            )
        attn, other = traits.dyt_alpha0(width) if traits.dyt_alpha0 else (DYT_VIT_ALPHA0, DYT_VIT_ALPHA0)
        defaults = {"dyt_alpha_attn": attn, "dyt_alpha_mlp": other, "dyt_alpha_final": other, "dyt_embed_gain": traits.token_embeddings}
        options = {key: defaults[key] if value is None else value for key, value in spec.options.items()}
        return dataclasses.replace(spec, options=options)

    def alphas(self, spec) -> tuple[float, float, float]:
        """α0 of the attention, MLP and final norms of a spec resolved by :meth:`for_model` (an unresolved one — a
        ``dyt`` block of ``norm.layers``, or a model built without ``for_model`` — gets the ViT value 0.5)."""
        return tuple(float(DYT_VIT_ALPHA0 if spec.options.get(key) is None else spec.options[key]) for key in self.alpha_options)

    def embed_gain(self, spec, dim):
        return math.sqrt(dim) if spec.options.get("dyt_embed_gain") else None

    def validate(self, spec):
        if spec.option("dyt_embed_gain") is not None and not isinstance(spec.option("dyt_embed_gain"), bool):
            raise NormConfigError(
                f"norm.dyt_embed_gain must be true, false or null (the family's default), got {spec.option('dyt_embed_gain')!r}"
            )
        for key in self.alpha_options:
            value = spec.option(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise NormConfigError(f"norm.{key} must be a positive number or null (the paper's α0 for the model), got {value!r}")
        if spec.kind is not None:
            raise NormConfigError(f"norm=dyt replaces every norm by DyT: leave norm.kind unset (got {spec.kind!r})")

    def norm_factory(self, spec, make_norm):
        return dyt_factory(*self.alphas(spec), bias=factory_setting(make_norm, "bias", True))

    def sublayer(self, block, which, x, branch):
        return x + branch(getattr(block, f"norm{which}")(x))

    def extra_parameters(self, block):
        """One α per replaced norm (γ and β match those of the norm a DyT replaces: LLaMA's RMSNorm has no bias and
        its DyT no β; ViT's LayerNorm and DyT have both).  The final norm's α is the model's, outside the blocks."""
        return sum(getattr(block, name).alpha.numel() for name in ("norm1", "norm2"))

    def label(self, spec):
        """``dyt`` with the family's defaults; set values show: ``dyt(α0=0.5/0.5/0.5)``, ``+embed_gain`` / ``-embed_gain``
        (an unset α0 among set ones shows as ``auto``)."""
        alphas = [spec.options.get(key) for key in self.alpha_options]
        name = self.name
        if any(a is not None for a in alphas):
            name += "(α0=" + "/".join("auto" if a is None else f"{a:g}" for a in alphas) + ")"
        gain = spec.options.get("dyt_embed_gain")
        return name + ("" if gain is None else "+embed_gain" if gain else "-embed_gain")
