"""Compose a run's config from YAML files and command-line ``key=value`` arguments (plain OmegaConf).

Merge order (later wins), every layer strict — a key that the layer below does not have fails with a
did-you-mean naming the file it came from::

    configs/defaults.yaml
    < model options of the chosen model (``model=NAME``, default: the task's model; from its family)
    < configs/norm/<norm>.yaml     (``norm=NAME``, default: the task's norm or ``pre``; plus the placement's own options)
    < configs/data/<data>.yaml     (``data=NAME``, default: the task's data; keys = the data loader's arguments)
    < the task's ``recipe``        (``task=NAME``, required)
    < dotted overrides             (``norm.alpha=0.5 trainer.max_steps=100 seed=1``)

A dotted override must name an existing key; prefix it with ``+`` to add a new key (e.g.
``+trainer.fast_dev_run=true``).  Values are parsed as YAML.  Files come from the project search path
(:mod:`mixbench.core.project`).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..core.configs import load_config_file, load_group, read_saved_config
from ..core.errors import ConfigError, did_you_mean, one_line
from ..core.families import family_of_model, get_family
from ..core.project import config_choices, config_file, runs_root  # noqa: F401 (runs_root: imported from here too)
from ..core.tasks import discover_tasks, get_task, load_project_plugins
from ..data.arguments import data_arguments, datamodule_arguments  # noqa: F401 (data_arguments: its old home was here)
from ..layers import NormSpec, block_placements, get_placement, list_placements
from .compile import check_compile_settings, upgrade_compile
from .loggers import logger_names
from .optim import OPTIMIZERS
from .precision import check_fp8_settings
from .strategy import check_strategy_settings

GROUPS = ("task", "model", "norm", "data")
SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
# trainer arguments mixbench fills itself, and the option to use instead
RESERVED_TRAINER_KEYS = {
    "logger": "use logger=csv,tensorboard|wandb|mlflow and logger_options.<name>.<key>=...",
    "callbacks": "use grad_norm_every_n_steps / checkpoint.every_n_steps / divergence.*; a task's task.py can add callbacks",
    "default_root_dir": "use results_dir=DIR or run_dir=DIR",
    "enable_checkpointing": "use checkpoint.every_n_steps=N",
    "use_distributed_sampler": "set by the model family's sampler policy",
}
# ``key=true|false`` for a group means this key of it (the group was a boolean setting once)
BOOLEAN_SHORTHANDS = {"compile": "compile.enabled"}


def check_known_keys(base: DictConfig, update, where: str, prefix: str = "") -> None:
    """Fail on the first key of ``update`` (recursively) that ``base`` does not have."""
    for key, value in update.items():
        if key not in base:
            level = prefix.rstrip(".") or "the top level"
            raise ConfigError(
                f"{where}: unknown setting '{prefix}{key}'{did_you_mean(key, base.keys())} "
                f"(keys under {level}: {', '.join(map(str, base.keys()))})"
            )
        if OmegaConf.is_dict(value) or isinstance(value, dict):
            if OmegaConf.is_dict(base[key]):
                check_known_keys(base[key], value, where, f"{prefix}{key}.")


def merge_strict(base: DictConfig, update, where: str) -> DictConfig:
    """``OmegaConf.merge(base, update)``, refusing keys ``base`` does not have (one ConfigError naming ``where``)."""
    check_known_keys(base, update, where)
    return OmegaConf.merge(base, update)


def split_arguments(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``['task=a', 'norm=mix', 'norm.alpha=0.5']`` → ``({'task': 'a', 'norm': 'mix'}, ['norm.alpha=0.5'])``."""
    choices, overrides = {}, []
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"argument {arg!r} is not key=value (e.g. task=vit_small norm=mix norm.alpha=0.5)")
        key, value = arg.split("=", 1)
        if key in GROUPS:
            choices[key] = value
        else:
            overrides.append(arg)
    return choices, overrides


