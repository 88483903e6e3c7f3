"""bench/speed/multi_gpu.py: the rows it would run (it needs two GPUs to run)."""

import pytest
from _support.bench import bench_module


def test_multi_gpu_benchmark_rows_name_valid_settings_on_the_chosen_gpus(tmp_path):
    """bench/speed/multi_gpu.py needs two GPUs to run; its rows are checked here: on the --gpus pair, the required rows before
    the optional --ddp-variants, and every row's mixbench arguments compose into a valid config."""
    from mixbench.training.config import compose

    multi_gpu = bench_module("speed", "multi_gpu")
    args = multi_gpu.parse_args(["--gpus", "2,3", "--ddp-variants", "ddp.bucket_cap_mb=100,ddp.gradient_as_bucket_view=true"])
    phases = multi_gpu.rows_for(args, tmp_path / "jpegs", tmp_path / "cache")
    assert [[(r.name, r.gpus) for r in phase] for phase in phases] == [
        [("llama_130m 1 GPU", "2"), ("vit_small 1 GPU", "3")],
        [("llama_130m DDP 2 GPUs", "2,3")],
        [("vit_small DDP 2 GPUs", "2,3")],
        [("llama_1b FSDP 2 GPUs", "2,3")],
        [("llama_130m DDP 2 GPUs ddp.bucket_cap_mb=100,ddp.gradient_as_bucket_view=true", "2,3")],
    ]
    for row in (r for phase in phases for r in phase):
        cfg = compose(row.args)
        assert cfg.model.name == row.model and cfg.trainer.devices == row.num_gpus
    assert cfg.ddp.bucket_cap_mb == 100 and cfg.ddp.gradient_as_bucket_view is True
    with pytest.raises(SystemExit):
        multi_gpu.parse_args(["--gpus", "0"])
