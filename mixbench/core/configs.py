"""One file of a config group, ``configs/<group>/<choice>.yaml``, from the project search path — read without the
training stack, so that ``mixbench list`` shows the groups without importing Lightning (composition:
:mod:`mixbench.training.config`)."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError, did_you_mean, one_line
from .project import config_choices, config_file


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
