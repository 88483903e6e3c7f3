import pytest
import timm
import torch

import mixbench
from mixbench import build_model
from mixbench.layers import NormSpec, block_placements, get_block_placement, list_placements, placement_parameters
from mixbench.models.llama import llama_config

PAPER_SIZES_M = {"llama_71m": 70.6, "llama_130m": 134.1, "llama_250m": 247.4, "llama_350m": 368.0, "llama_1b": 1339.1, "llama_7b": 6738.4}


@pytest.mark.parametrize("name, millions", PAPER_SIZES_M.items())
def test_llama_paper_sizes_have_the_papers_parameter_counts(name, millions):
    with torch.device("meta"):
        model = build_model(name, norm="mix")
    count = sum(p.numel() for p in model.parameters())
    assert round(count / 1e6, 1) == millions
    cfg = llama_config(name)  # 2·V·H (embedding, untied head) + L·(4H² + 3H·F + 2 norms·H) + final norm H
    h, f, v, n = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_layers
    assert count == 2 * v * h + n * (4 * h * h + 3 * h * f + 2 * h) + h


def test_sandwich_adds_exactly_two_norms_per_block():
    with torch.device("meta"):
        pre, sandwich = build_model("llama_71m", norm="pre"), build_model("llama_71m", norm="sandwich")
    cfg = llama_config("llama_71m")
    extra = sum(p.numel() for p in sandwich.parameters()) - sum(p.numel() for p in pre.parameters())
    assert extra == 2 * cfg.num_layers * cfg.hidden_size
    assert placement_parameters(sandwich.blocks) == extra and placement_parameters(pre.blocks) == 0


def test_llama_has_no_biases_and_an_untied_head():
    model = build_model("llama_debug")
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    assert model.head.weight.data_ptr() != model.embed.weight.data_ptr()


@pytest.mark.parametrize("ours, theirs", [("vit_tiny", "vit_tiny_patch16_224"), ("vit_small", "vit_small_patch16_224")])
@pytest.mark.parametrize("norm", ["pre", "post", "mix"])
def test_vit_matches_timm_keys_and_counts(ours, theirs, norm):
    model = build_model(ours, norm=norm)
    reference = timm.create_model(theirs, pretrained=False)
    assert list(model.state_dict()) == list(reference.state_dict())
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in reference.state_dict().items()}
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    model.load_state_dict(reference.state_dict())  # checkpoints interoperate


def test_pre_checkpoint_of_timm_gives_timm_outputs():
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    ours = build_model("vit_tiny", norm="pre").eval()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(1, 3, 224, 224)
    torch.testing.assert_close(ours(x), reference(x))


# what a block of a placement may change in the state dict of the same seed's Pre-LN model: DeepNorm rescales these
# weights (its own init: test_deepnorm_scales_value_output_and_mlp_init_by_beta); HybridNorm's QKV norms replace norm1
OWN_INIT = {"deepnorm": ("attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight")}
REPLACED = {"hybrid": ("norm1.",)}


@pytest.mark.parametrize("name, kwargs", [("llama_debug", {}), ("vit_debug", dict(img_size=16, patch_size=8))])
@pytest.mark.parametrize("placement", list_placements())
def test_same_seed_same_initial_weights_for_every_placement_but_what_it_adds(name, kwargs, placement):
    """Models differ only in the norm: every parameter a placement shares with Pre-LN starts equal for the same seed
    (bit for bit), apart from the declared exceptions above; the rest are the parameters it adds (its own modules, DyT's
    α and embedding gain).  ``custom`` mixes every block placement, one a block."""
    spec = NormSpec(placement="custom", layers=tuple(block_placements())) if placement == "custom" else NormSpec(placement=placement)
    num_layers = len(spec.plan(len(block_placements()))) if placement == "custom" else 4
    pre = build_model(name, norm="pre", seed=3, num_layers=num_layers, **kwargs).state_dict()
    model = build_model(name, norm=spec, seed=3, num_layers=num_layers, **kwargs)
    state, plan = model.state_dict(), model.plan

    def excepted(key, table):  # a key of a block whose placement declares it in ``table``
        parts = key.split(".")
        return parts[0] == "blocks" and key.split(".", 2)[2].startswith(table.get(plan[int(parts[1])], ()))

    shared = [key for key in pre if key in state]
    assert [key for key in pre if key not in state] == [key for key in pre if excepted(key, REPLACED)]
    for key in shared:
        if not excepted(key, OWN_INIT):
            torch.testing.assert_close(state[key], pre[key], rtol=0, atol=0, msg=f"{placement}: {key}")
    for key in state.keys() - pre.keys():  # added: a module the block's placement declares, or a norm's α / embedding gain
        parts = key.split(".")
        if parts[0] == "blocks":
            block_placement = get_block_placement(plan[int(parts[1])])
            assert key.split(".", 2)[2].startswith(block_placement.added_modules) or parts[-1] == "alpha", key
        else:
            assert placement == "dyt" and parts[-1] in ("alpha", "embed_gain"), key


