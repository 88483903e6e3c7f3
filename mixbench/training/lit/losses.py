"""Summed cross-entropy of an LM head, by implementation (``loss.impl``).

For hidden states h (N, H), head weight W (V, H) and targets y: loss_sum = Σ_i [logsumexp(W h_i) − (W h_i)_{y_i}]
over non-ignored i (y_i = −100 is ignored).  Every implementation computes this sum:

* ``torch``: full logits (compute dtype, up-cast to fp32) and ``F.cross_entropy``;
* ``chunked``: pure PyTorch in chunks of tokens — the gradients (softmax − onehot) are formed chunk by chunk in
  the forward pass (as Liger's fused linear cross-entropy does), so memory is O(chunk × V) instead of O(N × V);
* ``liger``: liger-kernel's fused linear cross-entropy (Triton; ``pip install 'mixbench[kernels]'``);
* ``cce``: Apple's Cut Cross-Entropy (Triton, never materializes the logits; exact: no gradient filtering).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from ...core.constants import IGNORE_INDEX

LOSS_IMPLS = ("torch", "chunked", "liger", "cce")
DEFAULT_CHUNK_SIZE = 8192


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
    return sum(
        _chunk_terms(hidden[s : s + chunk_size].to(dtype), w, labels[s : s + chunk_size])[-1] for s in range(0, len(labels), chunk_size)
    )


def _kernel_module(name: str, package: str):
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(f"{package} is not installed: pip install 'mixbench[kernels]' (needs a CUDA GPU)") from err


def linear_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, impl: str = "torch", chunk_size: int | None = None
) -> torch.Tensor:
    """Summed next-token cross-entropy of ``hidden @ weight.T`` against ``labels`` (−100 ignored) by ``impl``
    (one of :data:`LOSS_IMPLS`); matmuls in the autocast dtype when autocast is on, the loss in fp32."""
    if impl not in LOSS_IMPLS:
        raise ValueError(f"unknown loss implementation {impl!r}; valid: {', '.join(LOSS_IMPLS)}")
    if impl == "chunked":
        return chunked_cross_entropy_sum(hidden, weight, labels, chunk_size or DEFAULT_CHUNK_SIZE)
    dtype = _compute_dtype(weight)
    h, w, y = hidden.reshape(-1, hidden.shape[-1]).to(dtype), weight.to(dtype), labels.reshape(-1)
    if impl == "torch":
        return F.cross_entropy((h @ w.t()).float(), y, ignore_index=IGNORE_INDEX, reduction="sum")
    if impl == "liger":
        liger = _kernel_module("liger_kernel.transformers.fused_linear_cross_entropy", "liger-kernel")
        return liger.LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")(w, h, y).float()
    cce = _kernel_module("cut_cross_entropy", "cut-cross-entropy")
    return cce.linear_cross_entropy(h, w, y, ignore_index=IGNORE_INDEX, reduction="sum", filter_eps=None).float()
