"""Model registry: every model name, its family and its default architecture options.

Model code is imported lazily so that ``mixbench list`` and config validation stay fast.
"""
from __future__ import annotations

import difflib

from ..errors import ConfigError
from ..layers import NormSpec

LM_MODELS = ("llama_71m", "llama_130m", "llama_250m", "llama_350m", "llama_1b", "llama_7b", "llama_tiny", "llama_debug")
VISION_MODELS = ("vit_tiny", "vit_small", "vit_debug")


def list_models() -> list[str]:
    return [*LM_MODELS, *VISION_MODELS]


def model_family(name: str) -> str:
    if name in LM_MODELS:
        return "lm"
    if name in VISION_MODELS:
        return "vision"
    hint = difflib.get_close_matches(name, list_models(), n=1)
    raise ConfigError(
        f"unknown model {name!r}"
        + (f" — did you mean {hint[0]!r}?" if hint else "")
        + f" Valid: {', '.join(list_models())}"
    )


def model_defaults(name: str) -> dict:
    """The architecture options of ``name`` (all overridable as ``model.<key>=...``)."""
    if model_family(name) == "lm":
        from .llama import llama_defaults

        return llama_defaults(name)
    from .vit import vit_defaults

    return vit_defaults(name)


def build_model(name: str, norm: str | NormSpec = "pre", alpha: float = 0.25, seed: int | None = None, **overrides):
    """Build model ``name`` with norm placement ``norm`` (a name or a :class:`NormSpec`).

    Extra keyword arguments override architecture options, e.g. ``num_layers=24``.
    ``seed`` (optional) seeds torch before construction, so the same seed gives the same weights
    for every placement (except DeepNorm's own init).
    """
    spec = norm if isinstance(norm, NormSpec) else NormSpec(placement=norm, alpha=alpha)
    family = model_family(name)
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if family == "lm":
        from .llama import build_llama

        return build_llama(name, spec, **overrides)
    from .vit import build_vit

    return build_vit(name, spec, **overrides)


__all__ = ["LM_MODELS", "VISION_MODELS", "build_model", "list_models", "model_defaults", "model_family"]
