"""NormSpec (the norm group) at its edges, where mutation testing (bench/mutation) found survivors in
layers/placement.py: a placement's own options kept from a config dict, the boundaries of the settings (num_post 0 and
groups 1 are valid, eps 0 is not), per-block lists kept as tuples, and the errors naming what is wrong."""

import re

import pytest

from mixbench import build_model
from mixbench.layers import NormConfigError, NormSpec, block_placements
from mixbench.layers import placement as placement_module
from mixbench.layers.placement import block_codes


def test_from_dict_keeps_the_placements_own_options_and_defaults_to_pre():
    spec = NormSpec.from_dict({"placement": "dyt", "dyt_alpha_attn": 0.8, "qk_norm": "none"})
    assert spec == NormSpec(placement="dyt", options={"dyt_alpha_attn": 0.8}) and spec.option("dyt_alpha_attn") == 0.8
    model = build_model("llama_debug", spec, seed=0)
    assert model.blocks[0].norm1.alpha.item() == pytest.approx(0.8)  # the option reached the model
    assert NormSpec.from_dict({"kind": "layernorm"}) == NormSpec(placement="pre", kind="layernorm")
    fields = "placement, alpha, num_post, layers, kind, eps, groups, qk_norm, scaled_init, scaled_embed, final_norm"
    with pytest.raises(NormConfigError) as err:
        NormSpec.from_dict({"placement": "pre", "dyt_alpha_attn": 0.8})
    message = str(err.value)
    assert message.startswith("unknown norm option(s) ['dyt_alpha_attn']; valid: ") and "options" not in message.split("valid: ")[1]
    assert all(field in message for field in fields.split(", "))
    sandwich = str(pytest.raises(NormConfigError, NormSpec.from_dict, {"placement": "sandwich", "nope": 1}).value)
    assert sandwich.endswith(", out_norm_gain")  # its own option among the valid ones


def test_the_settings_boundaries():
    assert NormSpec(placement="mix", num_post=0).plan(3) == ["pre", "pre", "pre"]  # 0 Post-LN blocks: valid
    assert NormSpec(groups=1).groups == 1
    for bad, message in (
        (dict(num_post=-1), "norm.num_post must be a non-negative integer, got -1"),
        (dict(num_post=True), "norm.num_post must be a non-negative integer, got True"),
        (dict(num_post=1.5), "norm.num_post must be a non-negative integer, got 1.5"),
        (dict(eps=0.0), "norm.eps must be a positive number, got 0.0"),
        (dict(eps="1e-6"), "norm.eps must be a positive number, got '1e-6'"),
        (dict(groups=0), "norm.groups must be a positive integer, got 0"),
        (dict(groups=2.0), "norm.groups must be a positive integer, got 2.0"),
        (dict(alpha=True), "norm.alpha must be a number in [0, 1], got True"),
        (dict(qk_norm="both"), "unknown norm.qk_norm 'both'; valid: none, head, full"),
        (dict(placement="custom", layers=("pre", "mix")), "norm.layers has unknown placement(s) ['mix']; valid per-block values: "),
        (dict(placement="pre", options={"x": 1}), "unknown norm option(s) ['x'] for norm=pre"),
    ):
        with pytest.raises(NormConfigError, match="^" + re.escape(message)):
            NormSpec(**bad)
    sandwich = str(pytest.raises(NormConfigError, NormSpec, placement="sandwich", options={"x": 1}).value)
    assert sandwich == "unknown norm option(s) ['x'] for norm=sandwich; its own options: out_norm_gain"
    layered = str(pytest.raises(NormConfigError, NormSpec, placement="custom", layers=("mix",)).value)
    assert layered.endswith(", ".join(block_placements()))


def test_per_block_layers_are_kept_as_a_tuple_and_plans_need_a_positive_integer():
    spec = NormSpec(placement="custom", layers=["pre", "post"])
    assert spec.layers == ("pre", "post") and isinstance(spec.layers, tuple)
    for bad in (0, -1, 2.0):
        with pytest.raises(NormConfigError, match=rf"^num_layers must be a positive integer, got {bad!r}$"):
            NormSpec().plan(bad)


@pytest.mark.parametrize("family", ["llama_debug", "vit_debug"])
def test_a_number_as_admin_init_and_the_output_norms_gain_reach_the_weights(family):
    kwargs = dict(img_size=16, patch_size=8) if family == "vit_debug" else {}
    admin = build_model(family, NormSpec(placement="admin", admin_init=2.0), seed=0, **kwargs)
    assert all(set(b.omega1.flatten().tolist()) == {2.0} == set(b.omega2.flatten().tolist()) for b in admin.blocks)
    for placement in ("sandwich", "peri", "reordered"):
        model = build_model(family, NormSpec(placement=placement, options={"out_norm_gain": 0.5}), seed=0, **kwargs)
        rule = type(model.blocks[0].placement_rule)
        for block in model.blocks:
            for name in rule.output_norms:
                assert set(block.get_submodule(name).weight.flatten().tolist()) == {0.5}, (placement, name)


def test_labels_name_every_option_that_makes_a_different_row():
    """The label is the table row: options that change the model must show in it (survivors of the label mutants)."""
    assert NormSpec(placement="custom", layers=("pre", "post", "sandwich")).label() == "custom[pr,po,sa]"
    assert NormSpec(placement="custom", layers=("hybrid", "hybrid_first", "peri")).label() == "custom[hy,hf,pe]"
    spec = NormSpec(placement="mix", scaled_init=True, scaled_embed=True, final_norm=False, qk_norm="head")
    assert spec.label() == "mix(α=0.25)+scaled_init+scaled_embed[no-final-norm]+qk_norm=head"
    assert NormSpec(placement="post", final_norm=False).label() == "post[no-final-norm]"


def test_every_block_placement_has_its_own_code_in_plan_labels(monkeypatch):
    """Two plans never share a label: the codes are unique, and a code two placements would share gives way to names."""
    codes = block_codes()
    assert sorted(codes) == sorted(block_placements()) and len(set(codes.values())) == len(codes)
    monkeypatch.setattr(placement_module, "block_placements", lambda: ["pre", "post", "posh", "hybrid_first", "high_freq", "half"])
    expected = {"pre": "pr", "post": "post", "posh": "posh", "hybrid_first": "hybrid_first", "high_freq": "high_freq", "half": "ha"}
    assert block_codes() == expected