def _apply_override(cfg: DictConfig, arg: str) -> None:
    key, value = arg.split("=", 1)
    add = key.startswith("+")
    key = key.lstrip("+")
    if not key or not all(part.isidentifier() or part.lstrip("-").isdigit() for part in key.split(".")):
        raise ConfigError(f"{arg!r}: {key!r} is not a setting name (dotted names like trainer.max_steps=100)")
    try:
        parsed = OmegaConf.to_container(OmegaConf.create({"v": yaml.safe_load(value) if value.strip() else ""}))["v"]
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        raise ConfigError(f"cannot parse the value of {arg!r} as YAML ({one_line(err)}); quote it, e.g. {key}='\"text\"'") from None
    if not add and key in BOOLEAN_SHORTHANDS and isinstance(parsed, bool):
        key = BOOLEAN_SHORTHANDS[key]
    node, parts = cfg, key.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if not isinstance(node, DictConfig):
            raise ConfigError(f"cannot set {key!r}: {'.'.join(parts[:depth])} is not a group of settings")
        if part not in node:
            if add:
                break
            where = ".".join(parts[:depth]) or "the top level"
            raise ConfigError(
                f"unknown setting {key!r}{did_you_mean(part, node.keys())} "
                f"(keys under {where}: {', '.join(map(str, node.keys()))}; prefix with + to add a new key)"
            )
        if not last:
            node = node[part]
    else:
        try:
            old = cfg
            for part in parts:
                old = old[part]
        except OmegaConfBaseException:  # the value it replaces is an interpolation that does not resolve
            old = None
        numeric = (int, float)
        if isinstance(parsed, str) and (old is None or (isinstance(old, numeric) and not isinstance(old, bool))):
            try:  # YAML 1.1 reads 1e-3 as text; Python reads it as the number everyone means
                parsed = float(parsed) if SCIENTIFIC.fullmatch(parsed.strip()) else parsed
            except ValueError:
                pass
        if parsed is None:
            pass  # null is always allowed (it means "unset" / "use the default")
        elif isinstance(old, numeric) and not isinstance(old, bool) and not (isinstance(parsed, numeric) and not isinstance(parsed, bool)):
            raise ConfigError(f"{key} expects a number, got {value!r}")
        elif isinstance(old, int) and not isinstance(old, bool) and isinstance(parsed, float) and not parsed.is_integer():
            raise ConfigError(f"{key} expects a whole number, got {value!r}")
        elif isinstance(old, str) and isinstance(parsed, (dict, list)):
            raise ConfigError(f"{key} expects a text value, got {value!r}")
        elif isinstance(old, DictConfig) and not isinstance(parsed, dict):
            raise ConfigError(f"{key} is a group of settings; set its keys, e.g. {key}.{next(iter(old.keys()), 'name')}=...")
        elif OmegaConf.is_list(old) and not isinstance(parsed, list):
            raise ConfigError(f"{key} expects a list, e.g. {key}=[...], got {value!r}")
        elif isinstance(old, bool) and not isinstance(parsed, bool):
            raise ConfigError(f"{key} expects true or false, got {value!r}")
    OmegaConf.update(cfg, key, parsed, merge=False, force_add=True)


def _norm_group(defaults: DictConfig, choice: str, root) -> DictConfig:
    """The norm group: common settings, the chosen placement's own options, then ``configs/norm/<choice>.yaml`` — or,
    without that file, the placement ``choice`` as registered (a project's own, from its code): an unknown name is then
    :func:`mixbench.layers.placements.get_placement`'s error, the same as a config file naming it gets."""
    chosen = (
        load_group("norm", choice, root) if config_file("norm", f"{choice}.yaml", root=root) else OmegaConf.create({"placement": choice})
    )
    placement = get_placement(chosen.get("placement", defaults.placement))
    base = OmegaConf.merge(defaults, placement.options)
    return merge_strict(base, chosen, f"configs/norm/{choice}.yaml")


def option_readers(option: str) -> tuple[str, ...]:
    """The placements that read ``norm.<option>``: those that declare it (``Placement.options``, e.g. Sandwich-LN's
    out_norm_gain) or read that shared setting (``Placement.reads``, e.g. Mix-LN's alpha); empty for a setting every
    placement reads (kind, eps, final_norm, groups, scaled_init, scaled_embed, qk_norm)."""
    placements = {name: get_placement(name) for name in list_placements()}
    return tuple(name for name, p in placements.items() if option in p.options or option in p.reads)


def given_norm_options(overrides: list[str]) -> list[str]:
    """The norm settings that command-line overrides set (``norm.alpha=0.5`` → ``alpha``; ``+norm.x`` adds a key, not
    counted)."""
    keys = [arg.split("=", 1)[0] for arg in overrides]
    return list(dict.fromkeys(key.split(".")[1] for key in keys if key.startswith("norm.") and len(key.split(".")) > 1))


