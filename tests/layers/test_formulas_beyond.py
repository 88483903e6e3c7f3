"""The placements beyond the Mix-LN paper (lns, peri, reordered, hybrid, hybrid_star, dyt) and ``norm.qk_norm``,
for LLaMA and ViT, each against its formula written out by hand (explicit norms, tanh, attention with RoPE)."""

import math

import pytest
import torch
import torch.nn.functional as F
import yaml
from _support.models import randomize_norms
from _support.norms import layer_norm, rms_norm
from _support.paths import REPO_ROOT

from mixbench import build_model
from mixbench.layers import DyT, NormConfigError, NormSpec, block_placements, list_placements, placement_parameters
from mixbench.layers.placements import dyt_llm_alpha0

NEW = ["lns", "peri", "reordered", "hybrid", "hybrid_star", "dyt"]
VIT = dict(img_size=16, patch_size=8, num_classes=3)


def label(norm):
    return norm if isinstance(norm, str) else norm.label()


def build(family, norm, seed=0):
    if family == "llama":
        return build_model("llama_debug", norm=norm, seed=seed)
    return build_model("vit_debug", norm=norm, seed=seed, **VIT).eval()


# ------------------------------------------------------------------------------------------------ formulas by hand
def dyt(x, alpha, w, b):
    y = torch.tanh(alpha * x) * w
    return y if b is None else y + b


def hand_norm(m, family):
    """The norm module ``m`` as a formula: DyT → tanh, else RMSNorm (LLaMA) / LayerNorm (ViT)."""
    assert m is not None and not isinstance(m, torch.nn.Identity)
    if isinstance(m, DyT):
        return lambda z: dyt(z, m.alpha, m.weight, m.bias)
    if family == "llama":
        assert m.weight.ndim == 1 and getattr(m, "bias", None) is None
        return lambda z: rms_norm(z, m.weight)
    return lambda z: layer_norm(z, m.weight, m.bias)


