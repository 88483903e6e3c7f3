"""What a model, its blocks and a data module must offer the core — written down as ``typing.Protocol``s.

:func:`check_contract` lists every missing member at once, so a plugin author sees one clear error
(``build_model`` and the data-module factory call it).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch.nn as nn

from .errors import ConfigError


class ContractError(ConfigError):
    """A model or data module lacks what the core needs."""


@runtime_checkable
class PlacedBlock(Protocol):
    """One transformer block (a :class:`mixbench.layers.PlacedResidual`): the placement switch and the
    analyses rely on these names (gradient norms group ``attn.*``/``norm1`` vs ``mlp.*``/``norm2``)."""

    placement: str
    norm1: nn.Module
    norm2: nn.Module
    attn: nn.Module  # with .qkv (fused q, k, v rows) and .proj
    mlp: nn.Module  # with .fc1 and .fc2


@runtime_checkable
class PlacedModel(Protocol):
    """A model of any family: its blocks (hooked by the analyses, skipped by layer pruning), the per-block
    placement plan and the :class:`~mixbench.layers.NormSpec` it was built with."""

    blocks: nn.ModuleList
    plan: list
    norm_spec: Any


@runtime_checkable
class BenchDataModule(Protocol):
    """A Lightning data module the runner can use: ``describe()`` gives the dataset's name, label and sizes
    for the result record; ``batch_size`` is the per-device micro-batch."""

    batch_size: int

    def setup(self, stage: str | None = None) -> None: ...

    def train_dataloader(self) -> Any: ...

    def val_dataloader(self) -> Any: ...

    def describe(self) -> dict: ...


def protocol_members(protocol: type) -> list[str]:
    """Attribute and method names a Protocol declares (its own and its bases')."""
    names: list[str] = []
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        names += list(getattr(klass, "__annotations__", {}))
        names += [k for k, v in vars(klass).items() if callable(v) and not k.startswith("_")]
    return list(dict.fromkeys(names))


def check_contract(obj: Any, protocol: type, what: str, extra: tuple[str, ...] = ()) -> None:
    """Raise :class:`ContractError` naming every member of ``protocol`` (plus ``extra`` names) that ``obj`` lacks."""
    missing = [name for name in (*protocol_members(protocol), *extra) if not hasattr(obj, name)]
    if missing:
        raise ContractError(
            f"{what} ({type(obj).__module__}.{type(obj).__qualname__}) lacks {', '.join(missing)} "
            f"required by {protocol.__name__} (see mixbench/contracts.py)"
        )
