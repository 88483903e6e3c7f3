"""Crash-safe runs: SIGKILL at several moments, `resume=auto`, and the uninterrupted run's result exactly."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mixbench.checkpointing import newest_checkpoint
from mixbench.cli import main

HERE = Path(__file__).parent
COMMON = ["task=llama_lm", "norm=mix", "model=llama_debug", "model.vocab_size=8192", "data.seq_len=16", "data.batch_size=4",
          "trainer.max_steps=8", "trainer.val_check_interval=4", "trainer.limit_val_batches=3", "trainer.enable_progress_bar=false",
          "divergence.unigram_floor=false", "checkpoint.every_n_steps=2", "checkpoint.keep_last=2", "trainer.deterministic=true"]


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "record.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full") / "run"
    assert main(["run", *COMMON, f"run_dir={run_dir}"]) == 0
    return record(run_dir)


@pytest.mark.parametrize("moment, step", [("step", 5), ("validation", 4), ("write", 6)])
def test_kill_then_resume_gives_the_uninterrupted_result_exactly(tmp_path, uninterrupted, moment, step):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    killed = subprocess.run([sys.executable, str(HERE / "kill_harness.py"), moment, str(step), *COMMON, f"run_dir={run_dir}"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "record.json").exists()
    if moment == "write":  # the interrupted write left only a temporary file, never a .ckpt a resume could pick
        assert list((run_dir / "checkpoints").glob("*.tmp-*")) and not list((run_dir / "checkpoints").glob("*step=6.ckpt"))
    assert newest_checkpoint(run_dir).name == "epoch=0-step=4.ckpt"
    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 8
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt"))
    assert kept == ["epoch=0-step=6.ckpt", "epoch=0-step=8.ckpt", "last.ckpt"]  # keep_last=2 (+ last.ckpt)


def test_resume_auto_finds_the_unfinished_folder_of_the_same_config_and_skips_finished_runs(tmp_path, uninterrupted):
    results = tmp_path / "results"
    args = [*COMMON, f"results_dir={results}", "trainer.max_steps=2"]
    assert main(["run", *args, "resume=auto"]) == 0
    (first,) = results.rglob("record.json")
    assert main(["run", *args, f"run_dir={first.parent}"]) == 2  # finished: refused without resume=auto
    assert main(["run", *args, f"run_dir={first.parent}", "resume=auto"]) == 0  # finished: nothing to do
    assert len(list(results.rglob("record.json"))) == 1
    first.unlink()  # an unfinished run of the same config is continued in its folder
    assert main(["run", *args, "resume=auto"]) == 0
    assert [p.parent for p in results.rglob("record.json")] == [first.parent]
    moved = tmp_path / "moved"  # a results folder moved (e.g. committed under results/proxy/) still resumes
    results.rename(moved)
    assert main(["run", *[a for a in args if not a.startswith("results_dir=")], f"results_dir={moved}", "resume=auto"]) == 0
    assert len(list(moved.rglob("record.json"))) == 1
