"""Models by preset name, through the family registry (:mod:`mixbench.core.families`).  Importing this package (and
its light modules of presets, :mod:`~mixbench.models.llama_config`, :mod:`~mixbench.models.vit_config`) imports no torch.

``mixbench.build_model("llama_71m", norm="mix", num_layers=24)`` works for every registered family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.families import family_of_model, list_models

if TYPE_CHECKING:
    from ..layers import NormSpec


def model_family(name: str) -> str:
    """The family name of preset ``name``."""
    return family_of_model(name).name


def model_defaults(name: str) -> dict:
    """The architecture options of ``name`` (all overridable as ``model.<key>=...``)."""
    return family_of_model(name).model_defaults(name)


def build_model(name: str, norm: str | NormSpec = "pre", alpha: float = 0.25, seed: int | None = None, **overrides):
    """Build model ``name`` with norm placement ``norm`` (a name or a :class:`NormSpec`).

    Extra keyword arguments override architecture options, e.g. ``num_layers=24``.
    ``seed`` (optional) seeds torch before construction, so the same seed gives the same weights
    for every placement (except placements with an init of their own, such as DeepNorm).
    The model is checked against :class:`mixbench.core.contracts.PlacedModel` and its family's needs.
    """
    from ..core.contracts import PlacedBlock, PlacedModel, check_contract  # torch: imported when a model is built
    from ..layers import NormSpec

    spec = norm if isinstance(norm, NormSpec) else NormSpec(placement=norm, alpha=alpha)
    family = family_of_model(name)
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    model = family.build(name, spec, **overrides)
    check_contract(model, PlacedModel, f"model {name!r} of family {family.name!r}", family.model_requires)
    check_contract(model.blocks[0], PlacedBlock, f"a block of model {name!r}")
    return model


__all__ = ["build_model", "list_models", "model_defaults", "model_family"]
