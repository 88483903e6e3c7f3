"""``compile.enabled`` / ``compile.mode``: ``torch.compile`` of the model, the way Lightning intends it.

The model (the ``nn.Module`` the LightningModule holds, not the LightningModule) is compiled in place with
``nn.Module.compile(mode=...)`` before ``trainer.fit``: ``self.log`` and the metric updates stay outside the
compiled region, the optimizer step stays eager, and checkpoint keys stay those of the plain model (no ``_orig_mod.``).

``compile.scope=blocks`` compiles each transformer block instead of the whole model (regional compilation, PyTorch's
recipe for repeated blocks): the block's code is traced and compiled once and every block reuses it, so a 24-block
model compiles about as fast as a one-block one; the embedding, final norm and head run eagerly.  ``model`` (default)
compiles everything as one graph.

``compile=true`` (the original boolean setting) is short for ``compile.enabled=true``; a config saved before the
group existed (``compile: true``) reads the same way.  Setting ``compile.mode`` compiles too.

Modes that replay CUDA graphs (``reduce-overhead``, ``max-autotune``) need the step boundaries marked: a graph's
outputs live in memory that its next replay overwrites.  :class:`~mixbench.training.graph_marker.CudaGraphStepMarker` calls
``torch.compiler.cudagraph_mark_step_begin()`` before every training and validation batch, so each Lightning step is one
graph "iteration"; what the LightningModules keep across steps is computed outside the graph (the loss divided by
the token count, the soft-target cross-entropy, ``loss.detach()`` in the divergence monitor), never an output of it.
The model EMA (``ema.decay``) is a deep copy that runs eagerly and reads the parameters, which the graphs take as
static inputs.  The training loaders drop their last partial batch, so one shape is captured for training; the
validation set's last, smaller batch gets a graph of its own.
"""

from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig

from ..core.errors import ConfigError

log = logging.getLogger(__name__)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
COMPILE_SCOPES = ("model", "blocks")
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


def upgrade_compile(node) -> None:
    """In place: a boolean ``compile`` (the setting before ``compile.mode`` existed) becomes ``{enabled: <bool>}``.
    ``node`` is a config mapping (a task recipe, a saved config.yaml)."""
    if node is not None and "compile" in node and isinstance(node["compile"], bool):
        node["compile"] = {"enabled": node["compile"]}


def check_compile_settings(cfg: DictConfig) -> None:
    mode = cfg.compile.mode
    if mode is not None and mode not in COMPILE_MODES:
        raise ConfigError(f"unknown compile.mode={mode!r}; valid: {', '.join(COMPILE_MODES)} (or null: torch's default)")
    scope = cfg.compile.get("scope", "model")
    if scope not in COMPILE_SCOPES:
        raise ConfigError(f"unknown compile.scope={scope!r}; valid: model (the whole model) or blocks (each block: regional compilation)")


def compile_enabled(cfg: DictConfig) -> bool:
    return bool(cfg.compile.enabled or cfg.compile.mode is not None)


def uses_cudagraphs(cfg: DictConfig) -> bool:
    return compile_enabled(cfg) and cfg.compile.mode in CUDAGRAPH_MODES


def compile_model(cfg: DictConfig, model: torch.nn.Module) -> dict | None:
    """Compile ``model`` in place as ``cfg.compile`` says; returns what was done (for the record) or None."""
    if not compile_enabled(cfg):
        return None
    mode = cfg.compile.mode
    options = {"mode": mode} if mode is not None else {}
    scope = cfg.compile.get("scope", "model")
    if scope == "blocks":  # regional compilation: the repeated block is compiled once and its code reused by every block
        for block in model.blocks:
            block.compile(**options)
    else:
        model.compile(**options)
    cudagraphs = uses_cudagraphs(cfg)
    if cudagraphs and cfg.trainer.accelerator == "cpu":
        log.warning("compile.mode=%s captures CUDA graphs, which a CPU run does not use: it compiles without them", mode)
    return {"mode": mode or "default", "cudagraphs": cudagraphs, "scope": scope}
