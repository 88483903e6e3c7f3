"""bench/studies/epoch_stall: the stall at an epoch boundary, measured for both image loaders."""

import json

import pytest
from _support.bench import bench_module


@pytest.fixture(scope="module")
def jpeg_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    bench_module("speed", "image_loader").write_jpegs(root, 64, 48)  # as tests/_support/data/test_epoch_spanning.py's
    return root


def test_the_stall_bench_measures_both_loaders(tmp_path, jpeg_root):
    epoch_stall = bench_module("studies/epoch_stall", "epoch_stall")

    out = tmp_path / "stall.json"
    epoch_stall.main(["--root", str(jpeg_root), "--epochs", "3", "--batch", "8", "--workers", "2", "--step-ms", "5", "--out", str(out)])
    result = json.loads(out.read_text())
    rows = {row["span_epochs"]: row for row in result["rows"]}
    assert set(rows) == {False, True}
    for row in rows.values():
        assert row["steps_per_epoch"] == 8 and len(row["boundary_gaps_s"]) == 2 and row["median_step_gap_s"] > 0
    assert (tmp_path / "stall.md").read_text().startswith("|")
