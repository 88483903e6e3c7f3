"""A full disk is a clear stop: a checkpoint, record or weights write that finds no space stops the run with exit 75 and
one line naming the folder and the bytes it needed; the earlier checkpoints and record stay intact; once space is freed
``resume=auto`` continues exactly."""

import logging
import re
from pathlib import Path

import pytest
from _support.crash import COMMON, record
from _support.faults import TmpfsUnavailable, fill_disk, full_disk_at, inject, tmpfs

import mixbench.training.run as train
from mixbench.cli.app import main
from mixbench.core.errors import RESUMABLE_EXIT
from mixbench.training.checkpointing import checkpoint_problem


def stop_line(caplog) -> str:
    """The one error line of the stop, checked to be one line without a traceback."""
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "\n" not in message and "Traceback" not in message
    return message


def needed_bytes(message: str, name: str) -> int:
    return int(re.search(rf"{re.escape(name)} needs ([\d,]+) bytes", message).group(1).replace(",", ""))


def intact_checkpoints(run_dir: Path) -> list[str]:
    """The checkpoint files of ``run_dir``, each checked complete; no temporary file is left beside them."""
    folder = run_dir / "checkpoints"
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]
    assert all(checkpoint_problem(p, read_data=True) is None for p in folder.glob("*.ckpt"))
    return sorted(p.name for p in folder.glob("*.ckpt"))


def test_no_space_for_a_checkpoint_then_for_the_record_stops_twice_with_one_line_and_resumes_exactly(tmp_path, uninterrupted, caplog):
    run_dir = tmp_path / "run"
    with full_disk_at("epoch=0-step=6.ckpt"):  # torch's writer meets ENOSPC (its own RuntimeError, raised from it)
        assert main(["run", *COMMON, f"run_dir={run_dir}"]) == RESUMABLE_EXIT
    message = stop_line(caplog)
    assert f"no space left on the device of {run_dir / 'checkpoints'}" in message and "resume=auto" in message
    size = (run_dir / "checkpoints" / "epoch=0-step=4.ckpt").stat().st_size
    assert needed_bytes(message, "epoch=0-step=6.ckpt") == pytest.approx(size, rel=0.01)  # one more step's checkpoint
    assert intact_checkpoints(run_dir) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
    stopped = record(run_dir)
    assert stopped["status"] == "failed" and stopped["error"].startswith("DiskFull: no space left")
    before = (run_dir / "record.json").read_bytes()

    caplog.clear()
    with full_disk_at("record.json"):  # training finishes, its record finds no space
        assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == RESUMABLE_EXIT
    message = stop_line(caplog)
    assert f"no space left on the device of {run_dir}:" in message and needed_bytes(message, "record.json") > 1000
    assert (run_dir / "record.json").read_bytes() == before  # the earlier record, untouched
    assert not list(run_dir.glob("*.tmp-*"))

    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0  # space freed
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 8
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly


def test_no_space_for_the_weights_description_stops_with_one_line(tmp_path, caplog):
    run_dir = tmp_path / "run"
    with full_disk_at("model_config.json"):
        assert main(["run", *COMMON, "trainer.max_steps=2", f"run_dir={run_dir}"]) == RESUMABLE_EXIT
    assert needed_bytes(stop_line(caplog), "model_config.json") > 100
    assert record(run_dir)["status"] == "failed" and not (run_dir / "model_config.json").exists()
    assert main(["run", *COMMON, "trainer.max_steps=2", f"run_dir={run_dir}", "resume=auto"]) == 0
    assert record(run_dir)["status"] == "completed" and (run_dir / "model_config.json").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (skipped, saying why, where it cannot be mounted)."""
    try:
        with tmpfs(tmp_path / "disk", 64) as folder:
            yield folder
    except TmpfsUnavailable as why:
        pytest.skip(f"no tmpfs: {why}")


@pytest.mark.parametrize(
    "moment, step, name",
    [  # a checkpoint on a real full disk is also in the default suite's chaos test (test_chaos.py)
        pytest.param("step", 5, "epoch=0-step=6.ckpt", marks=pytest.mark.slow),
        ("validation", 8, "model.safetensors"),  # safetensors' error carries no errno: the free space decides
    ],
)
def test_a_real_full_disk_stops_with_one_line_and_resumes_exactly_once_space_is_freed(
    small_disk,
    uninterrupted,
    caplog,
    monkeypatch,
    moment,
    step,
    name,
):
    run_dir = small_disk / "run"
    monkeypatch.setattr(train, "build_trainer", train.build_trainer)  # inject() replaces it: restored after the test
    inject(moment, lambda s: s == step, fill_disk(small_disk, leave=256 * 1024))
    assert main(["run", *COMMON, f"run_dir={run_dir}"]) == RESUMABLE_EXIT
    message = stop_line(caplog)
    folder = run_dir / "checkpoints" if name.endswith(".ckpt") else run_dir
    assert f"no space left on the device of {folder}:" in message and needed_bytes(message, name) > 256 * 1024
    assert not (folder / name).exists()
    intact_checkpoints(run_dir)
    assert record(run_dir)["status"] == "failed"
    (small_disk / "ballast").unlink()  # space freed
    monkeypatch.undo()
    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]
    assert (run_dir / "model.safetensors").exists()
