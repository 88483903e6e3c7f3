"""bench/grids/grid_lanes.py: runs over lanes, and a deadline that stops them gracefully and ends the loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _support.bench import bench_module
from _support.paths import REPO_ROOT

# Stands in for ``python -m mixbench.cli run ...``: "quick" lines end at once; other lines wait for SIGTERM, note it
# and exit 75 as a preempted run does.
FAKE_PYTHON = """#!/usr/bin/env bash
name=${@: -1}
[ "$name" = quick ] && { touch "$LOGDIR/$name.done"; exit 0; }
trap 'touch "$LOGDIR/$name.term"; exit 75' TERM
while true; do sleep 0.2; done
"""


def run_lanes(tmp_path: Path, lines: list[str], *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    plan = tmp_path / "plan.txt"
    plan.write_text("# a comment\n" + "\n".join(lines) + "\n")
    logs = tmp_path / "logs"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "grids" / "grid_lanes.py"),
            str(plan),
            "--gpus",
            "1",
            "--jobs",
            "2",
            "--python",
            str(fake),
            "--logs",
            str(logs),
            *args,
        ],
        env={"PATH": "/usr/bin:/bin", "LOGDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, tmp_path


def test_all_lines_run_and_exit_zero(tmp_path):
    proc, out = run_lanes(tmp_path, ["mixbench run quick"] * 3)
    assert proc.returncode == 0, proc.stderr
    assert "3 run(s) ended (0 non-zero), 0 not started" in proc.stderr
    assert (out / "quick.done").exists()


def test_deadline_stops_runs_with_sigterm_and_ends_with_unstarted_lines(tmp_path):
    lines = ["mixbench run first", "mixbench run second", "mixbench run third", "mixbench run fourth"]
    proc, out = run_lanes(tmp_path, lines, "--deadline", "2", "--grace", "20")
    assert proc.returncode == 1, proc.stderr  # two stopped, two never started: the loop ends instead of waiting for them
    assert "2 run(s) ended (2 non-zero), 2 not started" in proc.stderr
    assert "exit 75" in proc.stderr  # the run itself got SIGTERM and exited as a preempted run, not SIGKILLed
    assert (out / "first.term").exists() and (out / "second.term").exists()
    assert not (out / "third.term").exists()


def test_lanes_use_the_gpus_of_cuda_visible_devices(monkeypatch):
    """A grid on GPUs 2-3 of a machine whose other GPUs run something else: the lanes' GPUs come from the parent's list."""
    gpu_devices = bench_module("grids", "grid_lanes").gpu_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_devices(2) == ["2", "3"] and gpu_devices(1) == ["2"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_devices(3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    import pytest

    with pytest.raises(SystemExit, match="lists 1 device"):
        gpu_devices(2)
