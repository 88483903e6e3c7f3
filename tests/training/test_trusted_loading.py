"""Checkpoints cannot run code: every pickled file a user hands in (init_from=, resume=auto, resume_from=, export, eval,
analyze) goes through torch's restricted unpickler with mixbench's allowlist; a crafted one is refused with one line
naming it and the refused global, and what its unpickling would do (create a file) never happens."""

import logging
import os
import pathlib
from pathlib import Path

import pytest
import torch
from _support.weights import TINY_LM
from omegaconf import OmegaConf
from safetensors.torch import load_file

from mixbench.cli.app import main
from mixbench.core.errors import UntrustedFile
from mixbench.training.checkpointing import AtomicCheckpointIO, newest_checkpoint
from mixbench.training.config import compose
from mixbench.training.trained import load_trained
from mixbench.training.trusted import refused_globals
from mixbench.training.weights import load_description, load_weights


class Touch:
    """Unpickled, it creates ``path`` (``pathlib.Path.touch``)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


class Shell:
    """Unpickled, it runs a shell command that creates ``path``."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


PAYLOADS = {"Path.touch": (Touch, "pathlib"), "os.system": (Shell, "system")}


def crafted(path: Path, marker: Path, payload=Touch) -> Path:
    """A file shaped like a Lightning checkpoint of a mixbench run whose unpickling creates ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": 2, "epoch": 0, "state_dict": {"model.head.weight": torch.zeros(2, 2)}, "loops": payload(marker)}, path)
    return path


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def assert_refused(caplog, file: Path, refused: str) -> None:
    (message,) = error_lines(caplog)
    assert str(file) in message and refused in message and "was refused" in message and "\n" not in message, message


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("name", ["epoch=0-step=2.ckpt", "model.pt", "weights.pth"])
def test_a_crafted_file_is_refused_by_every_reader_and_nothing_runs(tmp_path, payload, name):
    cls, refused = PAYLOADS[payload]
    marker = tmp_path / "ran"
    file = crafted(tmp_path / "run" / "checkpoints" / name, marker, cls)
    assert any(refused in g for g in refused_globals(file))
    for read in (load_weights, load_description, AtomicCheckpointIO().load_checkpoint):
        with pytest.raises(UntrustedFile, match=rf"{file}.*was refused: it needs .*{refused}.*nothing of it was run"):
            read(file)
        assert not marker.exists(), read
    torch.load(file, weights_only=False)  # the payload is real: an unrestricted load runs it
    assert marker.exists()


def test_a_crafted_legacy_model_pt_in_a_run_folder_is_refused(tmp_path):
    marker = tmp_path / "ran"
    crafted(tmp_path / "run" / "model.pt", marker)
    (tmp_path / "run" / "config.yaml").write_text("task: {family: lm}\nmodel: {name: llama_debug, num_layers: 4}\nnorm: {placement: pre}\n")
    for read in (load_weights, load_description):
        with pytest.raises(UntrustedFile, match="model.pt was refused"):
            read(tmp_path / "run")
    assert not marker.exists()


RLHF = ["task=rlhf_remax", "model=llama_tiny", "model.vocab_size=8192", "data.path=embedded", "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize(
    "args, setting, source",
    [
        (TINY_LM, "init_from", "checkpoints/last.ckpt"),
        (TINY_LM, "init_from", "model.pt"),  # given as the run folder, whose legacy model.pt is the weights
        (RLHF, "rlhf.reward_model", "checkpoints/last.ckpt"),
    ],
)
def test_a_run_given_a_crafted_file_exits_2_before_any_run_folder(tmp_path, caplog, args, setting, source):
    marker, results = tmp_path / "ran", tmp_path / "results"
    file = crafted(tmp_path / "theirs" / source, marker)
    caplog.clear()
    given = file if source.endswith(".ckpt") else file.parent
    assert main(["run", *args, f"{setting}={given}", f"results_dir={results}"]) == 2
    assert_refused(caplog, file, "pathlib")
    assert not marker.exists() and not results.exists()


@pytest.mark.parametrize("name", ["epoch=0-step=2.ckpt", "last.ckpt"])
def test_resume_auto_refuses_a_crafted_checkpoint_and_writes_nothing(tmp_path, caplog, name):
    marker, run_dir = tmp_path / "ran", tmp_path / "run"
    file = crafted(run_dir / "checkpoints" / name, marker)
    with pytest.raises(UntrustedFile, match=f"resume=auto: the checkpoint {file} was refused" if "step=" in name else "last.ckpt"):
        newest_checkpoint(run_dir)
    caplog.clear()
    assert main(["run", *TINY_LM, f"run_dir={run_dir}", "resume=auto"]) == 2
    assert_refused(caplog, file, "pathlib")
    assert not marker.exists()
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".run.")) == ["checkpoints"]  # no config, no record


def test_resume_from_a_crafted_checkpoint_is_refused_and_nothing_runs(tmp_path, caplog):
    marker = tmp_path / "ran"
    file = crafted(tmp_path / "theirs.ckpt", marker)
    caplog.clear()
    assert main(["run", *TINY_LM, f"resume_from={file}", f"results_dir={tmp_path / 'results'}"]) == 2
    assert_refused(caplog, file, "pathlib")
    assert not marker.exists()
    assert not (tmp_path / "results").exists()  # refused before the run folder (and its failed record) is made


def test_a_missing_resume_from_is_one_line_before_any_run_folder(tmp_path, caplog):
    caplog.clear()
    missing = tmp_path / "gone.ckpt"
    assert main(["run", *TINY_LM, f"resume_from={missing}", f"results_dir={tmp_path / 'results'}"]) == 2
    assert error_lines(caplog) == [
        f"resume_from={missing}: no such file; give a checkpoint a run wrote (<run>/checkpoints/*.ckpt), "
        "or resume=auto with run_dir= to continue a run folder from its newest one"
    ]
    assert not (tmp_path / "results").exists()


def test_export_eval_and_analyze_refuse_a_crafted_file(tmp_path, caplog):
    marker = tmp_path / "ran"
    ckpt = crafted(tmp_path / "theirs.ckpt", marker)
    run = tmp_path / "run"  # a run folder whose config is real and whose legacy model.pt is crafted
    crafted(run / "model.pt", marker)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(compose(TINY_LM)))
    commands = {
        "export": (["export", str(ckpt), "--out", str(tmp_path / "hf")], ckpt),
        "eval": (["eval", "--run", str(ckpt), "--protocol", "generate", "--data", "embedded", "--out", str(tmp_path / "eval")], ckpt),
        "analyze": (["analyze", "angular", "--run", str(run)], run / "model.pt"),
    }
    for command, (args, file) in commands.items():
        caplog.clear()
        assert main(args) == 2, command
        assert_refused(caplog, file, "pathlib")
        assert not marker.exists(), command
    assert not (tmp_path / "hf").exists() and not (tmp_path / "eval").exists() and not (run / "analysis").exists()


@pytest.mark.parametrize("run", ["tiny_lm_run", "tiny_vit_run"], ids=["lm", "vit"])
def test_our_own_checkpoints_need_nothing_outside_the_allowlist(run, request):
    """What a run checkpoints (model, optimizer, schedule, loops, data position, generator states, callbacks) is
    tensors and plain values: the restricted unpickler loads every checkpoint, and the last one rebuilds the final model.
    The runs: the session's 2-step LLaMA and ViT, checkpointed at every step (_support/shared_runs.py; read only)."""
    run_dir = request.getfixturevalue(run)
    files = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert [p.name for p in files] == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "last.ckpt"]
    for file in files:
        assert refused_globals(file) == [], file
        checkpoint = AtomicCheckpointIO().load_checkpoint(file)
        assert checkpoint["global_step"] == (1 if "step=1" in file.name else 2) and checkpoint["callbacks"]
    trained = load_trained(files[-1], tokenizer="embedded")  # as export and eval rebuild a model from a .ckpt
    assert trained.description["family"] == ("lm" if run == "tiny_lm_run" else "vision")
    final = load_file(str(run_dir / "model.safetensors"))
    assert all(torch.equal(v, final[k]) for k, v in trained.model.state_dict().items())


def test_a_legacy_model_pt_of_either_torch_format_still_loads(tmp_path):
    """Run folders of the first versions hold a pickled state_dict (model.pt), in torch's zip or older format."""
    from mixbench import build_model

    model = build_model("llama_debug", norm="post", seed=3)
    for zipped in (True, False):
        folder = tmp_path / f"zip={zipped}"
        folder.mkdir()
        torch.save(model.state_dict(), folder / "model.pt", _use_new_zipfile_serialization=zipped)
        (folder / "config.yaml").write_text("task: {family: lm}\nmodel: {name: llama_debug, num_layers: 4}\nnorm: {placement: post}\n")
        assert load_description(folder)["norm"] == {"placement": "post"}
        state, _, file = load_weights(folder)
        assert file.name == "model.pt" and state.keys() == model.state_dict().keys()
        torch.testing.assert_close(state["head.weight"], model.head.weight, rtol=0, atol=0)
