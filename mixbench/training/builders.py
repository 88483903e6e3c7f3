"""The run's parts built from its config: the data module, the model options completed from the data, the model
with its data-dependent init, the LightningModule.  Shared by the run, its pre-flight checks and the layer analyses."""

from __future__ import annotations

import contextlib
import inspect

import lightning as L
from omegaconf import DictConfig, OmegaConf

from ..core.contracts import BenchDataModule, check_contract
from ..core.errors import ConfigError
from ..core.families import get_family
from ..data import get_datamodule_class
from ..layers import profile_admin
from ..models import build_model

PROFILE_ITEMS = 16  # sequences / images of the first validation batch that a profiling init's forward pass uses


def make_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    """The run's data module (``data.loader`` with the ``data`` group's arguments, ``seed`` if it takes one), not set up:
    its constructor checks the settings and reads no data."""
    options = get_family(cfg.task.family).data_options(cfg, OmegaConf.to_container(cfg.data, resolve=True))
    datamodule_class = get_datamodule_class(options.pop("loader"))
    if "seed" in inspect.signature(datamodule_class.__init__).parameters:
        options["seed"] = cfg.seed
    return datamodule_class(**options)


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    """:func:`make_datamodule`, set up for fitting and checked against :class:`mixbench.core.contracts.BenchDataModule` and
    the family's needs."""
    datamodule = make_datamodule(cfg)
    datamodule.setup("fit")
    check_contract(datamodule, BenchDataModule, f"data loader {cfg.data.loader!r}", get_family(cfg.task.family).data_requires)
    return datamodule


def model_options(cfg: DictConfig, datamodule) -> dict:
    """Architecture options of the run, completed from the data by the model family (which fails if they do not fit)."""
    options = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "name"}
    return get_family(cfg.task.family).options_from_data(cfg, options, datamodule)


def profiling_batch(datamodule, items: int = PROFILE_ITEMS, device=None):
    """The first ``items`` examples of the first validation batch, on ``device`` (default the CPU): a real, fixed batch
    (no augmentation, the same on every rank, the training order untouched) for an init that needs one."""
    import torch
    from lightning.fabric.utilities.apply_func import apply_to_collection

    batch = next(iter(datamodule.val_dataloader()))
    return apply_to_collection(batch, torch.Tensor, lambda t: t[:items].to(device or "cpu"))


def init_device(cfg: DictConfig):
    """The device the run's model is built on: None (the CPU) or, for ``init_device=cuda``, the run's GPU — its
    parameters drawn there by the CUDA generator that ``seed`` seeds (other weights than the CPU's at the same seed)."""
    if cfg.get("init_device", "cpu") != "cuda":
        return None
    import torch

    if cfg.trainer.accelerator == "cpu" or not torch.cuda.is_available():
        raise ConfigError("init_device=cuda builds the model on the run's GPU, and this run has none: set init_device=cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build_run_model(cfg: DictConfig, spec, datamodule, options: dict):
    """The run's model at its initial weights: built from the preset, ``spec`` and ``options`` (on :func:`init_device`),
    then any init a placement takes from data — Admin's profiling pass (``norm.admin_init=profile``) over
    :func:`profiling_batch`, unless ``init_from`` replaces the initial weights.  Returns ``(model, omegas)``: the
    profiled Admin ω per sub-layer, or None."""
    device = init_device(cfg)
    with device if device is not None else contextlib.nullcontext():  # a torch.device is a context: tensors made there
        model = build_model(cfg.model.name, spec, seed=cfg.seed, **options)
    if cfg.get("init_from") is not None:  # its weights replace the initial ones: nothing to profile
        return model, None
    loss = get_family(cfg.task.family).analysis_loss
    omegas = profile_admin(model, lambda: loss(model, profiling_batch(datamodule, device=device)))
    return model, omegas


def checkpoint_activations(cfg: DictConfig, model) -> bool:
    """With ``activation_checkpointing=true``, switch the model's blocks to recompute their activations in the backward
    pass (``set_grad_checkpointing``: timm's switch, which the LLaMA model shares); whether it did.  (Under FSDP the
    setting is refused with the config: :func:`mixbench.training.config.check_ranges`.)"""
    if not cfg.get("activation_checkpointing", False):
        return False
    if not hasattr(model, "set_grad_checkpointing"):
        name = type(model).__name__
        raise ConfigError(f"activation_checkpointing=true: {name} has no set_grad_checkpointing; set activation_checkpointing=false")
    model.set_grad_checkpointing(True)
    return True


def build_lightning_module(cfg: DictConfig, model, datamodule) -> L.LightningModule:
    return get_family(cfg.task.family).lightning_module(cfg, model, datamodule)
