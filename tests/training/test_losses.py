import pytest
import torch
import torch.nn.functional as F

from mixbench.training.lit.losses import chunked_cross_entropy_sum


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_chunked_cross_entropy_matches_full_logits_in_value_and_gradients(chunk):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 9, 16, generator=g, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, requires_grad=True)
    labels = torch.randint(0, 50, (2, 9), generator=g)
    labels[0, :4] = -100
    ref = F.cross_entropy((hidden @ weight.t()).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    ref_grads = torch.autograd.grad(ref, (hidden, weight))
    ours = chunked_cross_entropy_sum(hidden, weight, labels, chunk)
    grads = torch.autograd.grad(ours, (hidden, weight))
    torch.testing.assert_close(ours, ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(chunked_cross_entropy_sum(hidden, weight, labels, chunk), ref)
