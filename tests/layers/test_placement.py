import math

import pytest

from mixbench import layer_plan
from mixbench.layers import NormConfigError, NormSpec, deepnorm_constants


@pytest.mark.parametrize(
    "alpha, layers, num_post",
    [(0.25, 12, 3), (0.25, 24, 6), (0.0625, 32, 2), (1 / 6, 24, 4), (5 / 12, 24, 10), (0.33, 24, 7), (0.5, 24, 12)],
)
def test_mix_uses_floor_alpha_L_post_blocks_first(alpha, layers, num_post):
    plan = layer_plan("mix", layers, alpha=alpha)
    assert plan == ["post"] * num_post + ["pre"] * (layers - num_post)


@pytest.mark.parametrize("layers", [1, 12, 24, 32])
def test_alpha_zero_is_all_pre_and_alpha_one_is_all_post(layers):
    assert layer_plan("mix", layers, alpha=0.0) == ["pre"] * layers
    assert layer_plan("mix", layers, alpha=1.0) == ["post"] * layers


def test_num_post_overrides_alpha_like_official_POST_NUM():
    assert layer_plan("mix", 32, alpha=0.25, num_post=2) == ["post"] * 2 + ["pre"] * 30


def test_explicit_list_gives_reversed_mix():
    reversed_mix = ["pre"] * 9 + ["post"] * 3
    assert layer_plan("custom", 12, layers=reversed_mix) == reversed_mix
    assert NormSpec(placement="custom", layers=reversed_mix).plan(12) == reversed_mix


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich", "deepnorm"])
def test_uniform_placements(norm):
    assert layer_plan(norm, 5) == [norm] * 5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(placement="mixx"), "valid: pre, post, mix"),
        (dict(placement="mix", alpha=1.5), "norm.alpha must be in [0, 1]"),
        (dict(placement="mix", alpha=-0.1), "norm.alpha must be in [0, 1]"),
        (dict(placement="mix", num_post=-1), "non-negative integer"),
        (dict(placement="custom", layers=["pre", "postt"]), "valid per-block values"),
        (dict(placement="custom"), "needs norm.layers"),
        (dict(kind="batchnorm"), "valid: rmsnorm, layernorm"),
    ],
)
def test_bad_values_fail_with_the_valid_choices(kwargs, message):
    with pytest.raises(NormConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        NormSpec(**kwargs)


def test_list_length_must_match_depth():
    with pytest.raises(NormConfigError, match="has 2 entries but the model has 12 blocks"):
        layer_plan("custom", 12, layers=["pre", "post"])


def test_num_post_larger_than_depth_fails():
    with pytest.raises(NormConfigError, match="exceeds"):
        layer_plan("mix", 4, num_post=5)


def test_deepnorm_constants_follow_deepnet_and_compat_follows_official_code():
    a, b = deepnorm_constants(12)
    assert a == pytest.approx(24**0.25) and b == pytest.approx(96**-0.25)
    a, b = deepnorm_constants(12, paper_compat=True)
    assert a == pytest.approx(math.sqrt(8)) and b == pytest.approx(96**0.25)


def test_labels():
    assert NormSpec(placement="mix", alpha=0.25).label() == "mix(α=0.25)"
    assert NormSpec(placement="mix", num_post=2).label() == "mix(post=2)"
    assert NormSpec(placement="pre", kind="layernorm").label() == "pre[layernorm]"
