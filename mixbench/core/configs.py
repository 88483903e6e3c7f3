"""One file of a config group, ``configs/<group>/<choice>.yaml``, from the project search path — read without the
training stack, so that ``mixbench list`` shows the groups without importing Lightning (composition:
:mod:`mixbench.training.config`)."""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError, did_you_mean, one_line
from .project import config_choices, config_file
from .reading import UnreadableFile, read_text_capped


@functools.lru_cache(maxsize=256)
def _parsed(path: str, mtime_ns: int, size: int):
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def load_config_file(path: str | Path):
    """``OmegaConf.load(path)`` of one of mixbench's or a project's config files, its YAML parsed once a process while
    the file is unchanged (its modification time and size): a grid composes every run from the same few files.  Each
    call returns a fresh config."""
    stat = os.stat(path)
    return OmegaConf.create(copy.deepcopy(_parsed(str(path), stat.st_mtime_ns, stat.st_size)))


def load_group(group: str, choice: str, root: str | Path | None = None) -> DictConfig:
    """``configs/<group>/<choice>.yaml`` from the project search path."""
    path = config_file(group, f"{choice}.yaml", root=root)
    if path is None:
        valid = config_choices(group, root)
        raise ConfigError(f"unknown {group}={choice!r}{did_you_mean(choice, valid)} Valid: {', '.join(valid)}")
    try:
        loaded = load_config_file(path)
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        raise ConfigError(f"{path} is not valid YAML: {one_line(err)}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path} must hold a mapping of settings")
    return loaded


def _interpolated(node, key: str = "") -> str | None:
    """The dotted key of the first string in ``node`` that holds an interpolation (``${...}``), or None."""
    if isinstance(node, dict):
        return next((found for k, v in node.items() if (found := _interpolated(v, f"{key}.{k}" if key else str(k)))), None)
    if isinstance(node, list):
        return next((found for i, v in enumerate(node) if (found := _interpolated(v, f"{key}[{i}]"))), None)
    return key or "(the file)" if isinstance(node, str) and "${" in node else None


def read_saved_config(path: str | Path) -> dict:
    """A run's saved ``config.yaml`` — a file that may come from elsewhere — as plain values: YAML without tags, and no
    interpolation, so no resolver (``${oc.env:...}``, ``${oc.decode:...}``) ever runs on it; a run saves its config
    resolved, so its own never holds one.  Anything else is a :class:`ConfigError` naming the file and the key."""
    path = Path(path)
    try:
        text = read_text_capped(path)  # a regular file of at most a few MB: a FIFO never blocks
        loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except UnreadableFile as err:
        raise ConfigError(f"cannot read {one_line(err)}") from None
    except (yaml.YAMLError, RecursionError) as err:
        raise ConfigError(f"{path} is not a saved config (plain YAML, no tags): {one_line(err)}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} is not a saved config: it must hold a mapping of settings")
    key = _interpolated(loaded)
    if key is not None:
        raise ConfigError(
            f"{path}: {key} holds an interpolation (${{...}}); a run saves its config resolved, so a config.yaml from "
            "elsewhere is read as plain values only: replace it with the value, or give it on the command line"
        )
    return loaded
