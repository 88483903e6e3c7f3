"""``trainer.strategy``: any Lightning strategy name as given, ``ddp`` with its gradient-bucket settings, and ``fsdp``
built for transformers.

``ddp`` is Lightning's :class:`~lightning.pytorch.strategies.DDPStrategy` with the ``ddp.*`` settings handed to
``DistributedDataParallel`` (``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``; null keeps torch's default).

``fsdp`` is Lightning's :class:`~lightning.pytorch.strategies.FSDPStrategy` (keeping its root wrapper for the
evaluation after fit, :mod:`mixbench.training.lit.fsdp`) with each transformer block one FSDP
unit (``auto_wrap_policy``), optional activation checkpointing of the blocks, and, under ``bf16-mixed``
(also ``trainer.precision=fp8``), bf16 parameters for compute and all-gathers with gradients reduced in fp32 (fp32 sharded master weights).
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf

from ..core.errors import ConfigError
from .precision import lightning_precision

FSDP = "fsdp"
DDP = "ddp"
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
BF16_PRECISIONS = ("bf16-mixed", "bf16")


def check_strategy_settings(cfg: DictConfig) -> None:
    """Config-time checks of the ``ddp.*`` settings and of ``trainer.strategy=fsdp`` with its ``fsdp.*`` settings."""
    bucket = cfg.ddp.bucket_cap_mb
    if bucket is not None and (isinstance(bucket, bool) or not isinstance(bucket, (int, float)) or bucket <= 0):
        raise ConfigError(f"ddp.bucket_cap_mb must be a positive number of MB (or null for torch's 25), got {bucket!r}")
    for key in ("gradient_as_bucket_view", "static_graph"):
        if cfg.ddp[key] not in (None, True, False):
            raise ConfigError(f"ddp.{key} must be true, false or null, got {cfg.ddp[key]!r}")
    if cfg.trainer.strategy != FSDP:
        return
    if cfg.fsdp.sharding_strategy not in SHARDING_STRATEGIES:
        raise ConfigError(f"fsdp.sharding_strategy must be one of {', '.join(SHARDING_STRATEGIES)}, got {cfg.fsdp.sharding_strategy!r}")
    if cfg.save_weights:
        raise ConfigError(
            "trainer.strategy=fsdp shards the weights and mixbench does not gather them for model.safetensors: add save_weights=false"
        )


def fsdp_mixed_precision(precision):
    """FSDP's ``MixedPrecision`` for a bf16 run (bf16 parameters, fp32 gradient reduction, buffers such as the RoPE
    tables left as they are); None otherwise (Lightning derives it from the precision)."""
    if precision not in BF16_PRECISIONS:
        return None
    from torch.distributed.fsdp import MixedPrecision

    return MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=None)


def ddp_kwargs(cfg: DictConfig) -> dict:
    """The ``ddp.*`` settings that are set (not null), as ``DistributedDataParallel`` keyword arguments."""
    return {key: value for key, value in cfg.ddp.items() if value is not None}


def make_strategy(cfg: DictConfig, block_class: type | None, precision: str | None = None):
    """``trainer.strategy`` for ``lightning.Trainer``: the name as given; for ``ddp`` a DDPStrategy with the ``ddp.*``
    settings; for ``fsdp`` an FSDPStrategy sharding each ``block_class`` module (the model's transformer block).
    ``precision``: the one Lightning runs (default: :func:`mixbench.training.precision.lightning_precision` of ``trainer.precision``)."""
    if cfg.trainer.strategy == DDP:
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(**ddp_kwargs(cfg))
    if cfg.trainer.strategy != FSDP:
        return cfg.trainer.strategy
    if block_class is None:
        raise ConfigError("trainer.strategy=fsdp needs the model's transformer block class to shard by")
    # Lightning is imported where a trainer is built, so that composing configs (list, --print-config) stays light
    from .lit.fsdp import RootKeepingFSDPStrategy

    return RootKeepingFSDPStrategy(
        auto_wrap_policy={block_class},
        activation_checkpointing_policy={block_class} if cfg.fsdp.activation_checkpointing else None,
        sharding_strategy=cfg.fsdp.sharding_strategy,
        mixed_precision=fsdp_mixed_precision(precision or lightning_precision(cfg.trainer.precision, cfg.trainer.accelerator)),
        use_orig_params=True,  # needed by torch.compile and by per-parameter optimizer groups
    )


def world_size(trainer_cfg: DictConfig) -> int:
    devices = trainer_cfg.devices
    if isinstance(devices, int) and devices > 0:
        per_node = devices
    elif isinstance(devices, (list, tuple)) or OmegaConf.is_list(devices):
        per_node = len(devices)
    else:  # "auto" / -1
        per_node = max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1
    return per_node * int(trainer_cfg.num_nodes)


def accumulation_steps(global_batch: int | None, micro_batch: int, world: int) -> int:
    """Gradient accumulation that turns ``micro_batch`` per device on ``world`` devices into ``global_batch``."""
    if global_batch is None:
        return 1
    if global_batch % (micro_batch * world):
        raise ConfigError(
            f"data.global_batch_size={global_batch} is not a multiple of data.batch_size={micro_batch} × {world} device(s); "
            "change data.batch_size (the per-device micro-batch)"
        )
    return global_batch // (micro_batch * world)


def val_check_batches(interval: int | float | None, accumulation: int) -> int | float | None:
    """Lightning's ``val_check_interval`` for mixbench's: an int counts optimizer steps in mixbench (as ``max_steps``
    and ``log_every_n_steps`` do) but training batches in Lightning, so it is multiplied by the gradient accumulation
    (without that, 764 steps at ``trainer.val_check_interval=191`` and 2 micro-batches a step validate every 95.5 steps);
    a float (a share of an epoch) or None is Lightning's as it is."""
    if isinstance(interval, bool) or not isinstance(interval, int):
        return interval
    return interval * accumulation
