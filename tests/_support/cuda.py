"""What a GPU test may skip for: a kernel this torch build or card lacks, asked of torch itself before the model runs
(so an error from the model is a failure, never a skip)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from mixbench.layers.attention import SDPA_BACKENDS


def require_sdpa_backend(backend: str, batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> None:
    """Skip unless a bare SDPA call in bf16 of this shape runs on ``backend`` (flash | cudnn | efficient | math)."""
    q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel([SDPA_BACKENDS[backend]]):
            F.scaled_dot_product_attention(q, q, q, is_causal=causal)
    except RuntimeError as err:  # e.g. no cuDNN attention in this build
        pytest.skip(f"{backend} attention unavailable here: {err}")
