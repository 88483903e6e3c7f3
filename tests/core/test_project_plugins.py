"""Your placement everywhere: a placement a project folder registers (a task's task.py, the project's plugins.py) is
known to every command run from that folder, on any task — the project of docs/extending.md, driven through the CLI —
and its code goes along when a run of it is exported."""

import csv
import io
import json
from pathlib import Path

import pytest
import torch
from _support.models import make_run
from _support.project import HALFPRE, TINY_LM

from mixbench.cli.app import main
from mixbench.core.project import select_project
from mixbench.core.tasks import load_project_plugins
from mixbench.layers import NormSpec


def assert_exported_logits(folder: Path, run: Path) -> None:
    """transformers rebuilds the exported ``folder`` (trust_remote_code) with the logits of ``run``'s model."""
    AutoModelForCausalLM = pytest.importorskip("transformers").AutoModelForCausalLM

    from mixbench.training.trained import load_trained

    hf = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    ours = load_trained(run).model.eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, ours(ids), atol=1e-5, rtol=1e-5)


def test_list_from_the_project_shows_its_placement(project, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "halfpre" in out and "x + F(N(x))/2" in out


def test_the_project_placement_runs_on_a_stock_task_beside_the_stock_ones(project, tmp_path, capsys, caplog):
    results = tmp_path / "results"
    for norm in ("pre", "halfpre"):
        assert main(["run", "task=llama_lm", f"norm={norm}", *TINY_LM, f"results_dir={results}"]) == 0
    records = {r["norm"]["label"]: r for r in (json.loads(p.read_text()) for p in results.rglob("record.json"))}
    assert set(records) == {"pre", "halfpre"} and {r["task"] for r in records.values()} == {"llama_lm"}
    assert records["halfpre"]["norm"]["plan"] == ["halfpre", "halfpre"] and records["halfpre"]["status"] == "completed"
    capsys.readouterr()
    assert main(["table", "--results-dir", str(results), "--format", "csv"]) == 0
    cells = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {c["norm"] for c in cells} == {"pre", "halfpre"}
    column = ("task", "model", "dataset", "scale", "recipe", "budget", "metric")
    assert len({tuple(c[k] for k in column) for c in cells}) == 1  # the stock task's column, shared with pre
    run_dir = Path(records["halfpre"]["run_dir"])
    assert main(["analyze", "grad-norm", "--run", str(run_dir), "--batches", "1"]) == 0
    (profile,) = json.loads((run_dir / "analysis" / "grad_norm.json").read_text())
    assert len(profile["blocks"]) == 2
    # export carries the project's placement code: transformers rebuilds the run's model, same logits.  First the pre
    # run, exported to a folder of the same name and loaded in this process: transformers keys remote code by the
    # folder's name, and must not build the halfpre folder's model with the pre folder's code
    assert main(["export", records["pre"]["run_dir"], "--out", str(tmp_path / "pre" / "hf")]) == 0
    assert_exported_logits(tmp_path / "pre" / "hf", Path(records["pre"]["run_dir"]))
    assert main(["export", str(run_dir), "--out", str(tmp_path / "hf")]) == 0
    assert_exported_logits(tmp_path / "hf", run_dir)
    assert "from .mb_plugin_tasks_my_lm import HalfPre" in (tmp_path / "hf" / "mb_plugins.py").read_text()
    assert "from .mb_layers import BlockPlacement, register_placement" in (tmp_path / "hf" / "mb_plugin_tasks_my_lm.py").read_text()


def test_a_placement_module_using_mixbench_s_lazy_api_exports(tmp_path, registry):
    """``from mixbench import register_placement`` (a name the package imports on first use) is bundled from its module."""
    root = tmp_path / "lab"
    root.mkdir()
    plugin = HALFPRE.replace(
        "from mixbench.layers import BlockPlacement, register_placement",
        "from mixbench import register_placement\nfrom mixbench.layers import BlockPlacement",
    )
    (root / "plugins.py").write_text(plugin.replace('"halfpre"', '"lazypre"'))
    load_project_plugins(root)
    run = make_run(tmp_path / "run", NormSpec(placement="lazypre"))
    assert main(["--project", str(root), "export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert_exported_logits(tmp_path / "hf", run)


@pytest.mark.parametrize(
    ("line", "named"),
    [("import omegaconf", "imports omegaconf at module level"), ("from mixbench.core.tasks import discover_tasks", "mixbench.core.tasks")],
)
def test_export_refuses_a_placement_module_that_needs_more_than_torch_and_mixbench_layers(tmp_path, registry, caplog, line, named):
    root = tmp_path / "lab"
    root.mkdir()
    plugin = HALFPRE.replace("from mixbench.layers", f"{line}\nfrom mixbench.layers").replace('"halfpre"', '"omegapre"')
    (root / "plugins.py").write_text(plugin)
    load_project_plugins(root)
    run = make_run(tmp_path / "run", NormSpec(placement="omegapre"))
    assert main(["--project", str(root), "export", str(run), "--out", str(tmp_path / "hf")]) == 2
    message = caplog.records[-1].getMessage()
    assert "norm placement 'omegapre' cannot be exported" in message and named in message and str(root / "plugins.py") in message
    assert "move the placement class into a module that imports only torch and mixbench.layers" in message and "\n" not in message
    assert not (tmp_path / "hf").exists()


def test_a_project_plugins_module_registers_for_every_task(tmp_path, registry, capsys):
    root = tmp_path / "lab"
    (root / "configs" / "norm").mkdir(parents=True)
    (root / "plugins.py").write_text(HALFPRE.replace('"halfpre"', '"quarterpre"').replace("0.5 *", "0.25 *"))
    (root / "configs" / "norm" / "quarterpre.yaml").write_text("placement: quarterpre\n")
    assert main(["--project", str(root), "run", "task=vit_tiny", "norm=quarterpre", "--print-config"]) == 0
    assert "placement: quarterpre" in capsys.readouterr().out


def test_an_unknown_placement_says_where_it_was_looked_for(project, tmp_path, monkeypatch, caplog):
    (project / "configs" / "norm").mkdir(parents=True, exist_ok=True)
    (project / "configs" / "norm" / "typo.yaml").write_text("placement: halfpro\n")
    assert main(["run", "task=llama_lm", "norm.placement=halfpro", "--print-config"]) == 2
    line = caplog.records[-1].getMessage()
    assert "unknown norm placement 'halfpro'" in line and "did you mean 'halfpre'" in line
    assert f"project {project} (tasks/*/task.py, plugins.py)" in line and "\n" not in line
    for named in ("norm=halfpro", "norm=typo"):  # the command line, a config file: the same line, with the project hint
        assert main(["run", "task=llama_lm", named, "--print-config"]) == 2
        assert caplog.records[-1].getMessage() == line
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", "task=llama_lm", "norm.placement=quarterpre", "--print-config"]) == 2
    assert "no project folder" in caplog.records[-1].getMessage() and "--project DIR" in caplog.records[-1].getMessage()


def test_a_project_task_of_a_family_its_plugins_module_registers(tmp_path, registry):
    """The project's code is imported before its tasks are checked: a task whose family the project's ``plugins.py``
    registers composes (the tasks' YAML is not validated before the code that makes it valid has run)."""
    from mixbench.core import families

    root = tmp_path / "lab"
    (root / "tasks" / "my_task").mkdir(parents=True)
    (root / "tasks" / "my_task" / "task.yaml").write_text("name: my_task\nbase: llama_lm\nfamily: mylm\nmodel: mylm_debug\n")
    (root / "plugins.py").write_text(
        "import dataclasses\nfrom mixbench.core.families import get_family, register_family\nlm = get_family('lm')\n"
        "register_family(dataclasses.replace(lm, name='mylm', models={'mylm_debug': lm.models['llama_debug']}))\n"
    )
    try:
        assert main(["--project", str(root), "run", "task=my_task", "--print-config"]) == 0
    finally:
        families._FAMILIES.pop("mylm", None)


def test_composing_a_config_knows_the_project_s_data_loader(tmp_path, registry):
    """Config composition itself imports the project's code (as a SLURM job's run does, without the CLI): a data
    group whose loader the project's ``plugins.py`` registers composes."""
    from mixbench import data
    from mixbench.training.config import compose

    root = tmp_path / "lab"
    (root / "configs" / "data").mkdir(parents=True)
    (root / "configs" / "data" / "mytext.yaml").write_text("loader: mytext\nname: mytext\n")
    registering = "from mixbench.data import register_datamodule\nregister_datamodule('mytext', 'mixbench.data.text:TextDataModule')\n"
    (root / "plugins.py").write_text(registering)
    select_project(root)
    try:
        assert compose(["task=llama_lm", "data=mytext"]).data.loader == "mytext"
    finally:
        data._DATAMODULES.pop("mytext", None)
