import pytest

from mixbench.config import ConfigError, compose
from mixbench.tasks import TaskError


def test_group_choices_and_dotted_overrides_compose_in_order():
    cfg = compose(["task=vit_small", "norm=mix", "norm.alpha=0.5", "trainer.max_steps=100", "seed=1", "results_dir=/tmp/x"])
    assert cfg.norm.placement == "mix" and cfg.norm.alpha == 0.5
    assert cfg.trainer.max_steps == 100 and cfg.seed == 1 and cfg.results_dir == "/tmp/x"
    assert cfg.model.name == "vit_small" and cfg.model.patch_size == 8 and cfg.model.num_classes is None  # recipe over model defaults; classes from the data
    assert cfg.choices.data == "cifar10_embedded"


def test_task_recipe_is_inherited_through_base():
    small, tiny = compose(["task=vit_small"]), compose(["task=vit_tiny"])
    assert tiny.model.name == "vit_tiny" and tiny.model.hidden_size == 192
    assert tiny.optim == small.optim and tiny.trainer == small.trainer and tiny.task.metrics == small.task.metrics


def test_model_override_changes_depth_and_plan_is_validated():
    cfg = compose(["task=llama_lm", "model=llama_71m", "model.num_layers=24", "norm=mix"])
    assert cfg.model.num_layers == 24 and cfg.model.hidden_size == 512
    with pytest.raises(ConfigError, match="has 3 entries but the model has 24 blocks"):
        compose(["task=llama_lm", "model=llama_71m", "model.num_layers=24", "norm=custom", "norm.layers=[pre,post,pre]"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["norm=mixx"], "unknown norm='mixx' — did you mean 'mix'"),
        (["norm.alpah=0.3"], "did you mean 'alpha'"),
        (["norm=mix", "norm.alpha=1.5"], "norm.alpha must be in"),
        (["trainer.max_stepz=5"], "did you mean 'max_steps'"),
        (["trainer.max_steps=abc"], "expects a number"),
        (["model=llama_71m"], "needs a vision model"),
        (["model=vit_smal"], "did you mean 'vit_small'"),
        (["data=cifar"], "unknown data='cifar'"),
        (["seed"], "is not key=value"),
        (["norm.kind=batchnorm"], "valid: rmsnorm, layernorm"),
    ],
)
def test_bad_input_fails_at_config_time_with_one_clear_message(args, message):
    with pytest.raises(ConfigError, match=message):
        compose(["task=vit_small", *args])


def test_unknown_task_suggests_the_close_one():
    with pytest.raises(TaskError, match="did you mean 'vit_small'"):
        compose(["task=vit_smal"])
    with pytest.raises(ConfigError, match="choose a task"):
        compose(["norm=mix"])


def test_plus_adds_a_new_key():
    cfg = compose(["task=vit_small", "+trainer.fast_dev_run=true"])
    assert cfg.trainer.fast_dev_run is True