def check_norm_options(cfg: DictConfig, options: list[str], root=None) -> None:
    """Each of ``options`` (norm settings given on the command line) must be read by the chosen placement or a block of
    its plan (:func:`option_readers`); else one error naming the ``norm=`` choices that read it."""
    for option in options:
        readers = option_readers(option)
        if not readers:
            continue
        placement = cfg.norm.get("placement")
        if option in cfg.norm and placement is not None:
            try:
                plan = norm_spec(cfg).plan(int(cfg.model.num_layers))
            except (ValueError, TypeError):  # a plan this config cannot make: validate() says why
                plan = []
            if {placement, *plan} & set(readers):
                continue
        choices = [f"norm={c}" for c in config_choices("norm", root) if load_group("norm", c, root).get("placement") in readers]
        choices = choices or [f"norm.placement={name}" for name in readers]
        blocks = [name for name in readers if name in block_placements() and option in get_placement(name).reads]
        also = f" (or {'/'.join(blocks)} blocks in norm.layers)" if blocks else ""
        raise ConfigError(
            f"norm.{option} is used only by {', '.join(choices)}{also}, not by norm={cfg.choices.norm} (placement {placement}); "
            f"drop norm.{option}=... or choose {choices[0] if len(choices) == 1 else 'one of those'}"
        )


def _data_group(choice: str, root) -> DictConfig:
    """``configs/data/<choice>.yaml`` over the declared arguments (and defaults) of its ``loader``."""

    chosen = load_group("data", choice, root)
    if "loader" not in chosen:
        raise ConfigError(f"configs/data/{choice}.yaml: set loader: <name> (one of mixbench.data.list_datamodules())")
    arguments = datamodule_arguments(chosen.loader)  # read without importing the data module where its source says them
    base = OmegaConf.create({"loader": chosen.loader, **{k: _plain(v) for k, v in arguments.items()}})
    return merge_strict(base, chosen, f"configs/data/{choice}.yaml (arguments of data loader {chosen.loader!r})")


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def compose(args: list[str], root: str | Path | None = None) -> DictConfig:
    """The resolved, validated config of ``mixbench run ARGS``."""

    choices, overrides = split_arguments(args)
    if "task" not in choices:
        raise ConfigError(f"choose a task with task=NAME; available: {', '.join(discover_tasks(root))}")
    load_project_plugins(root)  # the project's code first: its families, data loaders and placements (each file once)
    task = get_task(choices["task"], root)
    task.load_plugin()  # may register families, data loaders and placements
    family = get_family(task.family)
    model_name = choices.get("model", task.model)
    model_family = family_of_model(model_name)
    if model_family.name != family.name:
        raise ConfigError(f"model {model_name!r} is a {model_family.name} model but task {task.name!r} needs a {family.name} model")

    cfg = load_config_file(config_file("defaults.yaml", root=root))
    cfg.choices = {"task": task.name, "model": model_name, "norm": choices.get("norm", task.norm), "data": choices.get("data", task.data)}
    cfg.task = {
        "name": task.name,
        "family": family.name,
        "description": task.description,
        "metrics": [dict(name=m.name, higher_is_better=m.higher_is_better, primary=m.primary) for m in task.metrics],
    }
    cfg.model = {"name": model_name, **family.model_defaults(model_name)}
    cfg.norm = _norm_group(cfg.norm, cfg.choices.norm, root)
    cfg.data = _data_group(cfg.choices.data, root)
    recipe = dict(task.recipe)  # a plain mapping: its ${...} resolve against the whole config, later
    upgrade_compile(recipe)
    cfg = merge_strict(cfg, recipe, f"{task.path / 'task.yaml'} (recipe)")
    norm_options = given_norm_options(overrides)
    check_norm_options(cfg, [option for option in norm_options if option not in cfg.norm], root)  # other placements' own
    for arg in overrides:
        _apply_override(cfg, arg)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(f"cannot resolve the config: {one_line(err)}") from None
    validate(cfg)
    check_norm_options(cfg, norm_options, root)
    return cfg


def replay(config_path: str | Path, overrides: list[str]) -> DictConfig:
    """A run's saved ``config.yaml`` again (into a new run folder), with dotted ``key=value`` overrides on top."""
    path = Path(config_path)
    path = path / "config.yaml" if path.is_dir() else path
    choices, dotted = split_arguments(overrides)
    if choices:
        raise ConfigError(f"with --config, change groups through their settings (e.g. norm.placement=mix), not {', '.join(choices)}=...")
    cfg = load_run_config(path.parent) if path.name == "config.yaml" else None
    if cfg is None:
        raise ConfigError(f"--config {config_path}: give a run's config.yaml (or its run folder)")
    cfg.run_dir = None
    cfg.resume = None
    options = given_norm_options(dotted)
    check_norm_options(cfg, [option for option in options if option not in cfg.norm])
    for arg in dotted:
        _apply_override(cfg, arg)
    validate(cfg)
    check_norm_options(cfg, options)
    return cfg


