"""trainer.precision=fp8 (torchao float8 Linear layers) and trainer.strategy=fsdp: selection, errors and config plumbing
on the CPU (torchao faked), and torchao's real float8 conversion of the layers, which runs on the CPU too (torchao is in
the [test] extra)."""

import logging
import sys
import types

import pytest
import torch
from _support.weights import TINY_LM as WEIGHTS_TINY_LM
from torch import nn

import mixbench
from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.training.config import compose
from mixbench.training.precision import apply_fp8, check_fp8_runtime, fp8_candidates, lightning_precision
from mixbench.training.strategy import fsdp_mixed_precision, make_strategy

TINY_LM = [*(s for s in WEIGHTS_TINY_LM if not s.startswith("data.seq_len=")), "data.seq_len=16"]  # 2 LLaMA steps, short rows
LLAMA_FP8 = {f"blocks.{i}.{name}" for i in range(4) for name in ("attn.qkv", "attn.proj")}  # with MLP widths 100 / 200 ∤ 16


def llama_model():
    return mixbench.build_model("llama_debug", norm="pre", intermediate_size=100)


def fp8_cfg(*overrides: str):
    return compose(["task=llama_lm", "model=llama_debug", "trainer.precision=fp8", *overrides])


class CallLog(list):
    marker: type


