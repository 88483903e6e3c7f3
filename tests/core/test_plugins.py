"""The core is family- and placement-agnostic: a task plugin brings a third model family (tests/_support/plugins/), and
`mixbench run`, `table` and `analyze` work on it without any core change."""

import json
import shutil
from pathlib import Path

import pytest
from _support.paths import PLUGINS
from _support.weights import TINY_VIT

from mixbench.cli.app import main
from mixbench.core.project import select_project

PLUGINS = PLUGINS


@pytest.fixture
def toy_project(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(PLUGINS, project)
    yield project
    select_project(None)


def test_a_plugin_family_runs_tables_and_analyzes(toy_project, tmp_path, capsys):
    results = tmp_path / "results"
    for norm in ("pre", "post"):
        assert main(["--project", str(toy_project), "run", "task=toyseq", f"norm={norm}", f"results_dir={results}"]) == 0
    records = [json.loads(p.read_text()) for p in sorted(results.rglob("record.json"))]
    assert [r["status"] for r in records] == ["completed", "completed"]
    assert {r["family"] for r in records} == {"toyseq"} and {r["norm"]["label"] for r in records} == {"pre", "post"}
    assert all(r["dataset"]["name"] == "toyseq" and r["primary_metric"]["name"] == "val/acc" for r in records)
    throughput = records[0]["throughput"]  # the family's items (tokens: 32 × 8 a batch), 8 steps an epoch, 2 epochs
    assert throughput["perf/items_per_sec"] > 0 and (throughput["device"], throughput["world_size"]) == ("cpu", 1)
    assert [(e["epoch"], e["steps"], e["items"]) for e in throughput["epochs"]] == [(0, 8, 2048), (1, 8, 2048)]
    capsys.readouterr()
    assert main(["table", "--results-dir", str(results), "--format", "md"]) == 0
    table = capsys.readouterr().out
    assert "toyseq" in table and "| post |" in table
    run_dir = Path(records[0]["run_dir"])
    assert main(["--project", str(toy_project), "analyze", "grad-norm", "--run", str(run_dir), "--batches", "2"]) == 0
    profile = json.loads((run_dir / "analysis" / "grad_norm.json").read_text())[0]
    assert len(profile["blocks"]) == 2 and all(b["attn"] > 0 and b["mlp"] > 0 for b in profile["blocks"])


def test_the_plugin_family_is_unknown_without_its_project(toy_project):
    from mixbench.core.errors import ConfigError
    from mixbench.training.config import compose

    with pytest.raises(ConfigError, match="unknown task 'toyseq'"):
        compose(["task=toyseq"])
    select_project(toy_project)
    cfg = compose(["task=toyseq", "norm=mix", "norm.alpha=0.5"])
    assert cfg.task.family == "toyseq" and cfg.data.loader == "toyseq" and cfg.data.n_train == 256  # loader defaults
    with pytest.raises(ConfigError, match="did you mean 'n_train'"):
        compose(["task=toyseq", "data.n_trian=3"])


def test_python_api_compose_run_load_records(tmp_path):
    import mixbench

    cfg = mixbench.compose(
        task="vit_tiny",
        norm="mix",
        **{
            "norm.alpha": 0.5,
            "model.num_layers": 2,
            "model.hidden_size": 32,
            "model.num_heads": 2,
            "trainer.max_steps": 2,
            "trainer.max_epochs": 1,
            "trainer.limit_val_batches": 1,
            "trainer.enable_progress_bar": False,
            "divergence.unigram_floor": False,  # too few steps to learn: off; the check's own tests are in test_learning_check.py
            "results_dir": str(tmp_path),
        },
    )
    assert cfg == mixbench.compose(
        [
            "task=vit_tiny",
            "norm=mix",
            "norm.alpha=0.5",
            *TINY_VIT,
            f"results_dir={tmp_path}",
        ]
    )
    record = mixbench.run(cfg)
    assert record["status"] == "completed" and record["norm"]["plan"] == ["post", "pre"]
    frame = mixbench.load_records(tmp_path)
    assert len(frame) == 1 and frame.loc[0, "norm"] == "mix(α=0.5)"
    assert frame["val/top1"].dtype.kind == "f" and frame.loc[0, "val/top1"] == record["metrics"]["val/top1"]
