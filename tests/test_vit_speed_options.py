"""ViT speed options (model.attention_backend, the variants of bench/speed/vit_throughput.py) change kernels, not the model."""

import importlib.util
import json
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch
import torch.nn.functional as F
from _support.bench import bench_module as support_bench_module

import mixbench
from mixbench.core.errors import ConfigError
from mixbench.training.config import compose

ROOT = Path(__file__).resolve().parents[1]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def bench_module():
    return support_bench_module("speed", "vit_throughput")


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
def test_bench_variants_map_to_the_compile_modes():
    bench = bench_module()
    V, modes = bench.Variant, torch._inductor.list_mode_options
    assert V.parse("sdpa=cudnn,cudagraphs=true") == V(sdpa="cudnn", cudagraphs=True)
    assert V.parse("defaults").options() == "defaults" and V(tune="max").options() == "tune=max"
    assert V().compile_options() == modes("default")
    assert V(cudagraphs=True).compile_options() == modes("reduce-overhead")
    assert V(tune="max").compile_options() == modes("max-autotune-no-cudagraphs")
    assert V(tune="max", cudagraphs=True).compile_options() == modes("max-autotune")
    with pytest.raises(SystemExit, match="unknown axis"):
        V.parse("mode=fast")


def fake_bench(bench, **args):
    b = bench.Bench.__new__(bench.Bench)
    b.args = SimpleNamespace(**({"best": None, "min_gain": 0.01, "rounds": 2, "window_s": 1.0} | args))
    b.rows, b.skipped, b.built, b.build_s, b.t0 = [], [], {}, [], time.perf_counter()
    return b


def test_bench_best_config_takes_the_fastest_winning_value_per_axis():
    bench = bench_module()
    V, b = bench.Variant, fake_bench(bench)
    for variant, rate in [
        (V(), 100.0),
        (V(sdpa="cudnn"), 108.0),
        (V(sdpa="efficient"), 104.0),
        (V(cudagraphs=True), 100.5),
        (V(tune="pointwise"), 103.0),
        (V(optimizer="foreach"), None),
    ]:
        b.rows.append(
            {
                "phase": "candidates",
                "model": "vit_small",
                "norm": "pre",
                "role": "baseline" if variant == V() else "candidate",
                "variant": bench.asdict(variant),
                "images_per_sec": rate,
            }
        )
    assert b.best_variant("vit_small") == V(sdpa="cudnn", tune="pointwise")  # cudagraphs: +0.5 % < --min-gain
    b.args.best = "cudagraphs=true"
    assert b.best_variant("vit_small") == V(cudagraphs=True)


def test_bench_time_budget_keeps_the_prefix_that_fits():
    bench = bench_module()
    V, b = bench.Variant, fake_bench(bench)
    specs = [(None, V(), "peer"), ("pre", V(), "baseline"), ("pre", V(tune="max"), "candidate"), ("pre", V(sdpa="cudnn"), "candidate")]
    assert b.affordable("vit_small", specs, limit_s=50) == specs[:2]  # 2 × 20 s builds + 2 rows × 2 rounds × 1 s
    assert len(b.skipped) == 2 and "tune=max" in b.skipped[0]
    b.built[("vit_small", "pre", V(tune="max"))] = object()  # built rows cost no compile
    assert b.affordable("vit_small", specs[2:], limit_s=30) == specs[2:]
    b.build_s = [5.0]  # the estimate follows the builds so far
    assert b.affordable("vit_small", specs[:2], limit_s=16) == specs[:2]


def test_bench_kernel_classes():
    classes = bench_module().KERNEL_CLASSES
    kernel_class = partial(importlib.import_module("kernel_profile").kernel_class, classes=classes)
    assert kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64").startswith("gemm")
    assert kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT").startswith("gemm")
    assert kernel_class("pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel").startswith("attention")
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop").startswith("attention")
    assert kernel_class("triton_per_fused__to_copy_add_native_layer_norm_3").startswith("layer norm")
    assert kernel_class("triton_poi_fused_gelu_gelu_backward_5").startswith("gelu")
    assert kernel_class("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"


def test_bench_smoke_writes_rows_ratios_and_profiles(tmp_path):
    bench = bench_module()
    out = tmp_path / "vit.json"
    bench.main(
        [
            "--device",
            "cpu",
            "--no-compile",
            "--models",
            "vit_debug",
            "--size-models",
            "--img-size",
            "32",
            "--batch",
            "2",
            "--warmup",
            "1",
            "--rounds",
            "2",
            "--window-s",
            "0.01",
            "--candidates",
            "sdpa=flash",
            "sdpa=cudnn",
            "cudagraphs=true",
            "--late-candidates",
            "--best",
            "sdpa=flash",
            "--norms",
            "pre",
            "mix",
            "--out",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    rows = {(r["phase"], r["norm"], r["options"]): r for r in data["rows"]}
    assert list(rows) == [
        ("candidates", None, "defaults"),
        ("candidates", "pre", "defaults"),
        ("candidates", "pre", "sdpa=flash"),
        ("candidates", "pre", "sdpa=cudnn"),
        ("candidates", "pre", "cudagraphs=True"),
        ("norms", None, "defaults"),
        ("norms", "pre", "defaults"),
        ("norms", "pre", "sdpa=flash"),
        ("norms", "mix", "sdpa=flash"),
    ]
    assert "No viable backend" in rows[("candidates", "pre", "sdpa=cudnn")]["error"]
    assert rows[("candidates", "pre", "cudagraphs=True")]["images_per_sec"] is None
    peer, mix, pre = rows[("norms", None, "defaults")], rows[("norms", "mix", "sdpa=flash")], rows[("norms", "pre", "sdpa=flash")]
    assert len(mix["rounds"]) == 2 and mix["spread"] >= 0 and mix["steps_per_round"] >= 5
    assert mix["vs_timm"] == pytest.approx(mix["images_per_sec"] / peer["images_per_sec"])
    assert mix["vs_pre"] == pytest.approx(mix["images_per_sec"] / pre["images_per_sec"])
    assert data["skipped"] == [] and "vs timm" in data["table"]
    profile = (tmp_path / "vit_profile.txt").read_text()
    assert profile.count("== ") == 2 and "== best: vit_debug mixbench pre [sdpa=flash]" in profile and "kernel class" in profile


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


@pytest.mark.gpu
@CUDA
def test_bench_cuda_graph_rows_capture_on_gpu(tmp_path):
    bench = bench_module()
    out = tmp_path / "vit.json"
    bench.main(
        [
            "--models",
            "vit_debug",
            "--size-models",
            "--img-size",
            "32",
            "--batch",
            "8",
            "--warmup",
            "3",
            "--rounds",
            "2",
            "--window-s",
            "0.05",
            "--candidates",
            "cudagraphs=true",
            "--late-candidates",
            "--norms",
            "pre",
            "--out",
            str(out),
        ]
    )
    row = next(r for r in json.loads(out.read_text())["rows"] if r["options"] == "cudagraphs=True")
    assert row["images_per_sec"] and row["cudagraph_skips"] == 0


@pytest.mark.parametrize("name", ["vit_small", "llama_71m"])
def test_a_kernel_choice_does_not_split_a_table_cell(name):
    """Runs that differ only in model.attention_backend compute the same function: same model label (same table
    cell); an architecture option still shows."""
    from mixbench.training.run import model_label

    assert model_label(name, {"attention_backend": "cudnn"}) == name
    assert model_label(name, {"attention_backend": "cudnn", "num_layers": 3}) == f"{name}[num_layers=3]"
