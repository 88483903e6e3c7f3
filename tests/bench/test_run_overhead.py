"""bench/speed/run_overhead.py on CPU: each variant's `mixbench run` arguments compose to the 1B ladder run's settings
plus what the variant changes, and a row's projection to the full run is the formula of its docstring."""

import argparse
import logging

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
    assert row["process_s"] is None and "projected_process_ratio" not in row  # a record the bench did not clock
    assert run_overhead.row("model", {**record, "peak_gpu_memory": {"allocated_gib": 36.5}}, 764)["peak_allocated_gib"] == 36.5


def test_a_row_projects_the_process_too():
    """The bench's clock of the whole process (Python, imports, the run, the exit) projects like the run's wall time."""
    run_overhead = bench_module("speed", "run_overhead")
    record = {"status": "completed", "time_parts": {"steady_step_s": 0.5, "wall_s": 100.0, "steps": 80}, "bench_wall_s": 121.04}
    row = run_overhead.row("cuda_init", record, full_steps=764)
    assert row["process_s"] == 121.0
    assert row["projected_process_ratio"] == round((121.04 + 684 * 0.5) / (764 * 0.5), 3)
    assert row["projected_ratio"] < row["projected_process_ratio"]


@pytest.mark.parametrize("steps", ["36", "42"])
def test_steps_too_few_for_a_steady_step_or_not_four_validations_are_refused(steps, monkeypatch, capsys):
    """Fewer than 40 steps leave no 10-step window between validations (no steady step); 42 is no multiple of 4."""
    run_overhead = bench_module("speed", "run_overhead")
    monkeypatch.setattr("sys.argv", ["run_overhead.py", "--text", "x/*.json.gz", "--steps", steps, "--dry-run"])
    with pytest.raises(SystemExit) as stop:
        run_overhead.main()
    assert stop.value.code == 2 and "at least 40" in capsys.readouterr().err


def test_forty_steps_are_enough(monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    run_overhead = bench_module("speed", "run_overhead")
    monkeypatch.setattr("sys.argv", ["run_overhead.py", "--text", "x/*.json.gz", "--steps", "40", "--variants", "cuda_init", "--dry-run"])
    run_overhead.main()
    assert "trainer.max_steps=40" in caplog.text and "trainer.val_check_interval=10" in caplog.text


IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |   _io
import time:       300 |        300 |       torch._C
import time:       200 |        500 |     torch
import time:        50 |         50 |     lightning.fabric
import time:       400 |        950 |   lightning
import time:        20 |       1070 | mixbench.training.run
import time:        10 |         10 | mixbench.cli.app
"""


def test_import_times_sums_the_top_level_and_names_each_package_where_it_enters():
    run_overhead = bench_module("speed", "run_overhead")
    result = run_overhead.import_times(IMPORTTIME, top=4)
    assert result["total_s"] == round((1070 + 10) / 1e6, 2)
    big = run_overhead.import_times(IMPORTTIME.replace("|       1070 |", "|    1070000 |").replace("|        500 |", "|     500000 |"))
    assert big["total_s"] == 1.07
    # torch enters under lightning (another package): listed; lightning.fabric and torch._C under their own: not
    assert [(e["module"], e["s"]) for e in big["slowest"][:2]] == [("mixbench.training.run", 1.07), ("torch", 0.5)]
    names = {e["module"] for e in big["slowest"]}
    assert {"lightning", "_io", "mixbench.cli.app"} <= names and not names & {"lightning.fabric", "torch._C"}
