"""``--max-steps 20`` where ``trainer.max_steps=20`` was meant: the settings an unknown ``--option`` may name.

Settings are ``key=value`` arguments; argparse knows only the commands' own options.  When it is handed an option it
does not know, :func:`option_hint` looks for a setting of that name in the config the other arguments compose (dashes
read as underscores; the last part of a dotted key is enough: ``--lr`` → ``optim.lr``) and says how to write it.
"""

from __future__ import annotations

from ..core.errors import USER_ERRORS
from ..core.settings import flat_settings


def config_keys(arguments: list[str]) -> list[str]:
    """The group names and the dotted keys of the config that the group choices among ``arguments`` compose — or of
    ``configs/defaults.yaml`` when they compose none (no ``task=``, a bad choice)."""
    from omegaconf import OmegaConf

    from ..training.config import GROUPS, compose

    choices = [a for a in arguments if a.split("=", 1)[0] in GROUPS]
    try:
        cfg = compose(choices)
    except USER_ERRORS:
        from ..core.project import config_file

        cfg = OmegaConf.load(config_file("defaults.yaml"))
    return [*GROUPS, *flat_settings(OmegaConf.to_container(cfg, resolve=False))]


def matching_keys(option: str, keys: list[str]) -> list[str]:
    """The keys ``option`` may mean: its name with dashes as underscores is the whole key, else the last part of keys."""
    name = option.lstrip("-").split("=", 1)[0].replace("-", "_")
    whole = [key for key in keys if key == name]
    return whole or [key for key in keys if key.rsplit(".", 1)[-1] == name]


def option_value(option: str, argv: list[str]) -> str:
    """The value given with ``option``: ``--opt=V``, or the argument after ``--opt V`` (``VALUE`` when there is none)."""
    if "=" in option:
        return option.split("=", 1)[1]
    after = argv[argv.index(option) + 1 :] if option in argv else []
    return after[0] if after and not after[0].startswith("-") and "=" not in after[0] else "VALUE"


def option_hint(option: str, argv: list[str], arguments: list[str]) -> str | None:
    """One line naming the ``key=value`` setting that the unknown option ``option`` of command line ``argv`` looks like
    (``arguments``: the command's key=value arguments), or None when it looks like no setting."""
    keys = matching_keys(option, config_keys(arguments))
    if not keys:
        return None
    value = option_value(option, argv)
    meant = " or ".join(f"{key}={value}" for key in keys)
    return f"unknown option {option.split('=', 1)[0]}: settings are key=value arguments — did you mean {meant}?"
