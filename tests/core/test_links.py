"""No write follows a link: every file mixbench writes into a folder that may have come from elsewhere (run folders,
``analysis/``, ``eval/``, ``hf/``, figures, manifests, locks, holders) is replaced through a temporary file or opened
refusing a symbolic link.  A planted link is one line, exit 2, and its target is untouched."""

import logging
from pathlib import Path

import pytest
from _support.ladder import RUNS
from _support.weights import TINY_LM

from mixbench.cli.app import main
from mixbench.core.errors import LinkRefused
from mixbench.core.storage import atomic_write, atomic_write_text, open_append, replacing_folder, save_figure
from mixbench.results.records import write_record

TARGET = "the target's own text\n"


def plant(link: Path, tmp_path: Path, folder: bool = False) -> Path:
    """A symbolic link ``link`` to a file (or folder) outside, whose content the test checks afterwards."""
    target = tmp_path / "outside" / link.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        target.mkdir()
        (target / "keep.txt").write_text(TARGET)
    else:
        target.write_text(TARGET)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return target


def untouched(target: Path) -> bool:
    if target.is_dir():
        return [p.name for p in target.iterdir()] == ["keep.txt"] and (target / "keep.txt").read_text() == TARGET
    return target.read_text() == TARGET


def one_refusal(caplog, link: Path) -> str:
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(link) in message and "symbolic link" in message and "\n" not in message, message
    return message


def test_every_writer_of_the_core_refuses_a_link_and_leaves_its_target(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    writers = {
        "atomic_write_text": lambda p: atomic_write_text(p, "new"),
        "atomic_write": lambda p: atomic_write(p, lambda f: f.write(b"new")),
        "save_figure": lambda p: save_figure(figure, p),
        "open_append": lambda p: open_append(p).write("new"),
    }
    for name, write in writers.items():
        link = tmp_path / "run" / f"{name}.png"
        target = plant(link, tmp_path)
        with pytest.raises(LinkRefused, match="symbolic link"):
            write(link)
        assert untouched(target) and link.is_symlink(), name
    link = tmp_path / "run" / "hf"
    target = plant(link, tmp_path, folder=True)
    with pytest.raises(LinkRefused), replacing_folder(link) as folder:
        (folder / "x").write_text("new")
    assert untouched(target)
    plt.close(figure)


@pytest.mark.parametrize("name", [".run.holder", ".run.lock", "record.json", "checkpoints", "logs"])
def test_a_run_into_a_folder_with_a_planted_link_is_exit_2_and_writes_nothing_through_it(tmp_path, caplog, name):
    run_dir = tmp_path / "run"
    target = plant(run_dir / name, tmp_path, folder=name in ("checkpoints", "logs"))
    caplog.clear()
    assert main(["run", *TINY_LM, "checkpoint.every_n_steps=1", f"run_dir={run_dir}", "resume=auto"]) == 2
    one_refusal(caplog, run_dir / name)
    assert untouched(target)
    assert [p.name for p in run_dir.iterdir() if not p.name.startswith(".run.")] in ([], [name])  # no config, no record


@pytest.fixture
def finished(tiny_lm_run) -> Path:
    """A finished run: the session's 2-step LLaMA (``weights.TINY_LM``, _support/shared_runs.py), which each test copies
    before it plants a link."""
    return tiny_lm_run


@pytest.mark.parametrize(
    "command, link, folder",
    [
        (["analyze", "grad-norm", "--batches", "1", "--run"], "analysis/grad_norm.json", 0),
        (["analyze", "grad-norm", "--batches", "1", "--run"], "analysis/grad_norm.png", 0),
        (["eval", "--protocol", "generate", "--data", "embedded", "--tasks", "boolq", "--limit", "1", "--run"], "eval/generate.json", 0),
        (["export", "--format", "hf"], "hf", 1),
        (["analyze", "grad-norm", "--batches", "1", "--run"], "analysis", 1),
        (["eval", "--protocol", "generate", "--data", "embedded", "--tasks", "boolq", "--limit", "1", "--run"], "eval", 1),
    ],
    ids=["analysis-json", "analysis-png", "eval", "export", "analysis-folder", "eval-folder"],
)
def test_reading_commands_of_a_run_refuse_a_link_planted_in_it(tmp_path, finished, caplog, command, link, folder):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    target = plant(run_dir / link, tmp_path, folder)
    record = (run_dir / "record.json").read_bytes()
    caplog.clear()
    assert main([*command, str(run_dir)]) == 2
    one_refusal(caplog, run_dir / link)
    assert untouched(target) and (run_dir / "record.json").read_bytes() == record


def test_plot_ladder_refuses_a_figure_name_planted_as_a_link(tmp_path, caplog):
    for i, r in enumerate(RUNS):
        write_record(r, tmp_path / "runs" / str(i) / "record.json")
    out = tmp_path / "figs"
    target = plant(out / "ladder_delta_lm.png", tmp_path)
    caplog.clear()
    assert main(["plot", "ladder", "--results-dir", str(tmp_path / "runs"), "--out", str(out)]) == 2
    one_refusal(caplog, out / "ladder_delta_lm.png")
    assert untouched(target)


def test_a_link_planted_as_the_loggers_metrics_csv_is_refused(tmp_path, caplog):
    run_dir = tmp_path / "run"
    target = plant(run_dir / "logs" / "metrics.csv", tmp_path)
    caplog.clear()
    assert main(["run", *TINY_LM, f"run_dir={run_dir}", "resume=auto"]) == 2
    one_refusal(caplog, run_dir / "logs" / "metrics.csv")
    assert untouched(target)
