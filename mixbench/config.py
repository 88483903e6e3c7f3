"""Compose a run's config from YAML files and command-line ``key=value`` arguments (plain OmegaConf).

Merge order (later wins)::

    configs/defaults.yaml
    < model options of the chosen model (``model=NAME``, default: the task's model)
    < configs/norm/<norm>.yaml     (``norm=NAME``, default: the task's norm or ``pre``)
    < configs/data/<data>.yaml     (``data=NAME``, default: the task's data)
    < the task's ``recipe``        (``task=NAME``, required)
    < dotted overrides             (``norm.alpha=0.5 trainer.max_steps=100 seed=1``)

A dotted override must name an existing key (a typo fails with a did-you-mean); prefix it with
``+`` to add a new key (e.g. ``+trainer.fast_dev_run=true``).  Values are parsed as YAML.
"""
from __future__ import annotations

import difflib
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .layers import NormSpec
from .models import model_defaults, model_family
from .optim import OPTIMIZERS
from .project import project_root
from .tasks import get_task

GROUPS = ("task", "model", "norm", "data")


def _did_you_mean(word: str, options) -> str:
    hint = difflib.get_close_matches(word, list(options), n=1)
    return f" — did you mean {hint[0]!r}?" if hint else ""


def group_choices(group: str, root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "configs" / group).glob("*.yaml"))


def _load_group(group: str, choice: str, root: Path) -> DictConfig:
    path = root / "configs" / group / f"{choice}.yaml"
    if not path.is_file():
        valid = group_choices(group, root)
        raise ConfigError(f"unknown {group}={choice!r}{_did_you_mean(choice, valid)} Valid: {', '.join(valid)}")
    return OmegaConf.load(path)


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
    parsed = OmegaConf.select(OmegaConf.from_dotlist([f"v={value}"]), "v")
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
                f"unknown setting {key!r}{_did_you_mean(part, node.keys())} "
                f"(keys under {where}: {', '.join(map(str, node.keys()))}; prefix with + to add a new key)"
            )
        if not last:
            node = node[part]
    else:
        old = OmegaConf.select(cfg, key)
        numeric = (int, float)
        if parsed is None:
            pass  # null is always allowed (it means "unset" / "use the default")
        elif isinstance(old, numeric) and not isinstance(old, bool) and not (isinstance(parsed, numeric) and not isinstance(parsed, bool)):
            raise ConfigError(f"{key} expects a number, got {value!r}")
        elif isinstance(old, bool) and not isinstance(parsed, bool):
            raise ConfigError(f"{key} expects true or false, got {value!r}")
    OmegaConf.update(cfg, key, parsed, merge=False, force_add=True)


def compose(args: list[str], root: str | Path | None = None) -> DictConfig:
    """The resolved, validated config of ``mixbench run ARGS``."""
    root = project_root(root)
    choices, overrides = split_arguments(args)
    if "task" not in choices:
        from .tasks import discover_tasks

        raise ConfigError(f"choose a task with task=NAME; available: {', '.join(discover_tasks(root))}")
    task = get_task(choices["task"], root)
    model_name = choices.get("model", task.model)
    try:
        family = model_family(model_name)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if family != task.family:
        raise ConfigError(f"model {model_name!r} is a {family} model but task {task.name!r} needs a {task.family} model")

    cfg = OmegaConf.load(root / "configs" / "defaults.yaml")
    cfg.choices = {"task": task.name, "model": model_name, "norm": choices.get("norm", task.norm), "data": choices.get("data", task.data)}
    cfg.task = {"name": task.name, "family": task.family, "description": task.description,
                "metrics": [dict(name=m.name, higher_is_better=m.higher_is_better, primary=m.primary) for m in task.metrics]}
    cfg.model = {"name": model_name, **model_defaults(model_name)}
    cfg.norm = OmegaConf.merge(cfg.norm, _load_group("norm", cfg.choices.norm, root))
    cfg.data = _load_group("data", cfg.choices.data, root)
    cfg = OmegaConf.merge(cfg, task.recipe)
    for arg in overrides:
        _apply_override(cfg, arg)
    OmegaConf.resolve(cfg)
    validate(cfg)
    return cfg


def validate(cfg: DictConfig) -> None:
    """Fail at config time on bad values that would otherwise surface mid-run."""
    spec = norm_spec(cfg)
    spec.plan(int(cfg.model.num_layers))
    if cfg.optim.name not in OPTIMIZERS:
        raise ConfigError(f"unknown optim.name {cfg.optim.name!r}; valid: {', '.join(OPTIMIZERS)}")


def norm_spec(cfg: DictConfig) -> NormSpec:
    return NormSpec.from_dict(OmegaConf.to_container(cfg.norm, resolve=True))
