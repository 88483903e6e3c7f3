"""timm Vision Transformers with a per-block norm placement.

Built with ``timm.create_model`` and its ``block_fn`` hook: :class:`PlacedViTBlock` subclasses timm's
``Block`` (same submodules ``norm1, attn, ls1, drop_path1, norm2, mlp, ls2, drop_path2``) and only
rewires the residuals, so Pre-LN, Post-LN and Mix-LN models have exactly the parameters and
``state_dict`` keys of timm's own ``vit_tiny_patch16_224`` / ``vit_small_patch16_224``.

Attention is :class:`PlacedAttention`, timm's ``Attention`` (same parameters and keys) that also computes
``norm.qk_norm=full`` and HybridNorm's QKV-norm; ``norm.qk_norm=head`` uses timm's own ``q_norm``/``k_norm``
slots.  Peri-LN's ``norm.embed_norm`` is timm's ``norm_pre`` slot (after patch embedding + position embedding,
cls token included, before the blocks; ``pre_norm=True`` is not used since it also drops the patch bias).
DyT's final norm is re-made with its position after timm has built the model.

``attention_backend`` (auto | flash | cudnn | efficient | math) pins the SDPA kernel: speed only, same model.
"""

from __future__ import annotations

from functools import partial

import timm
import torch
from timm.layers import Attention, PatchEmbed
from timm.models.vision_transformer import Block

from ..core.errors import ConfigError
from ..layers import (
    NormSpec,
    PlacedResidual,
    by_position,
    get_placement,
    init_placements_,
    norm_factory,
    project_qkv,
    scaled_init_,
)
from ..layers.attention import check_attention_backend, sdpa_backend
from ..layers.placements import ModelTraits
from .vit_config import VIT_DEFAULTS, VIT_PRESETS, vit_defaults  # noqa: F401 (the light part, re-exported)

# mixbench options that are not timm keywords
_OWN_KEYS = ("attention_backend",)
# mixbench option -> timm keyword
_TIMM_KEYS = dict(hidden_size="embed_dim", num_layers="depth")


class PlacedAttention(Attention):
    """timm's ``Attention`` (same modules, parameters and keys) with the norms of :mod:`mixbench.layers.attention`:
    ``qk_norm_mode`` ``none``/``head`` run timm's own forward (``head`` fills its ``q_norm``/``k_norm`` slots);
    ``full`` (norms over the whole projected q and k) and a ``v_norm`` (HybridNorm) run :meth:`_normed_forward`.
    ``backend`` other than ``auto`` pins the SDPA kernel (:data:`mixbench.layers.attention.SDPA_BACKENDS`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.qk_norm_mode = "none"
        self.v_norm = None
        self.backend = "auto"

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        with sdpa_backend(self.backend):
            if self.qk_norm_mode == "full" or self.v_norm is not None:
                return self._normed_forward(x, attn_mask, is_causal)
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)

    def _normed_forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """timm's forward with q, k, v from :func:`mixbench.layers.project_qkv` (fused SDPA)."""
        b, n, _ = x.shape
        gate = self.gate(x).sigmoid() if self.gate is not None else None
        q, k, v = project_qkv(self, x)
        x = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0, is_causal=is_causal
        )
        x = self.norm(x.transpose(1, 2).reshape(b, n, self.attn_dim))
        if gate is not None:
            x = x * gate
        return self.proj_drop(self.proj(x))


class PlacedViTBlock(PlacedResidual, Block):
    """timm ``Block`` whose two residual sub-layers follow block ``depth``'s placement (see :mod:`mixbench.layers.residual`)."""

    def __init__(self, dim: int, *, norm: NormSpec, num_layers: int, depth: int = 0, norm_layer=None, **kwargs):
        super().__init__(dim=dim, norm_layer=norm_layer, depth=depth, **kwargs)
        self.setup_placement(norm, depth, num_layers, dim, norm_layer)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        return self.placed_forward(
            x,
            lambda h: self.drop_path1(self.ls1(self.attn(h, attn_mask=attn_mask, is_causal=is_causal))),
            lambda h: self.drop_path2(self.ls2(self.mlp(h))),
        )


