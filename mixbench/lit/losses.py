"""Cross-entropy of an LM head computed in chunks, so the (tokens × vocab) logits never exist at once.

For hidden states h (N, H), head weight W (V, H) and targets y: loss_sum = Σ_i [logsumexp(W h_i) − (W h_i)_{y_i}]
over non-ignored i.  The gradients (softmax − onehot) are formed chunk by chunk in the forward pass
(as Liger's fused linear cross-entropy does), so memory is O(chunk × V) instead of O(N × V).
"""
from __future__ import annotations

import torch

from ..constants import IGNORE_INDEX


def _compute_dtype(weight: torch.Tensor) -> torch.dtype:
    return torch.get_autocast_dtype(weight.device.type) if torch.is_autocast_enabled(weight.device.type) else weight.dtype


def _chunk_terms(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor):
    logits = (h @ weight.t()).float()
    valid = labels != IGNORE_INDEX
    target = labels.clamp(min=0)
    lse = torch.logsumexp(logits, dim=-1)
    loss = ((lse - logits.gather(1, target[:, None]).squeeze(1)) * valid).sum()
    return logits, lse, valid, target, loss


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size: int):
        dtype = _compute_dtype(weight)
        h_all, w = hidden.to(dtype), weight.to(dtype)
        grad_hidden = torch.empty_like(h_all)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, h_all.shape[0], chunk_size):
            h, y = h_all[start : start + chunk_size], labels[start : start + chunk_size]
            logits, lse, valid, target, loss = _chunk_terms(h, w, y)
            total += loss
            grad_logits = torch.exp(logits - lse[:, None])
            grad_logits[torch.arange(len(y), device=y.device), target] -= 1.0
            grad_logits = (grad_logits * valid[:, None]).to(dtype)
            grad_hidden[start : start + chunk_size] = grad_logits @ w
            grad_weight += (grad_logits.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return total

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (grad_hidden * grad_output).to(ctx.dtypes[0]), (grad_weight * grad_output).to(ctx.dtypes[1]), None, None


def chunked_cross_entropy_sum(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Summed next-token cross-entropy of ``hidden @ weight.T`` against ``labels`` (−100 ignored)."""
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk_size)
    dtype = _compute_dtype(weight)
    w = weight.to(dtype)
    return sum(_chunk_terms(hidden[s : s + chunk_size].to(dtype), w, labels[s : s + chunk_size])[-1] for s in range(0, len(labels), chunk_size))
