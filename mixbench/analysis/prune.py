"""Performance drop of removing one block (paper Eq. 9): ΔP(l) = P_pruned(l) − P_original."""

from __future__ import annotations

from contextlib import contextmanager

import torch.nn as nn


class SkippedBlock(nn.Module):
    """Stands in for a removed block: returns its input unchanged, whatever else the block takes."""

    def forward(self, x, *args, **kwargs):
        return x


@contextmanager
def skip_block(model, index: int):
    """Temporarily remove block ``index`` of ``model.blocks`` (an nn.ModuleList or nn.Sequential)."""
    original = model.blocks[index]
    model.blocks[index] = SkippedBlock()
    try:
        yield model
    finally:
        model.blocks[index] = original
