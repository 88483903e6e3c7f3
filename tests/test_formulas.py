"""Every placement of both families against its formula written out by hand."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import randomize_norms

from mixbench import build_model
from mixbench.layers import NormSpec, deepnorm_constants

EPS = 1e-6


def rms_norm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + EPS) * w + b


def group_norm(x, w, b, groups):
    g = x.unflatten(-1, (groups, -1))
    mu = g.mean(-1, keepdim=True)
    var = (g - mu).pow(2).mean(-1, keepdim=True)
    y = ((g - mu) / torch.sqrt(var + EPS)).flatten(-2) * w
    return y if b is None else y + b


def by_hand(placement, x, f, n_a, n_b=None, a=1.0):
    if placement == "pre":
        return x + f(n_a(x))
    if placement == "post":
        return n_a(x + f(x))
    if placement == "sandwich":
        return x + n_b(f(n_a(x)))
    if placement in ("deepnorm", "admin"):  # admin: a is the learnable per-channel vector w
        return n_a(a * x + f(x))
    raise AssertionError(placement)


def llama_reference_block(block, x, cos, sin, a):
    """One LLaMA block written out: RMSNorm, RoPE causal attention, SwiGLU, this block's placement."""
    h, heads = x.shape[-1], block.attn.num_heads
    hd = h // heads

    def attention(z):
        q, k, v = (z @ block.attn.qkv.weight.T).split(h, dim=-1)
        q, k, v = (t.view(*z.shape[:2], heads, hd).transpose(1, 2) for t in (q, k, v))
        rot = lambda t: torch.cat([-t[..., hd // 2 :], t[..., : hd // 2]], -1)  # noqa: E731
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        t = z.shape[1]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(z.shape)
        return out @ block.attn.proj.weight.T

    def swiglu(z):
        gate, up = (z @ block.mlp.fc1.weight.T).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ block.mlp.fc2.weight.T

    n = lambda m: lambda z: rms_norm(z, m.weight)  # noqa: E731
    p = block.placement
    n1b = n(block.norm1_post) if p == "sandwich" else None
    n2b = n(block.norm2_post) if p == "sandwich" else None
    a1, a2 = (block.omega1, block.omega2) if p == "admin" else (a, a)
    x = by_hand(p, x, attention, n(block.norm1), n1b, a1)
    return by_hand(p, x, swiglu, n(block.norm2), n2b, a2)


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich", "deepnorm", "admin"])
def test_llama_block_matches_formula(norm, rng):
    model = build_model("llama_debug", norm=norm, seed=0)
    randomize_norms(model, rng)
    if norm == "admin":  # learnable residual weights: check them at non-trivial values too
        with torch.no_grad():
            for block in model.blocks:
                block.omega1.uniform_(0.5, 2.0, generator=rng)
                block.omega2.uniform_(0.5, 2.0, generator=rng)
    x = torch.randn(2, 7, model.cfg.hidden_size, generator=rng)
    cos, sin = model.rope_cos[:7], model.rope_sin[:7]
    a, _ = deepnorm_constants(model.cfg.num_layers)
    for block in model.blocks:
        assert block.placement == norm
        torch.testing.assert_close(block(x, cos, sin), llama_reference_block(block, x, cos, sin, a), rtol=1e-4, atol=1e-5)


def test_llama_mix_model_is_the_composition_of_post_then_pre_blocks(rng):
    model = build_model("llama_debug", norm="mix", alpha=0.5, seed=0)
    randomize_norms(model, rng)
    assert model.plan == ["post", "post", "pre", "pre"]
    ids = torch.randint(0, model.cfg.vocab_size, (2, 9), generator=rng)
    x = model.embed(ids)
    cos, sin = model.rope_cos[:9], model.rope_sin[:9]
    for block in model.blocks:
        x = llama_reference_block(block, x, cos, sin, 1.0)
    logits = rms_norm(x, model.norm.weight) @ model.head.weight.T
    torch.testing.assert_close(model(ids), logits, rtol=1e-4, atol=1e-5)


def test_placements_really_differ(rng):
    """Guard: the formula tests above would catch a swapped placement."""
    outs = {}
    for norm in ("pre", "post", "sandwich", "deepnorm", "admin"):
        model = build_model("llama_debug", norm=norm, seed=0)
        randomize_norms(model, torch.Generator().manual_seed(1))
        outs[norm] = model(torch.arange(8)[None])
    for a in outs:
        for b in outs:
            if a < b:
                assert not torch.allclose(outs[a], outs[b], atol=1e-3), (a, b)


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich", "deepnorm", "admin"])
def test_vit_block_matches_formula(norm, rng):
    model = build_model("vit_debug", norm=norm, seed=0, img_size=16, patch_size=8, num_classes=3)
    model.eval()
    randomize_norms(model, rng)
    a, _ = deepnorm_constants(len(model.blocks))
    x = torch.randn(2, 5, 32, generator=rng)
    for block in model.blocks:
        n = lambda m: lambda z: layer_norm(z, m.weight, m.bias)  # noqa: E731
        attn = block.attn
        mlp = lambda z: block.mlp.fc2(F.gelu(block.mlp.fc1(z)))  # noqa: E731, B023 - used within the iteration
        p = block.placement
        n1b = n(block.norm1_post) if p == "sandwich" else None
        n2b = n(block.norm2_post) if p == "sandwich" else None
        a1, a2 = (block.omega1, block.omega2) if p == "admin" else (a, a)
        y = by_hand(p, x, attn, n(block.norm1), n1b, a1)
        y = by_hand(p, y, mlp, n(block.norm2), n2b, a2)
        torch.testing.assert_close(block(x), y, rtol=1e-4, atol=1e-5)


def test_vit_mix_first_quarter_post():
    model = build_model("vit_small", norm="mix", alpha=0.25)
    assert [b.placement for b in model.blocks] == ["post"] * 3 + ["pre"] * 9


def test_rmsnorm_kind_switch_for_vit_and_layernorm_for_llama(rng):
    vit = build_model("vit_debug", norm=NormSpec(placement="post", kind="rmsnorm"), img_size=16, patch_size=8)
    assert type(vit.blocks[0].norm1).__name__ == "RmsNorm"
    llama = build_model("llama_debug", norm=NormSpec(placement="pre", kind="layernorm", eps=1e-5))
    assert isinstance(llama.blocks[0].norm1, torch.nn.LayerNorm) and llama.blocks[0].norm1.eps == 1e-5
    assert llama.blocks[0].norm1.bias is None  # LLaMA stays bias-free


def test_admin_initial_weights_follow_sqrt_k_plus_1():
    model = build_model("llama_debug", norm="admin", seed=0)
    for i, block in enumerate(model.blocks):
        assert torch.allclose(block.omega1, torch.full_like(block.omega1, math.sqrt(2 * i + 1)))
        assert torch.allclose(block.omega2, torch.full_like(block.omega2, math.sqrt(2 * i + 2)))


@pytest.mark.parametrize("name, kwargs", [("llama_debug", {}), ("vit_debug", dict(img_size=16, patch_size=8))])
def test_group_ln_is_pre_ln_with_per_token_group_norm(name, kwargs, rng):
    spec = NormSpec(placement="pre", kind="groupnorm", groups=4)
    model = build_model(name, norm=spec, seed=0, **kwargs)
    assert spec.label() == "group_ln" and all(b.placement == "pre" for b in model.blocks)
    randomize_norms(model, rng)
    norm = model.blocks[0].norm1
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=rng))
        if norm.bias is not None:  # ViT norms have a bias, LLaMA's do not
            norm.bias.copy_(0.1 * torch.randn(norm.bias.shape, generator=rng))
    x = torch.randn(2, 5, norm.weight.numel(), generator=rng)
    torch.testing.assert_close(norm(x), group_norm(x, norm.weight, norm.bias, 4), rtol=1e-4, atol=1e-5)


def test_scaled_init_and_scaled_embed_options():
    base = build_model("llama_71m", norm="mix", seed=0)
    scaled = build_model("llama_71m", norm=NormSpec(placement="mix", scaled_init=True, scaled_embed=True), seed=0)
    target = 0.02 / math.sqrt(2 * 12)
    assert scaled.blocks[5].attn.proj.weight.std().item() == pytest.approx(target, rel=0.05)
    assert scaled.blocks[5].mlp.fc2.weight.std().item() == pytest.approx(target, rel=0.05)
    assert base.blocks[5].mlp.fc2.weight.std().item() == pytest.approx(0.02, rel=0.05)
    ids = torch.arange(6)[None]
    torch.testing.assert_close(scaled.embed(ids) * 512**0.5, scaled.embed(ids) * scaled.embed_scale)
    assert scaled.embed_scale == pytest.approx(512**0.5) and base.embed_scale == 1.0
    vit = build_model("vit_debug", norm=NormSpec(scaled_embed=True), img_size=16, patch_size=8, seed=0)
    plain = build_model("vit_debug", img_size=16, patch_size=8, seed=0)
    images = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(vit.patch_embed(images), plain.patch_embed(images) * 32**0.5)
