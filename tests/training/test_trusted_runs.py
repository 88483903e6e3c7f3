"""Records you can trust.  Checkpoints are data, and so are their paths: a checkpoint whose callback state names a
folder outside the run (Lightning's ModelCheckpoint would remove it as "the previous last checkpoint") deletes nothing,
through ``resume_from=`` and ``run_dir=… resume=auto``.  A resume continues only its own config, and a new run never
replaces another's folder."""

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from _support.faults import TmpfsUnavailable, full_disk_at, tmpfs
from _support.ladder import RUNS
from _support.weights import TINY_LM
from omegaconf import OmegaConf
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.results.records import write_record
from mixbench.training.checkpointing import AtomicCheckpointIO, newest_checkpoint
from mixbench.training.config import compose, replay
from mixbench.training.trained import tokenizer_of

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


def files(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("finished", [False, True], ids=["unfinished", "finished"])
def test_resume_auto_of_a_run_folder_under_another_lr_is_exit_2_naming_it_and_writes_nothing(tmp_path, four_steps, caplog, finished):
    run_dir = tmp_path / "run"
    shutil.copytree(four_steps, run_dir)
    if not finished:
        (run_dir / "record.json").unlink()
    before = files(run_dir)
    caplog.clear()
    assert main(["run", *STEPS, "optim.lr=0.01", f"run_dir={run_dir}", "resume=auto"]) == 2
    (message,) = error_lines(caplog)
    assert "optim.lr: 0.001 → 0.01" in message and str(run_dir) in message and "\n" not in message, message
    assert files(run_dir) == before  # nothing written: no lock, no config, no record
    assert main(["run", *STEPS, f"run_dir={run_dir}", "resume=auto"]) == 0  # its own config continues (or is done)
    assert json.loads((run_dir / "record.json").read_text())["config"]["optim"]["lr"] == 0.001


def test_resume_from_a_checkpoint_of_another_configs_run_is_exit_2_before_any_folder(tmp_path, four_steps, caplog):
    results = tmp_path / "results"
    caplog.clear()
    checkpoint = four_steps / "checkpoints" / "epoch=0-step=2.ckpt"
    assert main(["run", *STEPS, "optim.lr=0.01", f"resume_from={checkpoint}", f"results_dir={results}"]) == 2
    (message,) = error_lines(caplog)
    assert "optim.lr: 0.001 → 0.01" in message and f"resume_from={checkpoint}" in message, message
    assert not results.exists()


def test_a_new_run_into_an_unfinished_runs_folder_is_exit_2_and_replaces_nothing(tmp_path, four_steps, caplog):
    run_dir = tmp_path / "run"
    shutil.copytree(four_steps, run_dir)
    (run_dir / "record.json").unlink()
    before = files(run_dir)
    caplog.clear()
    assert main(["run", *STEPS, "optim.lr=0.01", f"run_dir={run_dir}"]) == 2
    (message,) = error_lines(caplog)
    assert "already holds another run" in message and "resume=auto" in message, message
    assert files(run_dir) == before


def handed_over(tmp_path: Path, key: str, value: str) -> Path:
    """A run folder whose real ``config.yaml`` has ``key`` (dotted) set to the raw YAML ``value``."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    cfg = OmegaConf.to_container(compose(TINY_LM))
    section, name = key.split(".")
    cfg[section][name] = "PLACEHOLDER"
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg).replace("PLACEHOLDER", value))
    return folder


@pytest.mark.parametrize(
    "key, value",
    [
        ("slurm.partition", "${oc.env:MB_TEST_SECRET}"),
        ("data.tokenizer", "'${oc.decode:\"[1, 2]\"}'"),
        ("slurm.account", "${slurm.partition}"),
    ],
    ids=["oc.env", "oc.decode", "node"],
)
def test_a_replayed_config_resolves_nothing_of_the_readers_environment(tmp_path, caplog, monkeypatch, key, value):
    monkeypatch.setenv("MB_TEST_SECRET", "hunter2")
    folder, results = handed_over(tmp_path, key, value), tmp_path / "results"
    for command in (["run", "--config", str(folder), f"results_dir={results}"], ["analyze", "angular", "--run", str(folder)]):
        caplog.clear()
        assert main(command) == 2, command
        (message,) = error_lines(caplog)
        assert key in message and "interpolation" in message and "hunter2" not in message, message
    with pytest.raises(ConfigError, match=key):
        tokenizer_of(folder)  # eval and export: the tokenizer of a run folder without a record
    assert not results.exists() and not (folder / "analysis").exists()


def test_interpolations_typed_on_the_command_line_stay_the_users_own(tmp_path, monkeypatch):
    monkeypatch.setenv("MB_TEST_SECRET", "mine")
    folder = handed_over(tmp_path, "slurm.partition", "gpu")
    assert replay(folder, ["slurm.partition=${oc.env:MB_TEST_SECRET}"]).slurm.partition == "mine"


def test_a_yaml_tag_in_a_handed_over_config_is_one_line(tmp_path, caplog):
    folder = handed_over(tmp_path, "slurm.partition", "!!python/object/apply:os.system ['true']")
    for command in (["run", "--config", str(folder), f"results_dir={tmp_path / 'results'}"], ["analyze", "angular", "--run", str(folder)]):
        caplog.clear()
        assert main(command) == 2, command
        (message,) = error_lines(caplog)
        assert "not a saved config" in message and "Traceback" not in message, message


def test_a_last_ckpt_that_is_no_checkpoint_is_one_line_and_leaves_no_record(tmp_path, caplog):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save({"foo": 1}, run_dir / "checkpoints" / "last.ckpt")
    caplog.clear()
    assert main(["run", *STEPS, f"run_dir={run_dir}", "resume=auto"]) == 2
    (message,) = error_lines(caplog)
    assert "last.ckpt is not a Lightning checkpoint" in message and "Traceback" not in message, message
    assert not (run_dir / "record.json").exists() and not (run_dir / "config.yaml").exists()


def test_a_folder_named_like_a_checkpoints_temporary_file_is_left_alone(tmp_path):
    folder = tmp_path / "run" / "checkpoints" / "epoch=0-step=2.ckpt.tmp-1-abcdef"
    folder.mkdir(parents=True)
    assert newest_checkpoint(tmp_path / "run") is None
    assert folder.is_dir()


def test_weights_with_a_description_that_is_not_json_or_of_another_dtype_are_refused_in_one_line(tmp_path, four_steps, caplog):
    state = load_file(str(four_steps / "model.safetensors"))
    bad_meta = tmp_path / "meta.safetensors"
    save_file(state, str(bad_meta), metadata={"mixbench": "{bad"})
    run = tmp_path / "run"
    shutil.copytree(four_steps, run)
    (run / "model_config.json").write_text("{bad")
    with safe_open(str(four_steps / "model.safetensors"), framework="pt") as f:
        metadata = f.metadata()
    int8 = tmp_path / "int8.safetensors"
    save_file({k: v.to(torch.int8) for k, v in state.items()}, str(int8), metadata=metadata)
    for command, expected in (
        (["run", *TINY_LM, f"init_from={bad_meta}", f"results_dir={tmp_path / 'r1'}"], "metadata is not a model description"),
        (["export", str(run), "--out", str(tmp_path / "hf")], "model_config.json is not a model description"),
        (["analyze", "angular", "--run", str(run)], "model_config.json is not a model description"),
        (["run", *TINY_LM, f"init_from={int8}", f"results_dir={tmp_path / 'r2'}"], "dtype weights vs model"),
    ):
        caplog.clear()
        assert main(command) == 2, command
        (message,) = error_lines(caplog)
        assert expected in message and "Traceback" not in message, message
    assert not (tmp_path / "hf").exists()
    for results in (tmp_path / "r1", tmp_path / "r2"):  # no refusal leaves a record, nor the folder made for it
        assert not results.exists() or not list(results.rglob("seed*")), list(results.rglob("*"))


@pytest.mark.parametrize(
    "command, folder, name",
    [
        (["analyze", "grad-norm", "--batches", "1", "--run"], "analysis", "grad_norm.json"),
        (["eval", "--protocol", "generate", "--data", "embedded", "--tasks", "boolq", "--limit", "1", "--run"], "eval", "generate.json"),
    ],
    ids=["analyze", "eval"],
)
def test_a_full_disk_in_analyze_or_eval_is_exit_75_and_leaves_no_empty_file(tmp_path, four_steps, caplog, command, folder, name):
    run = tmp_path / "run"
    shutil.copytree(four_steps, run)
    record = (run / "record.json").read_bytes()
    caplog.clear()
    with full_disk_at(name):
        assert main([*command, str(run)]) == 75
    (message,) = error_lines(caplog)
    assert "no space left" in message and "Traceback" not in message, message
    assert not list((run / folder).glob(f"{name}*")) and (run / "record.json").read_bytes() == record


def test_a_token_cache_holding_an_object_array_is_one_line(tmp_path):
    import numpy as np

    from mixbench.data.tokens import TokenStore

    (tmp_path / "meta.json").write_text('{"dtype": "uint16"}')
    np.zeros(4, dtype=np.uint16).tofile(tmp_path / "part-00000.bin")
    np.save(tmp_path / "part-00000.len.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ConfigError, match=r"token cache .* is damaged .*remove that folder"):
        TokenStore(tmp_path)


def test_a_fifo_named_config_yaml_blocks_no_resume(tmp_path, caplog):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.mkfifo(run_dir / "config.yaml")
    os.mkfifo(run_dir / "record.json")
    caplog.clear()
    assert main(["run", *STEPS, f"run_dir={run_dir}", "resume=auto"]) == 2  # it would block reading either
    (message,) = error_lines(caplog)
    assert "config.yaml: not a regular file" in message, message


def test_a_finished_run_on_a_read_only_mount_is_one_line_for_every_command(tmp_path, four_steps, caplog):
    mount = tmp_path / "ro"
    try:
        with tmpfs(mount, 64):
            shutil.copytree(four_steps, mount / "run")
            for i, record in enumerate(RUNS):  # a folder of records for plot ladder
                write_record(record, mount / "plain" / str(i) / "record.json")
            remount = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True)
            if remount.returncode:
                pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
            run = mount / "run"
            for command in (
                ["run", *STEPS, f"run_dir={run}", "resume=auto"],
                ["analyze", "grad-norm", "--batches", "1", "--run", str(run)],
                ["eval", "--protocol", "generate", "--data", "embedded", "--tasks", "boolq", "--limit", "1", "--run", str(run)],
                ["export", str(run)],
                ["plot", "ladder", "--results-dir", str(mount / "plain")],
            ):
                caplog.clear()
                assert main(command) == 2, command
                (message,) = error_lines(caplog)
                assert "Read-only file system" in message and "Traceback" not in message, (command, message)
    except TmpfsUnavailable as err:
        pytest.skip(str(err))


def test_an_export_that_fails_for_lack_of_space_leaves_no_folder_and_a_retry_works(tmp_path, four_steps, caplog, monkeypatch):
    import errno

    import mixbench.export.hf as hf

    run = tmp_path / "run"
    shutil.copytree(four_steps, run)
    write = hf._tokenizer_files

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hf, "_tokenizer_files", no_space)
    caplog.clear()
    assert main(["export", str(run)]) == 75
    (message,) = error_lines(caplog)
    assert "no space left" in message and "Traceback" not in message, message
    assert not [p.name for p in run.iterdir() if p.name.startswith("hf")]  # neither hf/ nor its temporary folder
    monkeypatch.setattr(hf, "_tokenizer_files", write)
    assert main(["export", str(run)]) == 0  # the retry
    assert (run / "hf" / "model.safetensors").is_file()
