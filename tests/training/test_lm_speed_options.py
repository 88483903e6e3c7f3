"""LLaMA speed options (loss.impl, model.attention_backend, the bench's liger layers) compute what the reference computes."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import mixbench
from mixbench.core.errors import ConfigError
from mixbench.training.config import compose
from mixbench.training.lit import CausalLMModule, OptimConfig
from mixbench.training.lit.lm import causal_lm_loss_sum
from mixbench.training.lit.losses import linear_cross_entropy_sum

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def head_problem(device="cpu", n=37, hidden=16, vocab=50):
    g = torch.Generator(device).manual_seed(0)
    h = torch.randn(n, hidden, generator=g, device=device, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=g, device=device, requires_grad=True)
    y = torch.randint(0, vocab, (n,), generator=g, device=device)
    y[:5] = -100
    return h, w, y


def reference_sum(h, w, y):
    return F.cross_entropy((h.float() @ w.float().t()), y, ignore_index=-100, reduction="sum")


@pytest.mark.parametrize("impl,chunk", [("torch", None), ("chunked", 8), ("chunked", None)])
def test_pure_pytorch_losses_are_the_summed_token_nll_with_its_gradients(impl, chunk):
    h, w, y = head_problem()
    ref = reference_sum(h, w, y)
    ref_grads = torch.autograd.grad(ref, (h, w))
    ours = linear_cross_entropy_sum(h, w, y, impl, chunk)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(torch.autograd.grad(ours, (h, w)), ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # the mean token NLL (what training logs) is sum / count of non-ignored targets
    torch.testing.assert_close(ours / (y != -100).sum(), F.cross_entropy(h @ w.t(), y, ignore_index=-100))


def test_unknown_loss_impl_fails():
    h, w, y = head_problem()
    with pytest.raises(ValueError, match="unknown loss implementation"):
        linear_cross_entropy_sum(h, w, y, "fast")
    with pytest.raises(ConfigError, match="loss.impl"):
        CausalLMModule(mixbench.build_model("llama_debug"), OptimConfig(), loss_impl="fast")


@pytest.mark.parametrize("impl,package", [("liger", "liger_kernel"), ("cce", "cut_cross_entropy")])
def test_a_missing_kernel_extra_names_the_install(impl, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed")
    h, w, y = head_problem()
    with pytest.raises(ImportError, match=r"mixbench\[kernels\]"):
        linear_cross_entropy_sum(h, w, y, impl)


@pytest.mark.parametrize("impl,chunk", [("chunked", 16), ("torch", 16)])
def test_model_losses_match_the_in_forward_loss(impl, chunk):
    model = mixbench.build_model("llama_debug", norm="mix", seed=0)
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    labels = ids.roll(-1, 1)
    labels[:, -3:] = -100
    ref = causal_lm_loss_sum(model, ids, labels)  # torch: the loss inside the model's forward
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    ours = causal_lm_loss_sum(model, ids, labels, impl, chunk)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(torch.autograd.grad(ours, list(model.parameters())), ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_attention_backend_changes_the_kernel_not_the_model():
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    auto = mixbench.build_model("llama_debug", seed=0)
    math = mixbench.build_model("llama_debug", seed=0, attention_backend="math")
    assert list(auto.state_dict()) == list(math.state_dict())
    torch.testing.assert_close(math(ids), auto(ids), rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="attention_backend"):
        mixbench.build_model("llama_debug", attention_backend="fast")


def test_speed_options_are_settings():
    cfg = compose(["task=c4_llama_130m", "loss.impl=chunked", "model.attention_backend=cudnn"])
    assert cfg.loss.impl == "chunked" and cfg.model.attention_backend == "cudnn"
    assert compose(["task=c4_llama_130m"]).loss.impl == "torch"


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("impl", ["liger", "cce", "chunked"])
def test_kernel_losses_match_torch_under_bf16_autocast(impl):
    if impl != "chunked":
        pytest.importorskip({"liger": "liger_kernel", "cce": "cut_cross_entropy"}[impl])
    h, w, y = head_problem("cuda", n=300, hidden=64, vocab=1000)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = linear_cross_entropy_sum(h, w, y, "torch")
        ref_grads = torch.autograd.grad(ref, (h, w))
        ours = linear_cross_entropy_sum(h, w, y, impl)
        grads = torch.autograd.grad(ours, (h, w))
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, rtol=1e-3, atol=1e-2)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("backend", ["flash", "cudnn", "efficient"])
def test_attention_backends_agree_on_gpu(backend):
    from _support.cuda import require_sdpa_backend

    require_sdpa_backend(backend, batch=2, heads=4, seq=64, head_dim=16, causal=True)  # llama_debug's attention
    ids = torch.randint(0, 512, (2, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref = mixbench.build_model("llama_debug", seed=0).cuda()(ids, labels=ids.roll(-1, 1))
        ours = mixbench.build_model("llama_debug", seed=0, attention_backend=backend).cuda()(ids, labels=ids.roll(-1, 1))
    torch.testing.assert_close(ours, ref, rtol=1e-2, atol=1e-1)