@pytest.fixture
def fp8_gpu(monkeypatch):
    """An fp8-capable CUDA device as far as :func:`check_fp8_runtime` can tell, and a fake ``torchao.float8`` whose
    converter swaps in a marker class through torchao's ``module_filter_fn`` contract; yields its recorded calls."""
    calls = CallLog()

    class FakeFloat8Linear(nn.Linear):
        pass

    def convert_to_float8_training(module, *, module_filter_fn=None, config=None):
        calls.append(config)
        for name, child in list(module.named_modules()):
            if name and isinstance(child, nn.Linear) and module_filter_fn(child, name):
                parent_name, _, attr = name.rpartition(".")
                swapped = FakeFloat8Linear(child.in_features, child.out_features, bias=child.bias is not None)
                setattr(module.get_submodule(parent_name), attr, swapped)
        return module

    float8 = types.ModuleType("torchao.float8")
    float8.convert_to_float8_training = convert_to_float8_training
    float8.Float8LinearConfig = types.SimpleNamespace(from_recipe_name=lambda name: f"config:{name}")
    torchao = types.ModuleType("torchao")
    torchao.float8 = float8
    monkeypatch.setitem(sys.modules, "torchao", torchao)
    monkeypatch.setitem(sys.modules, "torchao.float8", float8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    calls.marker = FakeFloat8Linear
    return calls


def test_fp8_converts_block_linears_with_dims_divisible_by_16_and_keeps_the_heads():
    llama = llama_model()
    assert set(fp8_candidates(llama, ["head"])) == LLAMA_FP8
    assert "head" in fp8_candidates(llama, None)  # 64 → 512: only the skip list keeps the LM head out
    assert set(fp8_candidates(llama, ["head", "blocks.0.*"])) == LLAMA_FP8 - {"blocks.0.attn.qkv", "blocks.0.attn.proj"}
    vit = mixbench.build_model("vit_small", norm="pre")  # 384 wide, MLP 1536, 1000 classes
    selected = fp8_candidates(vit, ["head"])
    assert len(selected) == 4 * 12 and "head" not in selected
    assert {name.split(".", 2)[2] for name in selected} == {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"}
    llama_1b_mlp = nn.Sequential(nn.Linear(2048, 10922), nn.Linear(5461, 2048))  # llama_1b's SwiGLU widths
    assert fp8_candidates(llama_1b_mlp, None) == []


def test_apply_fp8_swaps_the_selected_layers_and_reports_them(fp8_gpu):
    model = llama_model()
    done = apply_fp8(fp8_cfg("fp8.recipe=rowwise", "compile=true"), model)
    swapped = {name for name, m in model.named_modules() if isinstance(m, fp8_gpu.marker)}
    assert swapped == LLAMA_FP8 and fp8_gpu == ["config:rowwise"]
    assert done["recipe"] == "rowwise" and done["converted"] == len(LLAMA_FP8) and "head" in done["kept_bf16"]
    untouched = llama_model()
    assert apply_fp8(compose(["task=llama_lm", "model=llama_debug"]), untouched) is None
    assert not any(isinstance(m, fp8_gpu.marker) for m in untouched.modules())


def test_torchao_converts_the_selected_layers_and_keeps_the_weights():
    pytest.importorskip("torchao.float8")
    from torchao.float8.float8_linear import Float8Linear

    from mixbench.training.precision import convert_fp8

    model = llama_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert set(convert_fp8(model, "tensorwise", ["head"])) == LLAMA_FP8
    assert {name for name, m in model.named_modules() if isinstance(m, Float8Linear)} == LLAMA_FP8
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())


def test_fp8_errors_name_the_fix(fp8_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    with pytest.raises(ConfigError, match=r"compute capability ≥ 8\.9.* has 8\.0: use trainer.precision=bf16-mixed"):
        check_fp8_runtime()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="this machine has none; use trainer.precision=bf16-mixed"):
        check_fp8_runtime()
    monkeypatch.setitem(sys.modules, "torchao", None)  # not installed
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[fp8\]"'):
        check_fp8_runtime()


def test_fp8_settings_are_checked_when_the_config_is_composed():
    cfg = fp8_cfg("fp8.recipe=rowwise", "fp8.skip=[head,'blocks.0.*']")
    assert cfg.fp8.recipe == "rowwise" and list(cfg.fp8.skip) == ["head", "blocks.0.*"]
    with pytest.raises(ConfigError, match="fp8.recipe must be one of tensorwise, rowwise"):
        fp8_cfg("fp8.recipe=delayed")
    with pytest.raises(ConfigError, match="fp8.skip must be a list of module-path patterns"):
        fp8_cfg("fp8.skip=[1]")


def test_lightning_runs_fp8_as_bf16_mixed(monkeypatch):
    assert lightning_precision("fp8", "auto") == "bf16-mixed"
    assert lightning_precision("16-mixed", "gpu") == "16-mixed"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert lightning_precision(None, "auto") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert lightning_precision(None, "auto") == "bf16-mixed" and lightning_precision(None, "cpu") == "32-true"


def test_fp8_run_without_a_gpu_fails_with_one_clear_error(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["run", *TINY_LM, "trainer.precision=fp8", f"results_dir={tmp_path}"]) == 2
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "trainer.precision=fp8 needs" in message and "\n" not in message


@pytest.mark.parametrize(
    "task, block", [("c4_llama_1b", "mixbench.models.llama.LlamaBlock"), ("in1k_vit_small", "mixbench.models.vit.PlacedViTBlock")]
)
def test_fsdp_wraps_and_checkpoints_each_transformer_block_in_bf16(task, block):
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    module_name, _, class_name = block.rpartition(".")
    block_class = getattr(sys.modules[module_name], class_name)
    cfg = compose([f"task={task}", "trainer.strategy=fsdp", "fsdp.activation_checkpointing=true", "save_weights=false"])
    strategy = make_strategy(cfg, block_class, "bf16-mixed")
    assert isinstance(strategy, FSDPStrategy) and strategy.kwargs["use_orig_params"] is True
    policy = strategy.kwargs["auto_wrap_policy"]
    assert isinstance(policy, ModuleWrapPolicy) and policy._module_classes == {block_class}
    assert strategy._activation_checkpointing_kwargs["auto_wrap_policy"]._module_classes == {block_class}
    assert strategy.sharding_strategy.name == "FULL_SHARD"
    mp = strategy.mixed_precision
    assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == (torch.bfloat16, torch.float32, None)
    plain = make_strategy(compose([f"task={task}", "trainer.strategy=fsdp", "save_weights=false"]), block_class, "32-true")
    assert plain.mixed_precision is None and not plain._activation_checkpointing_kwargs
    assert make_strategy(compose([f"task={task}", "trainer.strategy=auto"]), block_class) == "auto"


def test_ddp_settings_reach_distributed_data_parallel_and_bad_ones_are_named():
    from lightning.pytorch.strategies import DDPStrategy

    default = make_strategy(compose(["task=c4_llama_130m", "trainer.strategy=ddp"]), None)
    assert isinstance(default, DDPStrategy) and default._ddp_kwargs == {}  # torch's own defaults
    cfg = compose(["task=c4_llama_130m", "trainer.strategy=ddp", "ddp.bucket_cap_mb=100", "ddp.gradient_as_bucket_view=true"])
    assert make_strategy(cfg, None)._ddp_kwargs == {"bucket_cap_mb": 100, "gradient_as_bucket_view": True}
    with pytest.raises(ConfigError, match="ddp.bucket_cap_mb must be a positive number"):
        compose(["task=c4_llama_130m", "ddp.bucket_cap_mb=0"])
    with pytest.raises(ConfigError, match="ddp.static_graph must be true, false or null"):
        compose(["task=c4_llama_130m", "ddp.static_graph=sometimes"])


def test_fsdp_settings_are_checked_when_the_config_is_composed():
    with pytest.raises(ConfigError, match="add save_weights=false"):
        compose(["task=c4_llama_1b", "trainer.strategy=fsdp"])
    with pytest.raises(ConfigError, match="fsdp.sharding_strategy must be one of FULL_SHARD"):
        compose(["task=c4_llama_1b", "trainer.strategy=fsdp", "save_weights=false", "fsdp.sharding_strategy=ZERO3"])
    assert fsdp_mixed_precision("fp8") is None  # Lightning never sees fp8: build_trainer hands it bf16-mixed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9), reason="needs an fp8 GPU")
def test_real_fp8_conversion_trains_like_bf16():
    pytest.importorskip("torchao.float8")
    from torchao.float8.float8_linear import Float8Linear

    cfg = compose(["task=c4_llama_130m", "trainer.precision=fp8", "model.num_layers=2"])
    ids = torch.randint(0, 32000, (8, 257), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    losses = {}
    for precision in ("bf16-mixed", "fp8"):
        model = mixbench.build_model("llama_130m", norm="pre", seed=0, num_layers=2).cuda()
        if precision == "fp8":
            assert apply_fp8(cfg, model)["converted"] == 2 * 4
            assert isinstance(model.blocks[0].mlp.fc2, Float8Linear) and type(model.head) is nn.Linear
        model.compile()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids[:, :-1], labels=ids[:, 1:]) / ids[:, 1:].numel()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        losses[precision] = loss.item()
    assert losses["fp8"] == pytest.approx(losses["bf16-mixed"], rel=0.02)


def test_fsdp_evaluation_after_fit_reuses_the_fits_root_wrapper(monkeypatch):
    """Lightning drops the root FSDP wrapper when it sets up a validate after fit (its #19015): the root's parameters
    stay sharded and the embedding fails with "'weight' must be 2-D".  The strategy must hand the fit's root back."""
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel

    from mixbench.training.lit.fsdp import RootKeepingFSDPStrategy

    wraps = []

    def fake_wrap(self, model):  # Lightning's wrapping: a root the first time, the bare module once blocks are wrapped
        if wraps:
            return model
        root = object.__new__(FullyShardedDataParallel)
        torch.nn.Module.__init__(root)
        root._fsdp_wrapped_module = model
        wraps.append(root)
        return root

    monkeypatch.setattr(FSDPStrategy, "_setup_model", fake_wrap)
    strategy, module, other = RootKeepingFSDPStrategy(), torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    root = strategy._setup_model(module)  # fit
    assert isinstance(root, FullyShardedDataParallel) and root.module is module
    assert strategy._setup_model(module) is root  # validate after fit: the same root, not the bare module
    assert strategy._setup_model(other) is other  # another module is not given this root
