"""bench/device/ladder.sh plans the ladder here for a lease elsewhere."""

import logging

import pytest

from mixbench.cli.app import main

LLAMA_71M = ["--only", "task=c4_llama_71m", "--only", "norm=pre"]  # as tests/grids/test_dry_run_plan.py's


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def test_a_plan_made_here_for_a_lease_warns_of_data_missing_here(tmp_path, capsys, logs):
    """bench/device/ladder.sh plans round 1 here (``--data-elsewhere``), where the lease's data paths do not exist."""
    argv = ["reproduce", "ladder", "--dry-run", "--data-elsewhere", *LLAMA_71M, "llama:data.path=.data/c4-train.*.json.gz"]
    assert main([*argv, f"results_dir={tmp_path}"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert "no files match data path '.data/c4-train.*.json.gz'" in logs.text and "--data-elsewhere" in logs.text
    assert main(["reproduce", "ladder", "--data-elsewhere", f"results_dir={tmp_path}"]) == 2  # belongs to --dry-run
