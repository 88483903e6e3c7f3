"""bench/speed/vit_throughput.py (the ViT throughput bench): its variants, best configuration, time budget and kernel
classes, and its main run end to end on the CPU (in this process: without a fresh interpreter's ~10 s of imports)."""

import json
import time
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from _support.bench import bench_module as support_bench_module
from _support.paths import REPO_ROOT

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def bench_module():
    return support_bench_module("speed", "vit_throughput")


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
    kernel_class = partial(support_bench_module("speed", "kernel_profile").kernel_class, classes=classes)
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


def test_vit_throughput_benchmark_smoke(tmp_path, monkeypatch):
    """bench/speed/vit_throughput.py's main, in the repository root, on the command line of a run of the script (in
    this process: without a fresh interpreter's ~10 s of imports)."""

    out = tmp_path / "vit.json"
    argv = [
        "--device",
        "cpu",
        "--no-compile",
        "--models",
        "vit_tiny",
        "--size-models",
        "--candidates",
        "--late-candidates",
        "--norms",
        "pre",
        "mix",
        "--img-size",
        "32",
        "--batch",
        "2",
        "--rounds",
        "1",
        "--window-s",
        "0.01",
        "--warmup",
        "1",
        "--budget-s",  # time budgets far above the rows' cost: a loaded machine must not skip a phase
        "3600",
        "--max-s",
        "3600",
        "--out",
        str(out),
    ]
    monkeypatch.chdir(REPO_ROOT)
    bench_module().main(argv)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["phase"], r["impl"]) for r in rows] == [
        ("candidates", "timm vit_tiny_patch16_224"),
        ("candidates", "mixbench pre"),
        ("norms", "timm vit_tiny_patch16_224"),
        ("norms", "mixbench pre"),
        ("norms", "mixbench mix"),
    ]
    assert all(r["images_per_sec"] > 0 and r["vs_timm"] > 0 for r in rows)
