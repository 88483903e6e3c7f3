"""Layers shared by every model family: the norm-placement switch, norm factories, residual wiring."""
from .init import init_deepnorm_, scaled_init_
from .norm import norm_factory
from .placement import (
    BLOCK_PLACEMENTS,
    MODEL_PLACEMENTS,
    NORM_KINDS,
    NormConfigError,
    NormSpec,
    admin_omega_init,
    deepnorm_constants,
    layer_plan,
    num_post_layers,
)
from .residual import PlacedResidual, apply_placement

__all__ = [
    "BLOCK_PLACEMENTS",
    "MODEL_PLACEMENTS",
    "NORM_KINDS",
    "NormConfigError",
    "NormSpec",
    "PlacedResidual",
    "apply_placement",
    "deepnorm_constants",
    "init_deepnorm_",
    "scaled_init_",
    "admin_omega_init",
    "layer_plan",
    "norm_factory",
    "num_post_layers",
]