def rope(t, cos, sin):
    hd = t.shape[-1]
    return t * cos + torch.cat([-t[..., hd // 2 :], t[..., : hd // 2]], -1) * sin


def attention_by_hand(attn, z, family, cos=None, sin=None, qk=None, v_norm=False):
    """Multi-head attention written out; ``qk`` = None | 'head' (norm of width head_dim on q, k after the split) |
    'full' (norm of width C over q, k before the split); ``v_norm``: per-head norm on v.  All before RoPE."""
    b, t, c = z.shape
    heads = attn.num_heads
    hd = c // heads
    bias = attn.qkv.bias if attn.qkv.bias is not None else 0.0
    q, k, v = (z @ attn.qkv.weight.T + bias).split(c, dim=-1)
    if qk == "full":
        q, k = hand_norm(attn.q_norm, family)(q), hand_norm(attn.k_norm, family)(k)
    q, k, v = (u.view(b, t, heads, hd).transpose(1, 2) for u in (q, k, v))
    if qk == "head":
        q, k = hand_norm(attn.q_norm, family)(q), hand_norm(attn.k_norm, family)(k)
    if v_norm:
        v = hand_norm(attn.v_norm, family)(v)
    if family == "llama":  # RoPE after the norms, causal mask
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if family == "llama":
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
    return out @ attn.proj.weight.T + (attn.proj.bias if attn.proj.bias is not None else 0.0)


def mlp_by_hand(mlp, z, family):
    if family == "llama":
        gate, up = (z @ mlp.fc1.weight.T).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ mlp.fc2.weight.T
    return F.gelu(z @ mlp.fc1.weight.T + mlp.fc1.bias) @ mlp.fc2.weight.T + mlp.fc2.bias


def block_by_hand(block, placement, depth, x, family, cos=None, sin=None, qk=None):
    """Block ``depth`` (0-based) of ``placement`` written out."""
    qkv_norm = placement in ("hybrid", "hybrid_first")
    A = lambda z: attention_by_hand(block.attn, z, family, cos, sin, qk="head" if qkv_norm else qk, v_norm=qkv_norm)  # noqa: E731
    M = lambda z: mlp_by_hand(block.mlp, z, family)  # noqa: E731
    n = lambda name: hand_norm(getattr(block, name), family)  # noqa: E731
    if placement in ("pre", "dyt", "hybrid_first"):
        y = x + A(n("norm1")(x))
        return y + M(n("norm2")(y))
    if placement == "post":
        y = n("norm1")(x + A(x))
        return n("norm2")(y + M(y))
    if placement == "lns":
        s = 1.0 / math.sqrt(depth + 1)
        y = x + A(n("norm1")(x) * s)
        return y + M(n("norm2")(y) * s)
    if placement in ("peri", "sandwich"):
        y = x + n("norm1_post")(A(n("norm1")(x)))
        return y + n("norm2_post")(M(n("norm2")(y)))
    if placement == "reordered":
        y = x + n("norm1")(A(x))
        return y + n("norm2")(M(y))
    if placement == "hybrid":
        y = x + A(x)
        z = n("norm2")(y)
        return z + M(z)
    raise AssertionError(placement)


def expected_plan(norm, num_layers):
    if norm == "hybrid_star":
        return ["hybrid_first"] + ["hybrid"] * (num_layers - 1)
    return [norm] * num_layers


def check_blocks(model, family, rng, plan, qk=None):
    t = 7 if family == "llama" else 5
    x = torch.randn(2, t, 64 if family == "llama" else 32, generator=rng)
    assert [b.placement for b in model.blocks] == plan
    for i, block in enumerate(model.blocks):
        if family == "llama":
            cos, sin = model.rope_cos[:t], model.rope_sin[:t]
            got = block(x, cos, sin)
        else:
            cos = sin = None
            got = block(x)
        want = block_by_hand(block, plan[i], i, x, family, cos, sin, qk=qk)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"block {i} ({plan[i]})")


# ------------------------------------------------------------------------------------------------ block formulas
@pytest.mark.parametrize("family", ["llama", "vit"])
@pytest.mark.parametrize("norm", NEW)
def test_block_matches_formula(norm, family, rng):
    model = build(family, norm)
    randomize_norms(model, rng)
    check_blocks(model, family, rng, expected_plan(norm, len(model.blocks)))


@pytest.mark.parametrize("family", ["llama", "vit"])
@pytest.mark.parametrize("layers", [["hybrid_first", "lns", "reordered", "dyt"], ["peri", "hybrid", "post", "pre"]])
def test_new_block_placements_work_in_per_block_plans(layers, family, rng):
    assert set(layers) <= set(block_placements())
    model = build(family, NormSpec(placement="custom", layers=layers))
    randomize_norms(model, rng)
    check_blocks(model, family, rng, layers)
    if "dyt" in layers:  # a dyt block replaces its own norms only; the final norm stays the run's kind
        assert isinstance(model.blocks[layers.index("dyt")].norm1, DyT) and not isinstance(model.norm, DyT)


@pytest.mark.parametrize("family", ["llama", "vit"])
@pytest.mark.parametrize("mode", ["head", "full"])
@pytest.mark.parametrize("norm", ["pre", "reordered"])
def test_qk_norm_matches_hand_written_attention(norm, mode, family, rng):
    model = build(family, NormSpec(placement=norm, qk_norm=mode))
    plain = build(family, norm)
    heads, width = model.blocks[0].attn.num_heads, model.blocks[0].norm1.weight.numel()
    new_keys = set(model.state_dict()) - set(plain.state_dict())
    assert new_keys and all(".attn.q_norm." in k or ".attn.k_norm." in k for k in new_keys)
    assert set(plain.state_dict()) <= set(model.state_dict())
    expected_width = width // heads if mode == "head" else width
    assert all(b.attn.q_norm.weight.numel() == expected_width == b.attn.k_norm.weight.numel() for b in model.blocks)
    randomize_norms(model, rng)
    check_blocks(model, family, rng, [norm] * len(model.blocks), qk=mode)


def test_qk_norm_head_on_vit_uses_timms_own_slots():
    model = build("vit", NormSpec(qk_norm="head"))
    import timm

    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, qk_norm=True, embed_dim=32, depth=4, num_heads=2, **VIT)
    assert list(model.state_dict()) == list(reference.state_dict())


# ------------------------------------------------------------------------------------------------ whole models
@pytest.mark.parametrize(
    "norm",
    [
        *NEW,
        NormSpec(placement="peri", options={"embed_norm": True}),
        NormSpec(placement="reordered", qk_norm="full"),
        NormSpec(placement="dyt", options={"dyt_embed_gain": True}),
    ],
    ids=label,
)
def test_llama_logits_match_formula(norm, rng):
    model = build("llama", norm)
    spec = model.norm_spec
    randomize_norms(model, rng)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 9), generator=rng)
    cos, sin = model.rope_cos[:9], model.rope_sin[:9]
    x = model.embed.weight[ids]
    if spec.options.get("dyt_embed_gain"):  # DyT's LLaMA code: embeddings × a learnable scalar initialised to √d
        x = x * math.sqrt(model.cfg.hidden_size)
    else:
        assert model.embed_gain is None
    if spec.options.get("embed_norm"):
        x = rms_norm(x, model.embed_norm.weight)
    else:
        assert model.embed_norm is None
    qk = None if spec.qk_norm == "none" else spec.qk_norm
    for i, (block, p) in enumerate(zip(model.blocks, expected_plan(spec.placement, len(model.blocks)))):
        x = block_by_hand(block, p, i, x, "llama", cos, sin, qk=qk)
    final = dyt(x, model.norm.alpha, model.norm.weight, None) if spec.placement == "dyt" else rms_norm(x, model.norm.weight)
    torch.testing.assert_close(model(ids), final @ model.head.weight.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm", ["dyt", "hybrid_star", NormSpec(placement="peri", options={"embed_norm": True})], ids=label)
def test_vit_logits_match_formula(norm, rng):
    model = build("vit", norm)
    spec = model.norm_spec
    randomize_norms(model, rng)
    images = torch.randn(2, 3, 16, 16, generator=rng)
    x = model.patch_embed(images)
    x = torch.cat([model.cls_token.expand(2, -1, -1), x], dim=1) + model.pos_embed
    if spec.options.get("embed_norm"):
        x = layer_norm(x, model.norm_pre.weight, model.norm_pre.bias)
    for i, (block, p) in enumerate(zip(model.blocks, expected_plan(spec.placement, len(model.blocks)))):
        x = block_by_hand(block, p, i, x, "vit")
    if spec.placement == "dyt":
        x = dyt(x, model.norm.alpha, model.norm.weight, model.norm.bias)
    else:
        x = layer_norm(x, model.norm.weight, model.norm.bias)
    torch.testing.assert_close(model(images), x[:, 0] @ model.head.weight.T + model.head.bias, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ each placement
def test_lns_scale_is_one_for_the_first_block_and_one_over_sqrt_l_after():
    model = build("llama", "lns")
    assert [b.lns_scale for b in model.blocks] == pytest.approx([1.0, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5])
    assert model.blocks[0].lns_scale == 1.0
    assert isinstance(model.norm, torch.nn.RMSNorm) and not hasattr(model, "lns_scale")  # final norm unscaled
    pre = build("llama", "pre")  # no init of its own: the same weights as Pre-LN for the same seed
    for key, value in pre.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    vit = build("vit", NormSpec(placement="custom", layers=["post", "lns", "lns", "pre"]))
    assert [getattr(b, "lns_scale", None) for b in vit.blocks] == [None, pytest.approx(2**-0.5), pytest.approx(3**-0.5), None]


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_peri_is_sandwich_and_embed_norm_changes_outputs_only_when_on(family, rng):
    sandwich, off = build(family, "sandwich"), build(family, "peri")
    on = build(family, NormSpec(placement="peri", options={"embed_norm": True}))
    assert off.norm_spec.option("embed_norm") is False and on.norm_spec.label() == "peri+embed_norm"
    assert list(off.state_dict()) == list(sandwich.state_dict())
    extra = set(on.state_dict()) - set(off.state_dict())
    embed_norm = on.embed_norm if family == "llama" else on.norm_pre
    assert extra == {("embed_norm." if family == "llama" else "norm_pre.") + name for name, _ in embed_norm.named_parameters()}
    one_norm = sum(p.numel() for p in on.blocks[0].norm1.parameters())
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(on) - count(off) == sum(p.numel() for p in embed_norm.parameters()) == one_norm
    randomize_norms(sandwich, torch.Generator().manual_seed(1))
    off.load_state_dict(sandwich.state_dict())
    on.load_state_dict(sandwich.state_dict(), strict=False)  # everything but the embedding norm (weight 1, bias 0)
    x = torch.arange(8)[None] if family == "llama" else torch.randn(1, 3, 16, 16, generator=rng)
    torch.testing.assert_close(off(x), sandwich(x), rtol=0, atol=0)
    assert not torch.allclose(on(x), off(x), atol=1e-3)
    with pytest.raises(NormConfigError, match="unknown norm option"):
        NormSpec(placement="pre", options={"embed_norm": True})
    with pytest.raises(NormConfigError, match="true or false"):
        NormSpec(placement="peri", options={"embed_norm": "yes"})


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_reordered_has_pre_ln_keys_and_no_input_norm(family, rng):
    model, pre = build(family, "reordered"), build(family, "pre")
    assert list(model.state_dict()) == list(pre.state_dict())  # norm1/norm2 reused as the output norms
    randomize_norms(model, rng)
    block, x = model.blocks[0], torch.randn(1, 5, model.blocks[0].norm1.weight.numel(), generator=rng)
    run = (lambda b, z: b(z, model.rope_cos[:5], model.rope_sin[:5])) if family == "llama" else (lambda b, z: b(z))
    with torch.no_grad():  # an input norm would make the block invariant to the scale of a zero-mean input; this one is not
        block.norm1.weight.fill_(1.0)
    assert not torch.allclose(run(block, 3 * x) - 3 * x, run(block, x) - x, atol=1e-3)


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_hybrid_star_first_block_differs_from_the_rest(family, rng):
    model = build(family, "hybrid_star")
    assert model.plan == ["hybrid_first", "hybrid", "hybrid", "hybrid"]
    first, rest = model.blocks[0], model.blocks[1:]
    assert not isinstance(first.norm1, torch.nn.Identity) and all(isinstance(b.norm1, torch.nn.Identity) for b in rest)
    for b in model.blocks:  # every block keeps the QKV-norm: per-head norms on q, k, v
        assert b.attn.qk_norm_mode == "head"
        assert b.attn.q_norm.weight.numel() == b.attn.k_norm.weight.numel() == b.attn.v_norm.weight.numel() == b.attn.head_dim
    randomize_norms(model, rng)
    x = torch.randn(2, 5, first.norm2.weight.numel(), generator=rng)
    cos, sin = (model.rope_cos[:5], model.rope_sin[:5]) if family == "llama" else (None, None)
    as_first = block_by_hand(first, "hybrid_first", 0, x, family, cos, sin)
    as_hybrid = block_by_hand(first, "hybrid", 0, x, family, cos, sin)
    got = first(x, cos, sin) if family == "llama" else first(x)
    torch.testing.assert_close(got, as_first, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got, as_hybrid, atol=1e-3)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(first) - count(rest[0]) == count(first.norm1)


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_dyt_replaces_every_norm_with_alpha0_per_position(family):
    spec = NormSpec(placement="dyt", qk_norm="head", options={"dyt_alpha_attn": 0.8, "dyt_alpha_mlp": 0.2, "dyt_alpha_final": 0.3})
    model = build(family, spec)
    norms = [
        m
        for m in model.modules()
        if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm))
        or type(m).__name__ in ("LayerNorm", "RmsNorm", "TokenGroupNorm")
    ]
    assert norms == []
    assert spec.label() == "dyt(α0=0.8/0.2/0.3)+qk_norm=head" and NormSpec(placement="dyt").label() == "dyt"
    alpha = lambda m: m.alpha.item()  # noqa: E731
    assert alpha(model.norm) == pytest.approx(0.3)
    for b in model.blocks:
        assert (alpha(b.norm1), alpha(b.norm2), alpha(b.attn.q_norm), alpha(b.attn.k_norm)) == pytest.approx((0.8, 0.2, 0.8, 0.8))
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert len(dyts) == 4 * len(model.blocks) + 1
    for m in dyts:  # γ = 1, β = 0 at init; LLaMA without β
        assert torch.equal(m.weight, torch.ones_like(m.weight))
        assert (m.bias is None) if family == "llama" else torch.equal(m.bias, torch.zeros_like(m.bias))
    default = build(family, "dyt")  # the paper's α0: LLaMA by width (llama_debug is narrower than 1024: 1.0), ViT 0.5
    assert {m.alpha.item() for m in default.modules() if isinstance(m, DyT)} == ({1.0} if family == "llama" else {0.5})
    with pytest.raises(NormConfigError, match="leave norm.kind unset"):
        NormSpec(placement="dyt", kind="layernorm")
    with pytest.raises(NormConfigError, match="positive number"):
        NormSpec(placement="dyt", options={"dyt_alpha_mlp": -1.0})


