"""ViT speed options (model.attention_backend, the variants of bench/speed/vit_throughput.py) change kernels, not the model."""

import pytest
import timm
import torch
import torch.nn.functional as F

import mixbench
from mixbench.core.errors import ConfigError
from mixbench.training.config import compose

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def debug_vit(norm="mix", **options):
    return mixbench.build_model("vit_debug", norm=norm, seed=0, img_size=16, patch_size=8, **options)


def loss_and_grads(model, images):
    loss = F.cross_entropy(model(images), torch.arange(len(images)))
    return loss, torch.autograd.grad(loss, list(model.parameters()))


@pytest.mark.parametrize("norm", ["mix", mixbench.NormSpec(placement="pre", qk_norm="full")])
@pytest.mark.parametrize("backend", ["math", "flash"])  # the SDPA kernels a CPU has
def test_attention_backend_changes_the_kernel_not_the_model(norm, backend, rng):
    ref, ours = debug_vit(norm), debug_vit(norm, attention_backend=backend)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert all(block.attn.backend == backend for block in ours.blocks)
    images = torch.randn(2, 3, 16, 16, generator=rng)
    ref_loss, ref_grads = loss_and_grads(ref, images)
    loss, grads = loss_and_grads(ours, images)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_pinned_backend_is_the_only_one_tried(rng):
    images = torch.randn(1, 3, 16, 16, generator=rng)
    for norm in ("pre", mixbench.NormSpec(placement="pre", qk_norm="full")):  # timm's forward and ours
        with pytest.raises(RuntimeError, match="backend"):
            debug_vit(norm, attention_backend="cudnn")(images)  # no cuDNN attention for CPU tensors
    with pytest.raises(ConfigError, match="attention_backend"):
        debug_vit(attention_backend="fast")


def test_a_pinned_backend_compiles_without_a_graph_break(rng):
    ours = debug_vit(attention_backend="flash")
    images = torch.randn(2, 3, 16, 16, generator=rng)
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(images), debug_vit()(images), rtol=1e-5, atol=1e-6)


def test_pinned_backend_keeps_timm_weights_and_outputs(rng):
    ours = mixbench.build_model("vit_tiny", norm="pre", attention_backend="math").eval()
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    reference.load_state_dict(ours.state_dict())  # strict: same keys and shapes
    images = torch.randn(1, 3, 224, 224, generator=rng)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), reference(images), rtol=1e-4, atol=1e-5)


def test_attention_backend_is_a_model_setting():
    assert compose(["task=vit_small"]).model.attention_backend == "auto"
    assert compose(["task=vit_small", "model.attention_backend=cudnn"]).model.attention_backend == "cudnn"


# ------------------------------------------------------------------------------------------------ the bench


# ---------------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("backend", ["flash", "cudnn", "efficient"])
def test_attention_backends_agree_on_gpu(backend):
    from _support.cuda import require_sdpa_backend

    require_sdpa_backend(backend, batch=4, heads=2, seq=5, head_dim=16, causal=False)  # vit_debug on 16 px: 4 patches + class token
    images = torch.randn(4, 3, 16, 16, device="cuda")
    ref = debug_vit().cuda()
    ours = debug_vit(attention_backend=backend).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        expected = ref(images)
        got = ours(images)
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", ["vit_small", "llama_71m"])
def test_a_kernel_choice_does_not_split_a_table_cell(name):
    """Runs that differ only in model.attention_backend compute the same function: same model label (same table
    cell); an architecture option still shows."""
    from mixbench.training.run import model_label

    assert model_label(name, {"attention_backend": "cudnn"}) == name
    assert model_label(name, {"attention_backend": "cudnn", "num_layers": 3}) == f"{name}[num_layers=3]"
