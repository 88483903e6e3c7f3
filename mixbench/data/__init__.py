"""Data modules by name (the ``data.loader`` config key), imported lazily.

A task plugin may add its own with :func:`register_datamodule`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..core.errors import ConfigError, did_you_mean

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"

_DATAMODULES: dict[str, str] = {
    "cifar10": "mixbench.data.images:CifarArrayDataModule",
    "text": "mixbench.data.text:TextDataModule",
    "image_folder": "mixbench.data.folders:ImageFolderDataModule",
    "instruction": "mixbench.sft.data:InstructionDataModule",
    "preferences": "mixbench.rlhf.data:PreferenceDataModule",
    "prompts": "mixbench.rlhf.data:PromptDataModule",
}


def register_datamodule(name: str, target: str) -> None:
    """Register ``"module:attr"`` under ``name``; re-registering a different target is an error."""
    if name in _DATAMODULES and _DATAMODULES[name] != target:
        raise ValueError(f"data loader {name!r} is already registered as {_DATAMODULES[name]}")
    _DATAMODULES[name] = target


def list_datamodules() -> list[str]:
    return sorted(_DATAMODULES)


def get_datamodule_class(name: str):
    if name not in _DATAMODULES:
        raise ConfigError(f"unknown data loader {name!r}{did_you_mean(name, _DATAMODULES)} Valid: {', '.join(list_datamodules())}")
    module, attr = _DATAMODULES[name].split(":")
    return getattr(importlib.import_module(module), attr)
