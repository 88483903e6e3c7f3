"""Training precision: Lightning's ``trainer.precision`` values, plus ``fp8``.

``trainer.precision=fp8`` trains under bf16 autocast (Lightning runs ``bf16-mixed``) with the matmuls of the
``nn.Linear`` layers in float8 through torchao's float8 training (:func:`torchao.float8.convert_to_float8_training`,
recipe ``fp8.recipe``).  Converted: every ``nn.Linear`` whose in and out features are multiples of 16 (a float8
GEMM requirement) and whose module path matches none of ``fp8.skip`` (default: ``head``, the LM head and the
classifier head).  The conversion happens before ``torch.compile``, which torchao needs to fuse its scaling.
Needs ``pip install -e ".[fp8]"`` and a CUDA GPU of compute capability ≥ 8.9 (H100, H200, L40S, RTX 4090).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ..core.errors import ConfigError
from .compile import compile_enabled

log = logging.getLogger(__name__)

FP8 = "fp8"
FP8_RECIPES = ("tensorwise", "rowwise")
FP8_MIN_CAPABILITY = (8, 9)
FP8_DIM_MULTIPLE = 16


def runs_on_cuda(accelerator: str | None) -> bool:
    """Whether a run with ``trainer.accelerator`` = ``accelerator`` trains on a CUDA GPU here."""
    return torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")


def lightning_precision(precision, accelerator: str | None) -> str:
    """The ``precision`` handed to Lightning: null → ``bf16-mixed`` on a GPU (``32-true`` otherwise), ``fp8`` →
    ``bf16-mixed`` (the float8 matmuls come from the converted layers), anything else as given."""
    if precision is None:
        precision = "bf16-mixed" if runs_on_cuda(accelerator) else "32-true"
    elif precision == FP8:
        precision = "bf16-mixed"
    if not torch.cuda.is_available() and str(precision).startswith("bf16") and accelerator == "auto":
        log.warning("no GPU: running %s on the CPU", precision)
    return precision


def check_fp8_settings(cfg: DictConfig) -> None:
    """Config-time checks of the ``fp8.*`` settings (hardware is checked when the run starts)."""
    if cfg.fp8.recipe not in FP8_RECIPES:
        raise ConfigError(f"fp8.recipe must be one of {', '.join(FP8_RECIPES)}, got {cfg.fp8.recipe!r}")
    skip = cfg.fp8.skip
    if skip is not None and not (OmegaConf.is_list(skip) and all(isinstance(p, str) for p in skip)):
        raise ConfigError(f"fp8.skip must be a list of module-path patterns, e.g. fp8.skip=[head,'blocks.0.*'], got {skip!r}")


def fp8_filter(skip: list[str] | None) -> Callable[[nn.Module, str], bool]:
    """``module_filter_fn`` for torchao: a Linear is converted when both its dims are multiples of 16 and its
    path matches none of the ``skip`` patterns (:mod:`fnmatch`, e.g. ``head``, ``blocks.0.*``)."""
    patterns = list(skip or [])

    def keep_fp8(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear) or any(fnmatch.fnmatchcase(fqn, p) for p in patterns):
            return False
        return module.in_features % FP8_DIM_MULTIPLE == 0 and module.out_features % FP8_DIM_MULTIPLE == 0

    return keep_fp8


def fp8_candidates(model: nn.Module, skip: list[str] | None) -> list[str]:
    """Paths of the Linear layers of ``model`` that ``fp8_filter(skip)`` converts."""
    keep = fp8_filter(skip)
    return [name for name, module in model.named_modules() if name and keep(module, name)]


def check_fp8_runtime() -> None:
    """Fail with one message naming the fix when torchao or an fp8-capable GPU is missing."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError as err:
        raise ConfigError(f'trainer.precision=fp8 needs torchao ({err}): pip install -e ".[fp8]"') from None
    if not torch.cuda.is_available():
        raise ConfigError(
            "trainer.precision=fp8 needs a CUDA GPU of compute capability ≥ 8.9 (H100, H200, L40S, RTX 4090) "
            "and this machine has none; use trainer.precision=bf16-mixed (or leave it unset)"
        )
    capability = torch.cuda.get_device_capability()
    if capability < FP8_MIN_CAPABILITY:
        raise ConfigError(
            f"trainer.precision=fp8 needs compute capability ≥ 8.9 (H100, H200, L40S, RTX 4090); "
            f"{torch.cuda.get_device_name()} has {capability[0]}.{capability[1]}: use trainer.precision=bf16-mixed"
        )


def convert_fp8(model: nn.Module, recipe: str, skip: list[str] | None) -> list[str]:
    """Swap the selected Linear layers of ``model`` for torchao ``Float8Linear`` in place; returns their paths."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    converted = fp8_candidates(model, skip)
    convert_to_float8_training(model, module_filter_fn=fp8_filter(skip), config=Float8LinearConfig.from_recipe_name(recipe))
    return converted


def apply_fp8(cfg: DictConfig, model: nn.Module) -> dict | None:
    """With ``trainer.precision=fp8``: check the machine, convert ``model`` (before it is compiled) and return what
    was done, for the record; otherwise None."""
    if cfg.trainer.precision != FP8:
        return None
    check_fp8_runtime()
    skip = OmegaConf.to_container(cfg.fp8.skip) if cfg.fp8.skip is not None else None
    converted = convert_fp8(model, cfg.fp8.recipe, skip)
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    kept = [name for name in linears if name not in converted]
    log.info(
        "fp8 (%s): %d of %d Linear layers in float8; kept in bf16: %s",
        cfg.fp8.recipe,
        len(converted),
        len(linears),
        ", ".join(kept) or "none",
    )
    if not compile_enabled(cfg):
        log.warning("trainer.precision=fp8 without compile=true: torchao's float8 scaling is only fast when compiled")
    return {"recipe": cfg.fp8.recipe, "skip": skip, "converted": len(converted), "kept_bf16": kept}
