"""Angular distance between block inputs (paper Eq. 8): d(x^l, x^{l+n}) = arccos(cos(x^l, x^{l+n})) / π per token,
averaged over every token of a token budget.  x^l is the input of block l (x^L: the last block's output)."""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from ..core.constants import ANGULAR_TOKENS


def angular_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row angular distance in [0, 1] between vectors a and b (..., d)."""
    cos = torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-12).clamp(-1.0, 1.0)
    return torch.arccos(cos) / math.pi


@contextmanager
def capture_block_inputs(blocks):
    """Collect the input of every block and the output of the last one during a forward pass."""
    states: list[torch.Tensor] = []
    hooks = [block.register_forward_pre_hook(lambda m, args: states.append(args[0].detach())) for block in blocks]
    hooks.append(blocks[-1].register_forward_hook(lambda m, args, out: states.append(out.detach())))
    try:
        yield states
    finally:
        for h in hooks:
            h.remove()


class AngularAccumulator:
    """Sums d(x^l, x^{l+n}) over tokens for all l and n ≥ 1; ``mean()`` gives the (L, L) matrix
    ``D[n-1, l]`` (NaN where l + n > L)."""

    def __init__(self, num_layers: int):
        self.L = num_layers
        self.sums = torch.zeros(num_layers, num_layers + 1, dtype=torch.float64)
        self.tokens = 0

    def add(self, states: list[torch.Tensor], mask: torch.Tensor | None = None) -> None:
        h = torch.stack([s.reshape(-1, s.shape[-1]) for s in states])  # (L+1, tokens, d)
        if mask is not None:
            h = h[:, mask.reshape(-1)]
        h = torch.nn.functional.normalize(h.float(), dim=-1)
        for n in range(1, self.L + 1):
            cos = (h[:-n] * h[n:]).sum(-1).clamp(-1.0, 1.0)  # (L+1-n, tokens)
            self.sums[n - 1, : self.L + 1 - n] += (torch.arccos(cos) / math.pi).sum(-1).double().cpu()
        self.tokens += h.shape[1]

    def mean(self) -> torch.Tensor:
        out = self.sums / max(self.tokens, 1)
        for n in range(1, self.L + 1):
            out[n - 1, self.L + 1 - n :] = float("nan")
        return out[:, : self.L]


def angular_distance_matrix(model, batches, token_budget: int = ANGULAR_TOKENS, forward=None) -> tuple[torch.Tensor, int]:
    """Run ``batches`` (``(inputs, mask)`` pairs) through ``model`` until ``token_budget`` tokens; returns (D, tokens)."""
    acc = AngularAccumulator(len(model.blocks))
    forward = forward or model
    with torch.no_grad():
        for inputs, mask in batches:
            with capture_block_inputs(model.blocks) as states:
                forward(inputs)
            acc.add(states, mask)
            if acc.tokens >= token_budget:
                break
    return acc.mean(), acc.tokens