@pytest.mark.parametrize(
    "width, attn, other",
    [(512, 1.0, 1.0), (1024, 1.0, 1.0), (2048, 1.0, 0.5), (4096, 0.8, 0.2), (8192, 0.2, 0.05), (16384, 0.2, 0.05), (5120, 0.6, 0.15)],
)
def test_dyt_alpha0_follows_the_papers_width_table_for_llama(width, attn, other):
    """DyT paper Table 12 (LLaMA α0 by width: attention / other norms), log2-linear between its rows, its end rows
    outside; 5120 (13B) lands on Table 11's 0.6 / 0.15 within 0.01."""
    assert dyt_llm_alpha0(width) == pytest.approx((attn, other), abs=0.01 if width == 5120 else 1e-12)
    wide = width > 4096  # 8192 and 16384 wide: 0.3 and 1.1 billion attention weights, ~20 s to initialize on a CPU
    with torch.device("meta" if wide else "cpu"):
        model = build_model("llama_debug", norm="dyt", hidden_size=width, intermediate_size=8, num_heads=width // 64, num_layers=1)
    for m in model.modules() if wide else ():  # the norms alone on the CPU, initialized as at construction
        if isinstance(m, DyT):
            m.to_empty(device="cpu").reset_parameters()
    alphas = {name: m.alpha.item() for name, m in model.named_modules() if isinstance(m, DyT)}
    attn, other = dyt_llm_alpha0(width)
    assert alphas == pytest.approx({"blocks.0.norm1": attn, "blocks.0.norm2": other, "norm": other}, abs=1e-6)
    assert model.norm_spec.label() != "dyt" and NormSpec(placement="dyt").label() == "dyt"  # the resolved values, the run's label


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_dyt_embed_gain_is_a_learnable_sqrt_d_on_llama_by_default(family, rng):
    default = build(family, "dyt")
    if family == "vit":  # the DyT ViT code has no such scalar: off, and asking for it is an error
        assert default.norm_spec.option("dyt_embed_gain") is False
        with pytest.raises(NormConfigError, match="this model has none \\(a ViT\\)"):
            build(family, NormSpec(placement="dyt", options={"dyt_embed_gain": True}))
        return
    off = build(family, NormSpec(placement="dyt", options={"dyt_embed_gain": False}))
    on = build(family, NormSpec(placement="dyt", options={"dyt_embed_gain": True}))
    assert off.norm_spec.option("dyt_embed_gain") is False and default.norm_spec.option("dyt_embed_gain") is True
    assert (NormSpec(placement="dyt", options={"dyt_embed_gain": True}).label(), off.norm_spec.label()) == (
        "dyt+embed_gain",
        "dyt(α0=1/1/1)-embed_gain",
    )
    assert off.embed_gain is None and "embed_gain" not in off.state_dict()
    assert list(default.state_dict()) == list(on.state_dict())
    assert set(on.state_dict()) - set(off.state_dict()) == {"embed_gain"}
    d = on.cfg.hidden_size
    assert on.embed_gain.requires_grad and on.embed_gain.item() == pytest.approx(math.sqrt(d))
    with torch.no_grad():
        on.embed_gain.fill_(0.0)
    on.reset_parameters()  # re-initialised with the model
    assert on.embed_gain.item() == pytest.approx(math.sqrt(d))
    ids = torch.randint(0, on.cfg.vocab_size, (2, 5), generator=rng)
    torch.testing.assert_close(on.embed_tokens(ids), on.embed.weight[ids] * math.sqrt(d))
    on(ids, labels=ids).backward()
    assert on.embed_gain.grad is not None and on.embed_gain.grad.abs().item() > 0
    with pytest.raises(NormConfigError, match="true, false or null"):
        NormSpec(placement="dyt", options={"dyt_embed_gain": 1})
    with pytest.raises(NormConfigError, match="unknown norm option"):
        NormSpec(placement="pre", options={"dyt_embed_gain": True})


def test_hybrid_rejects_full_qk_norm_and_accepts_head():
    for kwargs in (dict(placement="hybrid"), dict(placement="hybrid_star"), dict(placement="custom", layers=["pre", "hybrid"])):
        with pytest.raises(NormConfigError, match="qk_norm=full"):
            NormSpec(qk_norm="full", **kwargs)
    a = build("llama", NormSpec(placement="hybrid", qk_norm="head"))
    assert sum(p.numel() for p in a.parameters()) == sum(p.numel() for p in build("llama", "hybrid").parameters())


# ------------------------------------------------------------------------------------------------ counts, guards, configs
VARIANTS = [
    *NEW,
    NormSpec(placement="peri", options={"embed_norm": True}),
    NormSpec(qk_norm="head"),
    NormSpec(qk_norm="full"),
    NormSpec(placement="dyt", qk_norm="full"),
    NormSpec(placement="custom", layers=["hybrid_first", "dyt", "peri", "hybrid"] * 3),
]


@pytest.mark.parametrize("family", ["llama", "vit"])
@pytest.mark.parametrize("norm", VARIANTS, ids=label)
def test_parameter_counts_are_derived_from_the_built_modules(norm, family):
    with torch.device("meta"):
        model = build_model("llama_71m" if family == "llama" else "vit_small", norm=norm)
        pre = build_model("llama_71m" if family == "llama" else "vit_small", norm="pre")
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    outside = model.embed_norm if family == "llama" else model.norm_pre  # the model-level embedding norm, if any
    outside = sum(p.numel() for p in outside.parameters()) if outside is not None else 0
    outside += model.norm.alpha.numel() if isinstance(model.norm, DyT) else 0  # DyT's final α
    outside += 1 if getattr(model, "embed_gain", None) is not None else 0  # DyT's LLaMA embedding scalar
    assert count(model) - count(pre) == placement_parameters(model.blocks) + outside
    if model.norm_spec.placement == "hybrid":  # cross-check: + 3 head_dim norms, − the dropped input norm
        b = model.blocks[0]
        per_norm = 1 if family == "llama" else 2
        assert placement_parameters(model.blocks[:1]) == per_norm * (3 * b.attn.head_dim - b.norm2.weight.numel())


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_new_placements_really_differ(family):
    """Guard: the formula tests above would catch one placement swapped for another."""
    variants = ["pre", *NEW, NormSpec(placement="peri", options={"embed_norm": True}), NormSpec(qk_norm="head"), NormSpec(qk_norm="full")]
    x = torch.arange(8)[None] if family == "llama" else torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    outs = {}
    for norm in variants:
        model = build(family, norm)
        randomize_norms(model, torch.Generator().manual_seed(1))
        outs[model.norm_spec.label()] = model(x)
    assert len(outs) == len(variants)
    for a in outs:
        for b in outs:
            if a < b:
                assert not torch.allclose(outs[a], outs[b], atol=1e-3), (a, b)


@pytest.mark.parametrize("name", [*NEW, "olmo2"])
def test_norm_configs_exist_with_a_formula_comment_and_load(name):
    path = REPO_ROOT / "configs" / "norm" / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("# ") and len(text.splitlines()[0]) > 20
    spec = NormSpec.from_dict(yaml.safe_load(text))
    assert spec.placement in list_placements()
    assert spec.placement == ("reordered" if name == "olmo2" else name)
    if name == "olmo2":
        assert spec.qk_norm == "full"


def test_a_llama_built_directly_gets_the_llama_traits_as_through_its_family():
    """``Llama(cfg, norm)`` outside the family registry (bench scripts, the exported model's code) resolves DyT as the lm
    family does: α0 from the width table and the √d embedding gain."""
    from mixbench.models.llama import Llama, llama_config

    direct = Llama(llama_config("llama_debug"), NormSpec(placement="dyt")).norm_spec.options
    assert direct == build_model("llama_debug", norm="dyt").norm_spec.options
    assert direct["dyt_embed_gain"] is True
