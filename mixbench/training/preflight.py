"""Checks of a run that its config alone decides, made before a run folder or record is written: the data module's
required settings (its constructor reads no data), that its local files exist (globs and folders looked up, nothing
read), that ``init_device=cuda`` has a GPU, ``init_from``'s model description (family, norm placement, architecture
options) against the run's model, and that ``resume_from`` exists and holds nothing outside :mod:`mixbench.training.trusted`'s allowlist."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..core.errors import ConfigError
from .builders import init_device, make_datamodule
from .config import norm_spec
from .profiling import check_profiler
from .strategy import accumulation_steps, world_size
from .trusted import check_trusted
from .weights import WeightsError, check_compatible, load_description

# model options that decide tensor shapes: weights that differ in one cannot load (the load's own check would say so
# only after the run folder exists); other options (init scales, drop-path, RoPE base, kernels) may differ
SHAPE_OPTIONS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "patch_size", "img_size", "num_classes", "mlp_ratio")


def check_init_from(cfg: DictConfig) -> None:
    """``init_from``'s weights must exist and describe a model of this run's family, norm placement and architecture
    (one error naming every difference)."""
    theirs = load_description(cfg.init_from)
    spec = norm_spec(cfg)
    ours = {"family": cfg.task.family, "model": cfg.model.name, "norm_label": spec.label(), "plan": spec.plan(int(cfg.model.num_layers))}
    try:
        check_compatible(str(cfg.init_from), theirs, ours)
        problems = []
    except WeightsError as err:
        if theirs.get("family") != cfg.task.family:
            raise
        problems = [str(err)]
    options = OmegaConf.to_container(cfg.model, resolve=True)
    differ = {
        k: (v, options[k])
        for k, v in ((theirs or {}).get("options") or {}).items()
        if k in SHAPE_OPTIONS and options.get(k) is not None and v is not None and v != options[k]
    }
    if differ:
        changes = ", ".join(f"model.{k}={mine} (weights: {weights})" for k, (weights, mine) in sorted(differ.items()))
        problems.insert(
            0,
            f"init_from={cfg.init_from} holds a {theirs.get('model')} model that does not fit this run's "
            f"{cfg.model.name}: {changes}; choose model={theirs.get('model')} or the same model.* settings",
        )
    if problems:
        raise WeightsError("; and ".join(problems))


def check_data_sources(datamodule) -> None:
    """The local files a data module will read exist (``FileNotFoundError`` / ``ConfigError`` naming the setting):
    its own ``check_sources()`` — the lookups it makes before reading (C4-format shards and their validation glob,
    image folders, a CIFAR ``.npz``) — where it has one (a plugin's data module may add it too)."""
    check = getattr(datamodule, "check_sources", None)
    if check is not None:
        check()


def preflight(cfg: DictConfig) -> None:
    """Raise the errors ``cfg`` alone decides (:class:`mixbench.core.errors.ConfigError`), before anything is written."""

    if int(cfg.trainer.num_nodes) > 1 and cfg.run_dir is None:
        raise ConfigError(
            f"trainer.num_nodes={cfg.trainer.num_nodes}: set run_dir= to a folder on storage every node shares "
            "(each node's process writes into the same run folder)"
        )
    accumulation_steps(cfg.data.get("global_batch_size"), cfg.data.batch_size, world_size(cfg.trainer))
    check_data_sources(make_datamodule(cfg))
    check_profiler(cfg.profiler, int(cfg.trainer.num_nodes))
    init_device(cfg)  # init_device=cuda on a run without a GPU: refused here
    if cfg.init_from is not None:
        check_init_from(cfg)
    if cfg.resume_from is not None:
        check_resume_from(str(cfg.resume_from))


def check_resume_from(path: str) -> None:
    """``resume_from``'s checkpoint exists and holds nothing outside the allowlist: refused here, before the run folder
    exists (Lightning's FSDP strategy would read it whole, unrestricted)."""
    if not Path(path).expanduser().is_file():
        raise FileNotFoundError(
            f"resume_from={path}: no such file; give a checkpoint a run wrote (<run>/checkpoints/*.ckpt), "
            "or resume=auto with run_dir= to continue a run folder from its newest one"
        )
    check_trusted(path, f"resume_from={path}")
