import pytest
from _support.paths import REPO_ROOT

from mixbench.core.tasks import TaskError
from mixbench.training.config import ConfigError, compose


def test_group_choices_and_dotted_overrides_compose_in_order():
    cfg = compose(["task=vit_small", "norm=mix", "norm.alpha=0.5", "trainer.max_steps=100", "seed=1", "results_dir=/tmp/x"])
    assert cfg.norm.placement == "mix" and cfg.norm.alpha == 0.5
    assert cfg.trainer.max_steps == 100 and cfg.seed == 1 and cfg.results_dir == "/tmp/x"
    assert (
        cfg.model.name == "vit_small" and cfg.model.patch_size == 8 and cfg.model.num_classes is None
    )  # recipe over model defaults; classes from the data
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
        (["norm=mixx"], "unknown norm placement 'mixx' — did you mean 'mix'"),
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


def _project_with(tmp_path, task_recipe: str = "", data_extra: str = ""):
    (tmp_path / "tasks" / "t").mkdir(parents=True)
    (tmp_path / "configs" / "data").mkdir(parents=True)
    (tmp_path / "tasks" / "t" / "task.yaml").write_text(
        "name: t\nfamily: vision\nmodel: vit_debug\ndata: mydata\nmetrics: [{name: val/top1, higher_is_better: true, primary: true}]\n"
        + task_recipe
    )
    (tmp_path / "configs" / "data" / "mydata.yaml").write_text("loader: cifar10\nbatch_size: 8\n" + data_extra)
    return tmp_path


def test_every_layer_is_strict_and_names_its_file(tmp_path):
    project = _project_with(tmp_path)
    cfg = compose(["task=t"], root=project)
    assert cfg.data.batch_size == 8 and cfg.data.val_per_class == 200  # the loader's declared defaults fill the group
    with pytest.raises(ConfigError, match=r"task.yaml \(recipe\): unknown setting 'optim.lrr' — did you mean 'lr'"):
        compose(["task=t"], root=_project_with(tmp_path / "a", task_recipe="recipe: {optim: {lrr: 0.1}}\n"))
    with pytest.raises(ConfigError, match=r"configs/data/mydata.yaml .*unknown setting 'bach_size' — did you mean 'batch_size'"):
        compose(["task=t"], root=_project_with(tmp_path / "b", data_extra="bach_size: 3\n"))
    (project / "configs" / "norm").mkdir()
    (project / "configs" / "norm" / "mine.yaml").write_text("placement: mix\nalpah: 0.5\n")
    with pytest.raises(ConfigError, match=r"configs/norm/mine.yaml: unknown setting 'alpah' — did you mean 'alpha'"):
        compose(["task=t", "norm=mine"], root=project)


@pytest.mark.parametrize(
    "key, hint",
    [
        ("logger", "use logger=csv,tensorboard"),
        ("callbacks", "grad_norm_every_n_steps"),
        ("default_root_dir", "results_dir"),
        ("enable_checkpointing", "checkpoint.every_n_steps"),
    ],
)
def test_keys_mixbench_fills_name_the_option_to_use(key, hint):
    with pytest.raises(ConfigError, match=f"trainer.{key} is set by mixbench.*{hint}"):
        compose(["task=vit_small", f"+trainer.{key}=false"])


def test_data_modules_declare_their_arguments():
    from mixbench.data import get_datamodule_class, list_datamodules
    from mixbench.training.config import data_arguments

    for name in list_datamodules():
        assert "batch_size" in data_arguments(get_datamodule_class(name))

    class Loose:
        def __init__(self, batch_size=1, **rest):
            pass

    with pytest.raises(ConfigError, match="declare every argument"):
        data_arguments(Loose)


