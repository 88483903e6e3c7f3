"""The LLaMA speed benches of bench/speed: lm_throughput.py (its variants and a smoke run), fp8_throughput.py and
trainer_rate.py, run in this process on the CPU."""

import json
import subprocess
import sys

import pytest
import torch
from _support.bench import bench_module as support_bench_module
from _support.paths import REPO_ROOT
from _support.text import write_readme_shards

import mixbench

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def c4_folder(tmp_path):
    """C4-format shards of the README's paragraphs (as tests/families/test_lm_pipeline.py's)."""
    folder = tmp_path / "c4" / "en"
    folder.mkdir(parents=True)
    write_readme_shards(folder)
    return folder


def bench_module():
    """bench/speed/lm_throughput.py as a module."""
    return support_bench_module("speed", "lm_throughput")


def test_bench_smoke_writes_rows_options_and_profile(tmp_path):
    bench = bench_module()
    out = tmp_path / "lm.json"
    bench.main(
        [
            "--device",
            "cpu",
            "--no-compile",
            "--no-hf",
            "--models",
            "llama_debug",
            "--size-models",
            "--batch",
            "2",
            "--seq",
            "16",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--candidates",
            "loss=chunked",
            "--best",
            "loss=chunked",
            "--norms",
            "pre",
            "mix",
            "--out",
            str(out),
        ]
    )
    data = json.loads(out.read_text())
    assert [(r["norm"], r["options"]) for r in data["rows"]] == [
        ("pre", "defaults"),
        ("pre", "loss=chunked"),
        ("pre", "loss=chunked"),
        ("mix", "loss=chunked"),
    ]
    assert all(r["tokens_per_sec"] > 0 for r in data["rows"])
    assert data["rows"][-1]["vs_pre"] > 0 and "options" in data["table"]
    profile = (tmp_path / "lm_profile.txt").read_text()
    assert profile.count("== llama_debug") == 2 and "kernel class" in profile


def test_bench_variants_parse_and_pick_the_best_per_axis():
    bench = bench_module()
    V = bench.Variant
    assert V.parse("loss=cce,compile_opt=true") == V(loss="cce", compile_opt=True)
    assert V.parse("defaults").options() == "defaults"
    b = bench.Bench.__new__(bench.Bench)
    b.args = type("A", (), {"best": None, "min_gain": 0.01})()
    tried = [
        (V(loss="cce"), {"tokens_per_sec": 120}),
        (V(loss="liger"), {"tokens_per_sec": 110}),
        (V(sdpa="cudnn"), {"tokens_per_sec": 100.5}),
        (V(mode="max-autotune-no-cudagraphs"), {"tokens_per_sec": 105}),
        (V(kernels="liger"), None),
    ]
    assert b.best_variant({"tokens_per_sec": 100}, tried) == V(loss="cce", mode="max-autotune-no-cudagraphs")
    assert bench.kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32") == "gemm"
    assert bench.kernel_class("flash_fwd_kernel") == "attention"
    assert bench.kernel_class("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0") == "compiled pointwise/reductions (triton)"


@pytest.mark.gpu
@CUDA
def test_bench_liger_layers_match_the_model_on_gpu():
    pytest.importorskip("liger_kernel")
    bench = bench_module()
    ids = torch.randint(0, 512, (2, 64), device="cuda")
    ref_model = mixbench.build_model("llama_debug", norm="mix", seed=0).cuda()
    model = mixbench.build_model("llama_debug", norm="mix", seed=0).cuda()
    bench.use_liger_layers(model)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref_model.named_parameters()]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ref, ours = ref_model(ids, labels=ids.roll(-1, 1)), model(ids, labels=ids.roll(-1, 1))
    torch.testing.assert_close(ours, ref, rtol=1e-2, atol=2.0)  # summed over 128 tokens: ≈ 1e-2 per token
    ours.backward()
    ref.backward()
    for a, b in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=5e-2, atol=5e-3)


def bench_script(name: str, monkeypatch):
    """``bench/speed/NAME.py`` as a module, in the repository root as when run from there: its ``main`` is what running
    the script calls, here without a fresh interpreter's ~10 s of imports."""
    monkeypatch.chdir(REPO_ROOT)
    return support_bench_module("speed", name)


@pytest.mark.slow  # the same arguments run in process, rows checked, in test_lm_speed_options's bench smoke test
def test_lm_throughput_benchmark_smoke(tmp_path):
    out = tmp_path / "lm.json"
    cmd = [
        sys.executable,
        "bench/speed/lm_throughput.py",
        "--device",
        "cpu",
        "--no-compile",
        "--no-hf",
        "--models",
        "llama_debug",
        "--norms",
        "pre",
        "mix",
        "--size-models",
        "--candidates",
        "loss=chunked",
        "--best",
        "loss=chunked",
        "--batch",
        "2",
        "--seq",
        "16",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, cwd=REPO_ROOT, capture_output=True)
    result = json.loads(out.read_text())
    assert len(result["rows"]) == 4 and all(r["tokens_per_sec"] > 0 for r in result["rows"])


def test_fp8_throughput_benchmark_smoke(tmp_path, monkeypatch):
    """The fp8 bench builds its steps from bench/speed/lm_throughput.py's helpers: a bf16-only CPU row keeps that wiring honest."""
    out = tmp_path / "fp8.json"
    argv = [
        "bench/speed/fp8_throughput.py",
        "--device",
        "cpu",
        "--no-compile",
        "--recipes",
        "--models",
        "llama_debug",
        "--batch",
        "2",
        "--seq",
        "16",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", argv)  # its main() reads the command line
    bench_script("fp8_throughput", monkeypatch).main()
    rows = json.loads(out.read_text())["rows"]
    assert [r["precision"] for r in rows] == ["bf16"] and rows[0]["tokens_per_sec"] > 0


def test_trainer_rate_benchmark_smoke(tmp_path, c4_folder, monkeypatch):
    """bench/speed/trainer_rate.py times the bare step and a real `mixbench run` of the same batch, and reports their ratio."""
    out = tmp_path / "rate.json"
    argv = [
        "--device",
        "cpu",
        "--no-compile",
        "--model",
        "llama_tiny",
        "--text",
        f"{c4_folder}/c4-train.*.json.gz",
        "--batch",
        "2",
        "--seq",
        "32",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--run-steps",
        "6",
        "--log-every",
        "2",
        "--workers",
        "0",
        "--out",
        str(out),
    ]
    bench_script("trainer_rate", monkeypatch).main(argv)  # the `mixbench run` it times is a process of its own
    (row,) = json.loads(out.read_text())["rows"]
    # timing starts after step 1; windows end at the multiples of --log-every: steps 2, 4, 6
    assert row["trainer"]["status"] == "completed" and len(row["trainer"]["windows"]) == 3
    assert row["trainer"]["effective"]["accumulate_grad_batches"] == 1
    assert row["ratio"] == pytest.approx(row["trainer_tokens_per_sec"] / row["step_tokens_per_sec"])
