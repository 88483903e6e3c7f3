"""``set_grad_checkpointing`` (timm's switch, shared by the LLaMA model): the blocks' activations are recomputed in the
backward pass instead of kept — the same loss and gradients, far fewer tensors saved for the backward."""

import pytest
import torch

from mixbench.models import build_model


def saved_tensors_and_grads(model, loss_of):
    """The loss, each parameter's gradient, and how many tensors autograd saved for the backward pass."""
    saved = 0

    def count(tensor):
        nonlocal saved
        saved += 1
        return tensor

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(count, lambda tensor: tensor):
        loss = loss_of(model)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}, saved


def llama_loss(model):
    torch.manual_seed(1)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 16))
    return model(ids, labels=ids) / ids.numel()


def llama_masked_loss(model):
    """The policy's forward in RLHF (left-padded prompts and responses: ``forward_masked``)."""
    torch.manual_seed(1)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # row 0: five pad tokens on the left
    return model.head(model.forward_masked(ids, mask)).logsumexp(-1).mean()


def vit_loss(model):
    torch.manual_seed(1)
    images = torch.randn(2, 3, 32, 32)
    torch.manual_seed(2)  # the stochastic depth draws (recomputed with the same RNG state)
    return model(images).logsumexp(-1).mean()


@pytest.mark.parametrize(
    "name, options, loss_of",
    [
        ("llama_debug", {"vocab_size": 256}, llama_loss),
        ("llama_debug", {"vocab_size": 256}, llama_masked_loss),
        ("vit_debug", {"img_size": 32, "num_classes": 10, "drop_path_rate": 0.2}, vit_loss),
    ],
)
@pytest.mark.parametrize("norm", ["pre", "mix", "post"])
def test_recomputed_blocks_give_the_same_gradients_and_keep_fewer_tensors(name, options, loss_of, norm):
    model = build_model(name, norm=norm, seed=0, **options).train()
    kept_loss, kept_grads, kept_saved = saved_tensors_and_grads(model, loss_of)
    model.set_grad_checkpointing(True)
    loss, grads, saved = saved_tensors_and_grads(model, loss_of)
    assert torch.equal(loss, kept_loss) and grads.keys() == kept_grads.keys()
    for key, grad in grads.items():
        torch.testing.assert_close(grad, kept_grads[key], rtol=1e-5, atol=1e-7, msg=key)
    assert saved < kept_saved / 2, (saved, kept_saved)  # a block's input instead of all its intermediates


def test_only_a_forward_that_records_gradients_checkpoints_its_blocks(monkeypatch):
    """Validation (``no_grad``) runs the blocks directly: nothing to recompute for."""
    from mixbench.models import llama

    calls = []
    monkeypatch.setattr(llama, "checkpoint", lambda block, *args, **kwargs: calls.append(block) or block(*args))
    model = build_model("llama_debug", norm="mix", seed=0, vocab_size=256)
    ids = torch.randint(0, 256, (2, 8))
    model(ids)
    assert calls == []  # switched off: no block checkpointed
    model.set_grad_checkpointing(True)
    with torch.no_grad():
        model(ids)
    assert calls == []
    model(ids)
    assert calls == list(model.blocks)
    calls.clear()
    model.forward_masked(ids, torch.ones_like(ids), model.new_cache(8))  # a KV cache: each block runs once, as it is
    assert calls == []


@pytest.mark.slow
def test_recomputed_blocks_compiled_one_by_one_give_the_same_gradients():
    """``compile.scope=blocks`` with ``activation_checkpointing=true``: each compiled block runs again inside the
    backward pass (the 1B ladder run's settings on an 80 GB card)."""
    import torch._dynamo

    torch._dynamo.reset()
    model = build_model("llama_debug", norm="mix", seed=0, vocab_size=256).train()
    _, eager_grads, _ = saved_tensors_and_grads(model, llama_loss)
    for block in model.blocks:
        block.compile()
    model.set_grad_checkpointing(True)
    loss, grads, _ = saved_tensors_and_grads(model, llama_loss)
    for key, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[key], rtol=1e-4, atol=1e-6, msg=key)
