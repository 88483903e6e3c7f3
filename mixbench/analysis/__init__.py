"""Layer analyses of the Mix-LN paper: per-block gradient norms (Fig. 3e / 6a), angular distance between
block inputs (Eq. 8, Fig. 2-3, 5) and the performance drop of skipping one block (Eq. 9, Fig. 2-3, 6b).
They work on the real architecture of every placement, for both model families.

Importing this package imports no torch: each name is imported from its module on first use.
"""

from __future__ import annotations

from ..core.lazy import lazy_attributes

_PUBLIC = {  # name → the module that defines it
    "GradNormMonitor": "..training.gradnorm",
    "angular_distance": ".angular",
    "angular_distance_matrix": ".angular",
    "block_grad_norms": "..training.gradnorm",
    "skip_block": ".prune",
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
