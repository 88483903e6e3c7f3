"""Checks of a run that its config alone decides, made before a run folder or record is written: the data module's
required settings (its constructor reads no data) and ``init_from``'s model description (family, norm placement,
architecture options) against the run's model."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from .config import norm_spec
from .errors import ConfigError
from .weights import WeightsError, check_compatible, load_description


def check_init_from(cfg: DictConfig) -> None:
    """``init_from``'s weights must exist and describe a model of this run's family, norm placement and architecture."""
    from .train import KERNEL_ONLY_OPTIONS

    theirs = load_description(cfg.init_from)
    spec = norm_spec(cfg)
    ours = {"family": cfg.task.family, "model": cfg.model.name, "norm_label": spec.label(), "plan": spec.plan(int(cfg.model.num_layers))}
    check_compatible(str(cfg.init_from), theirs, ours)
    if theirs is None:
        return
    options = OmegaConf.to_container(cfg.model, resolve=True)
    differ = {k: (v, options[k]) for k, v in (theirs.get("options") or {}).items()
              if options.get(k) is not None and v is not None and v != options[k] and k not in KERNEL_ONLY_OPTIONS}
    if differ:
        changes = ", ".join(f"model.{k}={mine} (weights: {theirs_value})" for k, (theirs_value, mine) in sorted(differ.items()))
        raise WeightsError(f"init_from={cfg.init_from} holds a {theirs.get('model')} model that does not fit this run's "
                           f"{cfg.model.name}: {changes}; choose model={theirs.get('model')} or the same model.* settings")


def preflight(cfg: DictConfig) -> None:
    """Raise the errors ``cfg`` alone decides (:class:`mixbench.errors.ConfigError`), before anything is written."""
    from .train import make_datamodule

    if int(cfg.trainer.num_nodes) > 1 and cfg.run_dir is None:
        raise ConfigError(f"trainer.num_nodes={cfg.trainer.num_nodes}: set run_dir= to a folder on storage every node shares "
                          "(each node's process writes into the same run folder)")
    make_datamodule(cfg)
    if cfg.init_from is not None:
        check_init_from(cfg)