def test_deepnorm_scales_value_output_and_mlp_init_by_beta():
    pre = build_model("llama_debug", norm="pre", seed=0)
    deep = build_model("llama_debug", norm="deepnorm", seed=0)
    layers, h = pre.cfg.num_layers, pre.cfg.hidden_size
    beta = (8 * layers) ** -0.25
    for bp, bd in zip(pre.blocks, deep.blocks):
        torch.testing.assert_close(bd.attn.qkv.weight[: 2 * h], bp.attn.qkv.weight[: 2 * h])  # q, k unchanged
        torch.testing.assert_close(bd.attn.qkv.weight[2 * h :], beta * bp.attn.qkv.weight[2 * h :])
        for name in ("attn.proj", "mlp.fc1", "mlp.fc2"):
            torch.testing.assert_close(bd.get_submodule(name).weight, beta * bp.get_submodule(name).weight)
        assert bd.residual_scale == pytest.approx((2 * layers) ** 0.25)


def test_deepnorm_paper_compat_reproduces_official_constants():
    spec = mixbench.NormSpec(placement="deepnorm", paper_compat=True)
    model = build_model("llama_71m", norm=spec, seed=0)
    block = model.blocks[0]
    assert block.residual_scale == pytest.approx(8**0.5)
    gain = (8 * 12) ** 0.25  # official code: positive exponent
    expected_std = gain * (2 / (512 + 512)) ** 0.5
    assert block.attn.proj.weight.std().item() == pytest.approx(expected_std, rel=0.05)


def test_vit_deepnorm_scales_only_value_rows_of_fused_qkv():
    pre = build_model("vit_debug", norm="pre", seed=0, img_size=16, patch_size=8)
    deep = build_model("vit_debug", norm="deepnorm", seed=0, img_size=16, patch_size=8)
    beta, d = (8 * 4) ** -0.25, 32
    torch.testing.assert_close(deep.blocks[1].attn.qkv.weight[: 2 * d], pre.blocks[1].attn.qkv.weight[: 2 * d])
    torch.testing.assert_close(deep.blocks[1].attn.qkv.weight[2 * d :], beta * pre.blocks[1].attn.qkv.weight[2 * d :])
    torch.testing.assert_close(deep.blocks[1].mlp.fc2.weight, beta * pre.blocks[1].mlp.fc2.weight)


def test_build_model_overrides_and_layer_plan_api():
    model = build_model("llama_71m", norm="mix", alpha=0.25, num_layers=24)
    assert len(model.blocks) == 24 and model.plan == mixbench.layer_plan("mix", 24, alpha=0.25)
    assert model.plan.count("post") == 6
    with pytest.raises(ValueError, match="unknown LLaMA option"):
        build_model("llama_71m", num_layer=24)
    with pytest.raises(ValueError, match="did you mean 'vit_small'"):
        build_model("vit_smal")


def test_final_norm_switch():
    assert isinstance(build_model("llama_debug", norm=mixbench.NormSpec(final_norm=False)).norm, torch.nn.Identity)
    assert isinstance(build_model("vit_debug", norm=mixbench.NormSpec(final_norm=False), img_size=16, patch_size=8).norm, torch.nn.Identity)


def test_gemm_patch_embed_equals_timms_strided_conv():
    from timm.layers import PatchEmbed

    from mixbench.models.vit import GemmPatchEmbed

    for img, patch in ((32, 4), (224, 16)):
        torch.manual_seed(0)
        reference = PatchEmbed(img, patch, 3, 48)
        ours = GemmPatchEmbed(img, patch, 3, 48)
        ours.load_state_dict(reference.state_dict())
        x = torch.randn(2, 3, img, img)
        torch.testing.assert_close(ours(x), reference(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError, match="Input height"):  # other sizes: timm's own checks, via its forward
        ours(torch.randn(1, 3, 200, 224))
