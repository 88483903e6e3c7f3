"""Checkpoints are data, and so are their paths: a checkpoint whose callback state names a folder outside the run
(Lightning's ModelCheckpoint would remove it as "the previous last checkpoint") deletes nothing, through
``resume_from=`` and ``run_dir=… resume=auto``."""

import logging
import shutil
from pathlib import Path

import pytest
import torch
from test_weights import TINY_LM

from mixbench.cli.app import main
from mixbench.training.checkpointing import AtomicCheckpointIO

STEPS = [*TINY_LM, "trainer.max_steps=4", "checkpoint.every_n_steps=2", "checkpoint.keep_last=null"]


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory) -> Path:
    """A real run of 4 steps, checkpointed at steps 2 and 4."""
    run_dir = tmp_path_factory.mktemp("real") / "run"
    assert main(["run", *STEPS, f"run_dir={run_dir}"]) == 0
    return run_dir


def sentinel(tmp_path: Path) -> Path:
    folder = tmp_path / "sentinel"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "keep.txt").write_text("keep")
    return folder


def craft(source: Path, target: Path, victim: Path) -> Path:
    """``source`` (a real checkpoint) with its ModelCheckpoint state edited: ``dirpath`` removed, ``last_model_path``
    naming ``victim`` through fsspec's ``local://`` protocol."""
    checkpoint = torch.load(source, weights_only=True)
    (key,) = [k for k in checkpoint["callbacks"] if "Checkpoint" in k and "Preemption" not in k]
    state = checkpoint["callbacks"][key]
    del state["dirpath"]
    state["last_model_path"] = f"local://{victim}"
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, target)
    return target


def test_resume_from_a_checkpoint_naming_a_folder_outside_the_run_deletes_nothing(tmp_path, four_steps, caplog):
    victim = sentinel(tmp_path)
    crafted = craft(four_steps / "checkpoints" / "epoch=0-step=2.ckpt", tmp_path / "crafted.ckpt", victim)
    run_dir = tmp_path / "new"
    assert main(["run", *STEPS, f"resume_from={crafted}", f"run_dir={run_dir}"]) == 0
    assert (victim / "inner" / "keep.txt").read_text() == "keep"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_resume_auto_from_its_own_folders_checkpoint_naming_a_folder_outside_drops_that_state(tmp_path, four_steps, caplog):
    victim = sentinel(tmp_path)
    run_dir = tmp_path / "run"
    shutil.copytree(four_steps, run_dir)
    (run_dir / "record.json").unlink()  # unfinished: its newest checkpoint is the crafted one at step 2
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        path.unlink()
    craft(four_steps / "checkpoints" / "epoch=0-step=2.ckpt", run_dir / "checkpoints" / "epoch=0-step=2.ckpt", victim)
    caplog.clear()
    assert main(["run", *STEPS, f"run_dir={run_dir}", "resume=auto"]) == 0
    assert (victim / "inner" / "keep.txt").read_text() == "keep"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "outside the run folder" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings


def test_the_checkpoint_io_removes_only_checkpoint_files_inside_the_run_folder(tmp_path):
    run_dir, victim = tmp_path / "run", sentinel(tmp_path)
    (run_dir / "checkpoints").mkdir(parents=True)
    own = run_dir / "checkpoints" / "epoch=0-step=2.ckpt"
    own.write_bytes(b"x")
    (run_dir / "checkpoints" / "folder.ckpt").mkdir()
    io = AtomicCheckpointIO(run_dir)
    for path in (f"local://{victim}", str(victim), f"{run_dir}/checkpoints/../../sentinel", str(run_dir / "checkpoints" / "folder.ckpt")):
        io.remove_checkpoint(path)
    AtomicCheckpointIO().remove_checkpoint(str(own))  # no run folder: removes nothing
    assert (victim / "inner" / "keep.txt").exists() and (run_dir / "checkpoints" / "folder.ckpt").is_dir() and own.exists()
    io.remove_checkpoint(str(own))
    assert not own.exists()
