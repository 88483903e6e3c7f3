"""bench/speed/run_overhead.py on CPU: each variant's `mixbench run` arguments compose to the 1B ladder run's settings
plus what the variant changes, and a row's projection to the full run is the formula of its docstring."""

import argparse

import pytest
from _support.bench import bench_module

from mixbench.training.config import compose


def args(**over):
    base = dict(task="c4_llama_1b", norm="pre", batch=128, steps=80, text="x/*.json.gz")
    return argparse.Namespace(**{**base, **over})


@pytest.mark.parametrize(
    "variant, scope, final, init",
    [
        ("model", "model", "always", "cpu"),
        ("blocks", "blocks", "always", "cpu"),
        ("reuse", "blocks", "reuse_fit", "cpu"),
        ("cuda_init", "blocks", "reuse_fit", "cuda"),
        ("recompute", "blocks", "reuse_fit", "cpu"),
    ],
)
def test_each_variant_is_the_ladder_run_with_its_changes(variant, scope, final, init):
    run_overhead = bench_module("speed", "run_overhead")
    cfg = compose(run_overhead.run_args(args(), variant))
    assert (cfg.compile.scope, cfg.final_validation, cfg.init_device) == (scope, final, init)
    assert cfg.compile.enabled and cfg.model.name == "llama_1b" and cfg.trainer.max_steps == 80
    assert cfg.trainer.val_check_interval == 20 and cfg.data.global_batch_size == cfg.data.batch_size == 128  # 4 validations
    assert cfg.optim.lr == 5e-4 and cfg.data.max_val_tokens == 1_000_000
    assert cfg.activation_checkpointing == (variant == "recompute")


def test_cuda_init_adds_the_gpu_build():
    run_overhead = bench_module("speed", "run_overhead")
    assert run_overhead.VARIANTS["cuda_init"] == [*run_overhead.VARIANTS["reuse"], "init_device=cuda"]


def test_a_row_projects_the_short_run_to_the_full_one():
    run_overhead = bench_module("speed", "run_overhead")
    record = {"status": "completed", "effective": {"global_batch_size": 128}}
    record["time_parts"] = {"steady_step_s": 0.5, "wall_s": 100.0, "steps": 80}
    row = run_overhead.row("model", record, full_steps=764)
    assert row["overhead_s"] == 60.0  # 100 − 80 × 0.5
    assert row["projected_wall_s"] == 100.0 + 684 * 0.5
    assert row["projected_ratio"] == round((100.0 + 684 * 0.5) / (764 * 0.5), 3)
    assert row["tokens_per_s"] == 128 * 256 / 0.5
    assert row["peak_allocated_gib"] is None  # a record from a CPU run (or from before peak_gpu_memory) says none
    assert run_overhead.row("model", {**record, "peak_gpu_memory": {"allocated_gib": 36.5}}, 764)["peak_allocated_gib"] == 36.5
