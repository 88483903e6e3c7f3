"""One file of a config group, ``configs/<group>/<choice>.yaml``, from the project search path — read without the
training stack, so that ``mixbench list`` shows the groups without importing Lightning (composition:
:mod:`mixbench.training.config`)."""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError, one_line
from .project import config_choices, config_file


def did_you_mean(word, options) -> str:
    """`` — did you mean 'x'?`` for the closest of ``options`` to ``word`` (empty when none is close)."""
    hint = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" — did you mean {hint[0]!r}?" if hint else ""


def load_group(group: str, choice: str, root: str | Path | None = None) -> DictConfig:
    """``configs/<group>/<choice>.yaml`` from the project search path."""
    path = config_file(group, f"{choice}.yaml", root=root)
    if path is None:
        valid = config_choices(group, root)
        raise ConfigError(f"unknown {group}={choice!r}{did_you_mean(choice, valid)} Valid: {', '.join(valid)}")
    try:
        loaded = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        raise ConfigError(f"{path} is not valid YAML: {one_line(err)}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path} must hold a mapping of settings")
    return loaded
