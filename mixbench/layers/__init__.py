"""Layers shared by every model family: the placement registry, the norm switch, norm factories, residual wiring,
norms inside attention (QK-norm, QKV-norm)."""

from .attention import add_qk_norm, add_qkv_norm, project_qkv
from .init import deepnorm_constants, init_deepnorm_, scaled_init_
from .norm import NORM_KINDS, NORM_POSITIONS, DyT, NormConfigError, by_position, dyt_factory, norm_factory
from .placement import NormSpec, layer_plan
from .placements import (
    BlockContext,
    BlockPlacement,
    Placement,
    admin_omega_init,
    block_placements,
    dyt_llm_alpha0,
    get_block_placement,
    get_placement,
    list_placements,
    num_post_layers,
    profile_admin,
    register_placement,
)
from .residual import PlacedResidual, init_placements_, option_parameters, placement_parameters

__all__ = [
    "NORM_KINDS",
    "NORM_POSITIONS",
    "BlockContext",
    "BlockPlacement",
    "DyT",
    "NormConfigError",
    "NormSpec",
    "PlacedResidual",
    "Placement",
    "add_qk_norm",
    "add_qkv_norm",
    "admin_omega_init",
    "block_placements",
    "by_position",
    "deepnorm_constants",
    "dyt_factory",
    "dyt_llm_alpha0",
    "get_block_placement",
    "get_placement",
    "init_deepnorm_",
    "init_placements_",
    "layer_plan",
    "list_placements",
    "norm_factory",
    "num_post_layers",
    "option_parameters",
    "placement_parameters",
    "profile_admin",
    "project_qkv",
    "register_placement",
    "scaled_init_",
]
