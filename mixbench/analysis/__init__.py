"""Layer analyses of the Mix-LN paper: per-block gradient norms (Fig. 3e / 6a), angular distance between
block inputs (Eq. 8, Fig. 2-3, 5) and the performance drop of skipping one block (Eq. 9, Fig. 2-3, 6b).
They work on the real architecture of every placement, for both model families."""

from ..training.gradnorm import GradNormMonitor, block_grad_norms
from .angular import angular_distance, angular_distance_matrix
from .prune import skip_block

__all__ = ["GradNormMonitor", "angular_distance", "angular_distance_matrix", "block_grad_norms", "skip_block"]
