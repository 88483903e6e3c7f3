"""Every placement of both families against its formula written out by hand."""

import math

import pytest
import torch
import torch.nn.functional as F
from _support.models import randomize_norms
from _support.norms import EPS, layer_norm, rms_norm

from mixbench import build_model
from mixbench.layers import NormSpec, deepnorm_constants, profile_admin


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


def llama_attention_by_hand(block, z, cos, sin):
    """LLaMA's RoPE causal attention written out (the attention branch of every placement)."""
    h, heads = z.shape[-1], block.attn.num_heads
    hd = h // heads
    q, k, v = (z @ block.attn.qkv.weight.T).split(h, dim=-1)
    q, k, v = (t.view(*z.shape[:2], heads, hd).transpose(1, 2) for t in (q, k, v))
    rot = lambda t: torch.cat([-t[..., hd // 2 :], t[..., : hd // 2]], -1)  # noqa: E731
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    t = z.shape[1]
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(z.shape)
    return out @ block.attn.proj.weight.T


def llama_swiglu_by_hand(block, z):
    gate, up = (z @ block.mlp.fc1.weight.T).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ block.mlp.fc2.weight.T


def llama_reference_block(block, x, cos, sin, a):
    """One LLaMA block written out: RMSNorm, RoPE causal attention, SwiGLU, this block's placement."""
    n = lambda m: lambda z: rms_norm(z, m.weight)  # noqa: E731
    p = block.placement
    n1b = n(block.norm1_post) if p == "sandwich" else None
    n2b = n(block.norm2_post) if p == "sandwich" else None
    a1, a2 = (block.omega1, block.omega2) if p == "admin" else (a, a)
    x = by_hand(p, x, lambda z: llama_attention_by_hand(block, z, cos, sin), n(block.norm1), n1b, a1)
    return by_hand(p, x, lambda z: llama_swiglu_by_hand(block, z), n(block.norm2), n2b, a2)


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


@pytest.mark.parametrize("admin_init", ["sqrt", None, "profile"])  # None: configs written before profiling existed
def test_admin_fixed_schedule_follows_sqrt_k_plus_1(admin_init):
    """The named fixed schedule, and the values a profiled model holds until it is profiled."""
    model = build_model("llama_debug", norm=NormSpec(placement="admin", admin_init=admin_init), seed=0)
    for i, block in enumerate(model.blocks):
        assert torch.allclose(block.omega1, torch.full_like(block.omega1, math.sqrt(2 * i + 1)))
        assert torch.allclose(block.omega2, torch.full_like(block.omega2, math.sqrt(2 * i + 2)))
    labels = {"sqrt": "admin(ω=√(k+1))", None: "admin(ω=√(k+1))", "profile": "admin"}
    assert model.norm_spec.label() == labels[admin_init] and NormSpec(placement="admin", admin_init=0.5).label() == "admin(ω=0.5)"


def test_admin_profiling_matches_the_recursion_by_hand(rng):
    """Admin's profiling init (Transformer-Clinic adaptive-profiling): ω_1 = 1, ω_{i+1} = √(Var(x_i ω_i) + Var(F_i(x_i)))
    over the sub-layers in forward order, x_{i+1} = N(x_i ω_i + F_i(x_i)); written out with the reference block."""
    model = build_model("llama_debug", norm="admin", seed=0)
    randomize_norms(model, rng)
    ids = torch.randint(0, model.cfg.vocab_size, (3, 11), generator=rng)
    omegas = profile_admin(model, lambda: model(ids))
    cos, sin = model.rope_cos[:11], model.rope_sin[:11]
    branches = (lambda b, z: llama_attention_by_hand(b, z, cos, sin), llama_swiglu_by_hand)
    x, ratio, expected = model.embed(ids).detach(), 1.0, []
    with torch.no_grad():
        for block in model.blocks:  # each sub-layer at ω = the running ratio, then the ratio from its input and branch output
            for which, branch in zip((1, 2), branches):
                expected.append(omega := ratio)
                f = branch(block, x)
                ratio = math.sqrt((x.double() * omega).var(unbiased=False).item() + f.double().var(unbiased=False).item())
                x = rms_norm(x * omega + f, getattr(block, f"norm{which}").weight)
    assert omegas == pytest.approx(expected, rel=1e-5)
    assert expected[0] == 1.0 and len(set(round(w, 6) for w in expected)) == len(expected)  # not a constant schedule
    assert [w for b in model.blocks for w in (b.omega1[0].item(), b.omega2[0].item())] == pytest.approx(expected, rel=1e-5)
    assert not any(math.isclose(w, math.sqrt(k + 1), rel_tol=0.05) for k, w in enumerate(expected) if k > 0)
    assert profile_admin(build_model("llama_debug", norm=NormSpec(placement="admin", admin_init="sqrt")), lambda: None) is None
    assert profile_admin(build_model("llama_debug", norm="pre"), lambda: None) is None


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
    first_block_input = {}
    for name, model in (("scaled", scaled), ("base", base)):  # what the forward hands the first block
        model.blocks[0].register_forward_pre_hook(lambda _, args, name=name: first_block_input.update({name: args[0]}))
        with torch.no_grad():
            model(ids)
    torch.testing.assert_close(first_block_input["scaled"], scaled.embed.weight[:6][None] * 512**0.5, rtol=0, atol=0)
    torch.testing.assert_close(first_block_input["base"], base.embed.weight[:6][None], rtol=0, atol=0)
    assert scaled.embed_scale == pytest.approx(512**0.5) and base.embed_scale == 1.0
    vit = build_model("vit_debug", norm=NormSpec(scaled_embed=True), img_size=16, patch_size=8, seed=0)
    plain = build_model("vit_debug", img_size=16, patch_size=8, seed=0)
    images = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(vit.patch_embed(images), plain.patch_embed(images) * 32**0.5)
