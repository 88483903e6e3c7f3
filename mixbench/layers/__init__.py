"""Layers shared by every model family: the placement registry, the norm switch, norm factories, residual wiring."""
from .init import init_deepnorm_, scaled_init_
from .norm import norm_factory
from .placement import NORM_KINDS, NormSpec, layer_plan
from .placements import (
    BlockContext,
    BlockPlacement,
    NormConfigError,
    Placement,
    admin_omega_init,
    block_placements,
    deepnorm_constants,
    get_block_placement,
    get_placement,
    list_placements,
    num_post_layers,
    register_placement,
)
from .residual import PlacedResidual, init_placements_, placement_parameters

__all__ = [
    "NORM_KINDS",
    "BlockContext",
    "BlockPlacement",
    "NormConfigError",
    "NormSpec",
    "PlacedResidual",
    "Placement",
    "admin_omega_init",
    "block_placements",
    "deepnorm_constants",
    "get_block_placement",
    "get_placement",
    "init_deepnorm_",
    "init_placements_",
    "layer_plan",
    "list_placements",
    "norm_factory",
    "num_post_layers",
    "placement_parameters",
    "register_placement",
    "scaled_init_",
]