# settings that must lie in a range: key → (lowest allowed, whether the lowest is excluded)
MAX_LR = 10  # above it a learning rate is a typo (1e9 for 1e-3) that would run a whole budget to a `diverged` record
RANGES = {  # key: (lowest, whether the lowest itself is refused)
    "data.batch_size": (0, True),
    "data.eval_batch_size": (0, True),
    "data.num_workers": (0, False),
    "data.seq_len": (0, True),
    "optim.lr": (0, True),
    "optim.weight_decay": (0, False),
    "optim.eps": (0, True),
    "optim.warmup_ratio": (0, False),
    "optim.min_lr_ratio": (0, False),
    "trainer.accumulate_grad_batches": (0, True),
    "divergence.check_every_n_steps": (0, True),
    "divergence.patience": (0, True),
    "grad_norm_every_n_steps": (0, True),
}


# after fit: always a trainer.validate, or reuse_fit: the last validation inside fit where it was at the final step
FINAL_VALIDATION = ("always", "reuse_fit")
INIT_DEVICES = ("cpu", "cuda")  # where the model is built and its initial weights drawn


def check_ranges(cfg: DictConfig) -> None:
    for key, (low, strict) in RANGES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value < low or (strict and value == low):
            raise ConfigError(f"{key} must be {'>' if strict else '≥'} {low}, got {value}")
    lr = OmegaConf.select(cfg, "optim.lr", default=None)
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > MAX_LR:
        raise ConfigError(f"optim.lr must be in (0, {MAX_LR}], got {lr:g}: a typo? (e.g. optim.lr=1e-3)")

    logger_names(cfg.logger)
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be auto or null, got {cfg.resume!r}")
    if cfg.get("final_validation", "always") not in FINAL_VALIDATION:
        raise ConfigError(f"final_validation must be one of {', '.join(FINAL_VALIDATION)}, got {cfg.final_validation!r}")
    init = cfg.get("init_device", "cpu")
    if init not in INIT_DEVICES:
        raise ConfigError(f"init_device must be one of {', '.join(INIT_DEVICES)}, got {init!r}")
    if init == "cuda" and (cfg.trainer.devices != 1 or cfg.trainer.num_nodes != 1):
        raise ConfigError(
            "init_device=cuda builds the model on the run's one GPU: set trainer.devices=1 trainer.num_nodes=1, or init_device=cpu"
        )
    if not isinstance(cfg.get("activation_checkpointing", False), bool):
        raise ConfigError(f"activation_checkpointing must be true or false, got {cfg.activation_checkpointing!r}")
    if cfg.get("activation_checkpointing", False) and OmegaConf.select(cfg, "trainer.strategy") == "fsdp":
        raise ConfigError("activation_checkpointing=true: under FSDP set fsdp.activation_checkpointing=true (FSDP wraps the blocks)")


def validate(cfg: DictConfig) -> None:
    """Fail at config time on bad values that would otherwise surface mid-run."""
    check_ranges(cfg)
    check_fp8_settings(cfg)
    check_strategy_settings(cfg)
    check_compile_settings(cfg)
    spec = norm_spec(cfg)
    spec.plan(int(cfg.model.num_layers))

    get_family(cfg.task.family).check_config(cfg)
    if cfg.optim.name not in OPTIMIZERS:
        raise ConfigError(f"unknown optim.name {cfg.optim.name!r}; valid: {', '.join(OPTIMIZERS)}")
    for key, instead in RESERVED_TRAINER_KEYS.items():
        if key in cfg.trainer:
            raise ConfigError(f"trainer.{key} is set by mixbench and cannot be overridden: {instead}")


def norm_spec(cfg: DictConfig) -> NormSpec:
    return NormSpec.from_dict(OmegaConf.to_container(cfg.norm, resolve=True))


def upgrade_saved_config(node) -> None:
    """In place: a saved config (``config.yaml``, a record's ``config``) read as it meant when it was saved — a boolean
    ``compile`` (:func:`upgrade_compile`); ``norm.admin_init: null``, saved before Admin's profiling init existed, is
    the fixed schedule (``sqrt``) where the plan has Admin blocks and the new default (``profile``, unused) elsewhere."""
    upgrade_compile(node)
    norm = node.get("norm") if node is not None else None
    if norm is not None and "admin_init" in norm and norm["admin_init"] is None:
        admin = norm.get("placement") == "admin" or "admin" in (norm.get("layers") or ())
        norm["admin_init"] = "sqrt" if admin else "profile"


def load_run_config(run_dir: str | Path) -> DictConfig:
    """A finished run's ``config.yaml`` (settings added to defaults.yaml after the run was made take their defaults),
    with its task's plugin code loaded (a plugin task needs its project: ``mixbench --project DIR``)."""

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no config.yaml)")
    saved = OmegaConf.create(read_saved_config(path))  # plain values: no resolver runs on a file from elsewhere
    upgrade_saved_config(saved)
    cfg = OmegaConf.merge(load_config_file(config_file("defaults.yaml")), saved)
    get_task(cfg.task.name).load_plugin()
    return cfg