class GemmPatchEmbed(PatchEmbed):
    """timm's ``PatchEmbed`` (same ``proj`` conv parameters and keys) computed as one GEMM: the non-overlapping
    p×p patches, flattened in the conv weight's (C, p, p) order, times ``proj.weight`` viewed as (D, C·p·p).
    Equal to the stride-p conv; on an H100 it avoids cuDNN's implicit-GEMM conv and its NCHW→NHWC copies.
    Falls back to timm's forward for anything but fixed-size, unpadded, flattened input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (p, q), (b, c, h, w) = self.patch_size, x.shape
        if not self.flatten or self.dynamic_img_pad or h % p or w % q or (self.img_size is not None and (h, w) != tuple(self.img_size)):
            return super().forward(x)
        patches = x.view(b, c, h // p, p, w // q, q).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // q), c * p * q)
        return self.norm(torch.nn.functional.linear(patches, self.proj.weight.view(self.proj.out_channels, -1), self.proj.bias))


def _scale_output(module, inputs, output, scale: float):
    """Forward hook of Scaled Embed: patch embeddings × sqrt(d)."""
    return output * scale


def build_vit(name: str, norm: NormSpec = NormSpec(), traits: ModelTraits = ModelTraits(), **overrides):
    """Create ``name`` (``vit_tiny`` | ``vit_small`` | ``vit_debug``) with the given norm placement."""
    options = vit_defaults(name)
    unknown = sorted(set(overrides) - set(options))
    if unknown:
        raise ConfigError(f"unknown ViT option(s) {unknown}; valid: {', '.join(sorted(options))}")
    options.update(overrides)
    options["img_size"] = options["img_size"] or 224
    options["num_classes"] = options["num_classes"] if options["num_classes"] is not None else 1000
    backend = options["attention_backend"]
    check_attention_backend(backend)
    num_layers = options["num_layers"]
    placement = get_placement(norm.placement)
    norm = placement.for_model(norm, traits, options["hidden_size"])  # e.g. DyT's α0 (traits: the family's)
    plan = norm.plan(num_layers)
    timm_kwargs = {_TIMM_KEYS.get(k, k): v for k, v in options.items() if k not in _OWN_KEYS}
    make_norm = placement.norm_factory(norm, norm_factory(norm.kind or "layernorm", eps=norm.eps or 1e-6, impl="timm", groups=norm.groups))
    model = timm.create_model(
        VIT_PRESETS[name]["timm_name"],
        pretrained=False,
        block_fn=partial(PlacedViTBlock, norm=norm, num_layers=num_layers),
        attn_layer=PlacedAttention,
        embed_layer=GemmPatchEmbed,
        norm_layer=make_norm,
        final_norm=norm.final_norm,
        **timm_kwargs,
    )
    dim = options["hidden_size"]
    if by_position(make_norm):  # timm made the final norm (``norm``, or ``fc_norm`` after pooling) without its position
        for slot in ("norm", "fc_norm"):
            if not isinstance(getattr(model, slot), torch.nn.Identity):
                setattr(model, slot, make_norm(dim, position="final"))
    if placement.wants_embed_norm(norm):  # replaces timm's Identity in place: the key sits where timm's CLIP models have it
        model.norm_pre = make_norm(dim, position="embed")
    if norm.scaled_init:  # timm's own init is trunc-normal(0.02)
        scaled_init_([w for b in model.blocks for w in (b.attn.proj.weight, b.mlp.fc2.weight)], 0.02, num_layers, truncated=True)
    if norm.scaled_embed:
        model.patch_embed.register_forward_hook(partial(_scale_output, scale=options["hidden_size"] ** 0.5))
    init_placements_(model.blocks)
    for block in model.blocks:
        block.attn.backend = backend
    model.plan = plan
    model.norm_spec = norm
    return model