@pytest.mark.parametrize(
    "args, message",
    [
        (["norm=pre", "norm.alpha=0.5"], "norm.alpha is used only by norm=mix, not by norm=pre (placement pre); drop norm.alpha="),
        (["norm=group_ln", "norm.num_post=2"], "norm.num_post is used only by norm=mix, not by norm=group_ln"),
        (["norm=pre", "norm.out_norm_gain=0"], "norm.out_norm_gain is used only by norm=olmo2, norm=peri, norm=reordered, norm=sandwich,"),
        (["norm=sandwich", "norm.embed_norm=true"], "norm.embed_norm is used only by norm=peri, not by norm=sandwich"),
        (["norm=mix", "norm.dyt_alpha_attn=0.5"], "norm.dyt_alpha_attn is used only by norm=dyt"),
        (["norm=pre", "norm.paper_compat=true"], "norm.paper_compat is used only by norm=deepnorm (or deepnorm blocks in norm.layers)"),
        (
            ["norm=custom", "norm.layers=[pre,post]", "model.num_layers=2", "norm.admin_init=sqrt"],
            "norm.admin_init is used only by norm=admin",
        ),
        (["norm=mix", "norm.layers=[pre,post]", "model.num_layers=2"], "norm.layers is used only by norm=custom"),
    ],
)
def test_a_norm_option_the_placement_ignores_is_an_error_naming_the_placements_that_read_it(args, message):
    with pytest.raises(ConfigError) as err:
        compose(["task=llama_lm", *args])
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "args",
    [
        ["norm=mix", "norm.alpha=0.5"],
        ["norm=mix", "norm.num_post=1"],
        ["norm=custom", "norm.layers=[pre,admin]", "model.num_layers=2", "norm.admin_init=sqrt"],  # an admin block reads it
        ["norm=custom", "norm.layers=[deepnorm,pre]", "model.num_layers=2", "norm.paper_compat=true"],
        ["norm=olmo2", "norm.out_norm_gain=0"],
        ["norm=admin", "norm.admin_init=2.0"],
        [
            "norm=pre",
            "norm.qk_norm=head",
            "norm.scaled_init=true",
            "norm.scaled_embed=true",
            "norm.kind=layernorm",
            "norm.final_norm=false",
        ],
        ["norm=group_ln"],  # its yaml sets kind and groups: only the command line counts
    ],
)
def test_norm_options_the_placement_reads_and_common_ones_are_accepted(args):
    """Accepted, and each value is the one the run gets: the norm group's yaml, then the command line (none dropped or
    defaulted on the way)."""
    import yaml
    from omegaconf import OmegaConf

    cfg = compose(["task=llama_lm", *args])
    group = next(arg.split("=", 1)[1] for arg in args if arg.startswith("norm="))
    defaults = yaml.safe_load((REPO_ROOT / "configs" / "norm" / f"{group}.yaml").read_text())
    expected = {f"norm.{key}": value for key, value in defaults.items()}
    expected |= {key: yaml.safe_load(value) for key, value in (a.split("=", 1) for a in args if a.startswith(("norm.", "model.")))}
    got = {key: OmegaConf.select(cfg, key) for key in expected}
    assert {key: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for key, v in got.items()} == expected


def test_replay_refuses_a_norm_option_its_placement_ignores(tmp_path):
    from omegaconf import OmegaConf

    from mixbench.training.config import replay

    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(compose(["task=llama_lm", "norm=pre"])))
    with pytest.raises(ConfigError, match="norm.alpha is used only by norm=mix"):
        replay(tmp_path, ["norm.alpha=0.5"])
    assert replay(tmp_path, ["norm.placement=mix", "norm.alpha=0.5"]).norm.alpha == 0.5


def test_a_placement_says_which_shared_norm_settings_it_reads():
    """``Placement.reads`` is where the check learns who reads a shared setting: a plugin placement reading
    ``norm.alpha`` is then named beside Mix-LN, and the setting is accepted with it."""
    from mixbench.layers import placements
    from mixbench.training.config import option_readers

    assert option_readers("alpha") == ("mix",) and option_readers("kind") == ()

    class HalfMix(placements.MixLN):
        name = "halfmix_reads_test"

    placements.register_placement(HalfMix)
    try:
        assert option_readers("alpha") == ("mix", "halfmix_reads_test")
    finally:
        placements._PLACEMENTS.pop("halfmix_reads_test")
    assert option_readers("alpha") == ("mix",)
