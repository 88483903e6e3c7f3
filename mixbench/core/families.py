"""The family registry: everything the core needs to know about a kind of model, in one spec per family.

A :class:`Family` bundles the model presets and their builder, the LightningModule factory, model options
inferred from the data, the unit of throughput (items and FLOPs per item), the sampler policy, the loss and
inputs the layer analyses use, and a check of the final metrics.  Tasks name their family in ``task.yaml``;
a task's ``task.py`` may :func:`register_family` a new one (in the manner of timm's ``@register_model`` and
torchtitan's train specs).  The core never branches on a family's name.

Built in: ``lm`` (LLaMA causal language models, :mod:`mixbench.families.lm`) and ``vision`` (timm ViTs,
:mod:`mixbench.families.vision`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, did_you_mean


def _none(*args, **kwargs):
    return None


def _unchanged(cfg, options, *args):
    return options


@dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        name: the name tasks use (``family: <name>``).
        description: one line for ``mixbench list``.
        models: preset name → its default architecture options (every key overridable as ``model.<key>``).
        build: ``build(preset, norm_spec, **options) -> nn.Module`` satisfying :class:`mixbench.core.contracts.PlacedModel`.
        lightning_module: ``(cfg, model, datamodule) -> LightningModule`` (training/validation steps, metrics).
        options_from_data: ``(cfg, options, datamodule) -> options``: fill options the data decides (e.g. a ViT's
            image size), failing with a clear error where an option that was set does not fit the data.
        data_options: ``(cfg, options) -> options``: adjust the data module's arguments before it is built.
        items: ``(batch) -> int``: items of a micro-batch for throughput (``item_name``: tokens, images, ...).
        flops_per_item: ``(cfg, model) -> float | None``: training FLOPs of one item (MFU); None if unknown.
        distributed_sampler: let Lightning insert a DistributedSampler (False: the data module shards by rank).
        analysis_loss: ``(model, batch) -> scalar loss`` for gradient-norm analyses (batch on the device).
        analysis_inputs: ``(batch) -> (model input, token mask or None)`` for the angular-distance analysis.
        learning_floor: ``(datamodule) -> floor | None``: what a model that learned nothing scores on this data
            (e.g. ``{"val/loss": unigram entropy}`` for an LM, ln C and the chance top-1 for a classifier); stored in
            the record as ``learning_floor``.
        learning_check: ``(metrics, floor) -> reason | None``: a run whose final metrics did not beat ``floor`` (it
            never beat chance) is recorded as ``stalled`` with this reason.
        record_floor: ``(record) -> floor | None``: the floor of a record written before floors were stored
            (``mixbench reclassify``).
        check_config: ``(cfg) -> None``: raise a ConfigError for settings this family cannot run (at compose time).
        data_requires / model_requires: attributes this family needs beyond the common contracts.
    """

    name: str
    description: str
    models: dict[str, Callable[[], dict]]
    build: Callable[..., Any]
    lightning_module: Callable[..., Any]
    items: Callable[[Any], int]
    analysis_loss: Callable[..., Any]
    analysis_inputs: Callable[[Any], tuple]
    item_name: str = "items"
    options_from_data: Callable[..., dict] = _unchanged
    data_options: Callable[..., dict] = _unchanged
    flops_per_item: Callable[..., float | None] = _none
    distributed_sampler: bool = True
    learning_floor: Callable[..., dict | None] = _none
    learning_check: Callable[..., str | None] = _none
    record_floor: Callable[..., dict | None] = _none
    check_config: Callable[..., None] = _none
    data_requires: tuple[str, ...] = ()
    model_requires: tuple[str, ...] = field(default=())

    def model_defaults(self, preset: str) -> dict:
        return dict(self.models[preset]())


_FAMILIES: dict[str, Family] = {}
_BUILTIN = {"lm": "mixbench.families.lm", "vision": "mixbench.families.vision"}


def register_family(family: Family) -> Family:
    """Register ``family`` (re-registering the same name with other models is an error)."""
    existing = _FAMILIES.get(family.name)
    if existing is not None and set(existing.models) != set(family.models):
        raise ValueError(f"model family {family.name!r} is already registered")
    for preset in family.models:
        owner = next((f.name for f in _FAMILIES.values() if preset in f.models and f.name != family.name), None)
        if owner:
            raise ValueError(f"model {preset!r} of family {family.name!r} is already a model of family {owner!r}")
    _FAMILIES[family.name] = family
    return family


def _load_builtin() -> None:
    for module in _BUILTIN.values():
        importlib.import_module(module)


def list_families() -> list[str]:
    _load_builtin()
    return list(_FAMILIES)


def get_family(name: str) -> Family:
    _load_builtin()
    if name not in _FAMILIES:
        raise ConfigError(
            f"unknown model family {name!r}{did_you_mean(name, _FAMILIES)}; registered: {', '.join(_FAMILIES)} (a task's "
            "task.py may register one with mixbench.families.register_family)"
        )
    return _FAMILIES[name]


def list_models() -> list[str]:
    _load_builtin()
    return [preset for family in _FAMILIES.values() for preset in family.models]


def family_of_model(preset: str) -> Family:
    _load_builtin()
    for family in _FAMILIES.values():
        if preset in family.models:
            return family
    raise ConfigError(f"unknown model {preset!r}{did_you_mean(preset, list_models())} Valid: {', '.join(list_models())}")
