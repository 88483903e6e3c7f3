"""Several results folders in one table (``--results-dir A --results-dir B``) and the values of cells where no seed
finished (``(1367.42) 2/2 stalled``)."""

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.results.records import SCHEMA, run_identity, write_record
from mixbench.results.render import cell_rows, print_rich, render
from mixbench.results.sources import default_runs_dir, load_sources
from mixbench.results.table import aggregate


def lm_run(norm, ppl, seed=0, status="completed", lr=1e-3, folder="runs", started=None, **config):
    """An LM record as ``mixbench run`` writes it: a config with the run folder's own settings beside the recipe."""
    run_id = f"seed{seed}-{norm}-{lr}-{started}"
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "task": "llama_lm",
        "family": "lm",
        "model": {"name": "llama_tiny", "label": "llama_tiny"},
        "norm": {"label": norm, "placement": norm},
        "seed": seed,
        "status": status,
        "metrics": {"val/ppl": ppl, "val/loss": 7.0},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": ppl},
        "dataset": {"name": "textmix"},
        "scale": "embedded",
        "started_at": started or f"2026-01-0{seed + 1}T00:00:00+00:00",
        "config": {
            "seed": seed,
            "results_dir": folder,
            "run_dir": f"{folder}/runs/{run_id}",
            "resume": "auto" if folder == "refs" else None,
            "save_weights": folder == "refs",
            "checkpoint": {"every_n_steps": 50 if folder == "refs" else None},
            "checkpoint_every_n_steps": 100 if folder == "refs" else None,  # the key before checkpoint.every_n_steps
            "logger": "csv",
            "logger_options": {"wandb": {"project": folder}},
            "data": {
                "path": f"/data/{folder}/train.bin",
                "num_workers": 2 if folder == "refs" else 0,
                "num_proc": 4 if folder == "refs" else None,
                "batch_size": 8,
            },
            "optim": {"lr": lr},
            **config,
        },
    }


def write_all(folder: Path, records) -> Path:
    for r in records:
        write_record(r, folder / r["run_id"] / "record.json")
    return folder


# ---------------------------------------------------------------- stalled and diverged cells keep their measured value


SMOKE = [
    lm_run("pre", 1360.0, 0, "stalled"),
    lm_run("pre", 1374.84, 1, "stalled"),
    lm_run("post", 2500.0, 0, "diverged"),
    lm_run("post", float("nan"), 1, "diverged"),
    lm_run("mix", 30.0, 0),
    lm_run("mix", 1400.0, 1, "stalled"),
]


def test_a_cell_where_no_seed_finished_shows_what_it_measured_marked_in_every_format():
    table = aggregate(SMOKE)
    (col,) = table.columns
    assert table.cells[("pre", col)].summary() == "(1367.42) 2/2 stalled"
    assert table.cells[("post", col)].summary() == "(2500.00, n=1) 2/2 diverged"  # one seed left no finite value
    assert table.cells[("mix", col)].summary() == "30.00 (n=1) 1/2 stalled"  # a finished seed: its mean is the number
    assert table.best[col] == "mix" and table.cells[("pre", col)].mean is None  # a measured value is no sample
    assert "| (1367.42) 2/2 stalled |" in render(table, "md")
    latex = render(table, "latex")
    assert r"pre & (1367.42) 2/2 stalled \\" in latex and r"post & (2500.00, n=1) 2/2 diverged \\" in latex
    from rich.console import Console

    console = Console(record=True, width=200)
    print_rich(table, console)
    assert "(1367.42) 2/2 stalled" in console.export_text()


def test_csv_gives_the_measured_value_with_its_status_and_keeps_the_mean_over_finished_seeds():
    rows = {r["norm"]: r for r in csv.DictReader(io.StringIO(render(aggregate(SMOKE), "csv")))}
    assert (rows["pre"]["mean"], rows["pre"]["stalled"], float(rows["pre"]["stalled_value"])) == ("", "2", pytest.approx(1367.42))
    assert rows["pre"]["diverged_value"] == ""
    assert float(rows["post"]["diverged_value"]) == 2500.0 and rows["post"]["diverged"] == "2"
    assert float(rows["mix"]["mean"]) == 30.0 and float(rows["mix"]["stalled_value"]) == 1400.0


# ---------------------------------------------------------------- several results folders


def test_two_folders_pool_runs_that_differ_only_in_seed_and_run_folder_settings(tmp_path, capsys):
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, 0, folder="refs"), lm_run("post", 33.0, 0, folder="refs")])
    mine = write_all(tmp_path / "mine", [lm_run("pre", 32.0, 1, folder="runs"), lm_run("halfpre", 31.0, 0, folder="runs")])
    assert main(["table", "--results-dir", str(mine), "--results-dir", str(refs), "--format", "csv"]) == 0
    rows = {r["norm"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert len({r["recipe"] for r in rows.values()}) == 1 and rows["pre"]["recipe"] == ""  # one column: nothing sets them apart
    assert (rows["pre"]["n"], float(rows["pre"]["mean"])) == ("2", 31.0)  # seed 0 from refs, seed 1 from mine
    assert rows["pre"]["source"] == f"{mine};{refs}"
    assert (rows["post"]["source"], rows["halfpre"]["source"]) == (str(refs), str(mine))
    assert main(["table", "--results-dir", str(mine), "--results-dir", str(refs), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "31.00 ± 1.41 (n=2) src 1+2 |" in md and "33.00 (n=1) src 2 Δ" in md
    assert f"src 1 = {mine}, src 2 = {refs}" in md.splitlines()[-1]  # the legend names the folders


def test_runs_of_two_folders_that_differ_in_a_training_setting_get_columns_that_say_so(tmp_path):
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, s, folder="refs") for s in range(2)])
    mine = write_all(tmp_path / "mine", [lm_run("pre", 40.0, s, lr=3e-3, folder="runs") for s in range(2)])
    table = aggregate(load_sources([refs, mine])[0])
    assert sorted(c.rsplit(" · ", 1)[1] for c in table.columns) == ["optim.lr=0.001", "optim.lr=0.003"]
    by_lr = {c.rsplit("=", 1)[1]: table.cell_sources[("pre", c)] for c in table.columns}
    assert by_lr == {"0.001": (str(refs),), "0.003": (str(mine),)}
    assert all(table.cells[("pre", c)].n == 2 for c in table.columns)


def test_rows_of_one_column_whose_folders_differ_in_a_setting_say_so(tmp_path, capsys):
    """Each placement may run at its own lr in one column (a follow-up at each one's best lr); where the rows come
    from folders that differ so, the legend and the csv name the setting and each folder's values."""
    refs = write_all(tmp_path / "refs", [lm_run(n, 30.0, 0, folder="refs") for n in ("pre", "post")])
    mine = write_all(tmp_path / "mine", [lm_run("halfpre", 31.0, 0, lr=3e-3)])
    assert main(["table", "--results-dir", str(mine), "--results-dir", str(refs), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 3 and {r["source_differs"] for r in rows} == {"optim.lr: src 1 0.003 | src 2 0.001"}
    table = aggregate(load_sources([mine, refs])[0])
    assert "differ in a training setting (no cell pools them): " in render(table, "md").splitlines()[-1]
    assert aggregate(load_sources([refs, write_all(tmp_path / "same", [lm_run("halfpre", 31.0, 0)])])[0]).source_notes == {}


def test_what_a_run_resolved_at_its_start_sets_it_apart_where_the_config_leaves_it_open(tmp_path):
    """trainer.precision=null is bf16-mixed on a GPU and 32-true on a CPU: two folders of the same config differ."""
    gpu = [{**lm_run("pre", 30.0, s, folder="refs"), "effective": {"precision": "bf16-mixed", "global_batch_size": 8}} for s in range(2)]
    cpu = [
        {
            **lm_run("pre", 31.0, s, folder="runs", started=f"2026-02-0{s + 1}"),
            "effective": {"precision": "32-true", "global_batch_size": 8},
        }
        for s in range(2)
    ]
    table = aggregate(load_sources([write_all(tmp_path / "refs", gpu), write_all(tmp_path / "mine", cpu)])[0])
    assert sorted(c.rsplit(" · ", 1)[1] for c in table.columns) == ["effective.precision=32-true", "effective.precision=bf16-mixed"]


def test_the_same_run_found_twice_counts_once(tmp_path, capsys):
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, 0, folder="refs"), lm_run("pre", 31.0, 1, folder="refs")])
    copy = tmp_path / "mine"
    shutil.copytree(refs, copy)  # the same runs, copied beside the originals
    write_all(copy, [lm_run("pre", 35.0, 1, folder="runs", started="2026-02-01T00:00:00+00:00")])  # a re-run of seed 1: a repeat
    records, problems = load_sources([refs, copy, refs / ".." / "refs"])  # refs given twice, once spelled otherwise
    assert not problems and len(records) == 3 and {r["_source"] for r in records} == {str(refs), str(copy)}
    cell = aggregate(records).cells[("pre", aggregate(records).columns[0])]
    assert (cell.n, cell.records, cell.repeats) == (2, 3, 1)
    assert main(["table", "--results-dir", str(copy), "--results-dir", str(tmp_path), "--format", "tidy"]) == 0
    rows = [r for r in csv.DictReader(io.StringIO(capsys.readouterr().out)) if r["metric"] == "val/ppl"]
    assert sorted(r["source"] for r in rows) == [str(copy)] * 3  # each run once, where found first: the copies


def test_run_identity_is_the_run_id_seed_and_start_else_the_config_seed_and_start():
    run = lm_run("pre", 30.0, 0)
    assert run_identity(run) == run_identity({**run, "_path": "elsewhere/record.json", "_source": "elsewhere"})
    assert run_identity(run) != run_identity({**run, "started_at": "2026-03-01T00:00:00+00:00"})
    no_id = {k: v for k, v in run.items() if k != "run_id"}
    assert run_identity(no_id) == run_identity(dict(no_id)) != run_identity({**no_id, "config": {**run["config"], "optim": {"lr": 1}}})
    fresh = {k: v for k, v in no_id.items() if k != "started_at"}
    assert run_identity(fresh) != run_identity(dict(fresh))  # nothing to tell two such runs apart: both count


def test_a_second_folder_that_does_not_exist_is_one_error_naming_it(tmp_path, caplog):
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, 0)])
    with pytest.raises(ConfigError, match="nope: no such folder"):
        load_sources([refs, tmp_path / "nope"])
    assert main(["table", "--results-dir", str(refs), "--results-dir", str(tmp_path / "nope")]) == 2
    assert "nope: no such folder" in caplog.text


def test_a_table_of_one_folder_reads_the_same_whichever_folder_holds_the_runs(tmp_path, capsys):
    """No source is named where there is one: the tables of a grid and of its copy are the same text."""
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, 0), lm_run("post", 31.0, 0)])
    shutil.copytree(refs, tmp_path / "copy")
    table = aggregate(load_sources([refs])[0])
    assert "src 1" not in render(table, "md") and {r["source"] for r in cell_rows(table)} == {None}
    for fmt in ("csv", "md"):
        texts = []
        for folder in (refs, tmp_path / "copy"):
            assert main(["table", "--results-dir", str(folder), "--format", fmt]) == 0
            texts.append(capsys.readouterr().out)
        assert texts[0] == texts[1] and str(refs) not in texts[0], fmt
    assert main(["table", "--results-dir", str(refs), "--format", "tidy"]) == 0
    assert {r["source"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))} == {""}  # run_dir names each run


def test_the_default_folder_is_where_mixbench_run_puts_runs(tmp_path, monkeypatch, capsys):
    from mixbench.training.config import runs_root

    assert default_runs_dir() == runs_root()
    monkeypatch.chdir(tmp_path)
    write_all(tmp_path / default_runs_dir(), [lm_run("pre", 30.0, 0)])
    assert main(["table", "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert (row["norm"], float(row["mean"])) == ("pre", 30.0)


def test_plot_lr_reads_several_folders(tmp_path):
    refs = write_all(tmp_path / "refs", [lm_run("pre", p, 0, lr=lr, folder="refs") for p, lr in ((40.0, 1e-4), (30.0, 1e-3))])
    mine = write_all(tmp_path / "mine", [lm_run("pre", 35.0, 0, lr=3e-3)])
    out = tmp_path / "figs" / "lr.png"
    assert main(["plot", "lr", "--results-dir", str(refs), "--results-dir", str(mine), "--out", str(out)]) == 0
    assert [p.name for p in out.parent.iterdir()] == ["lr_lm.png"]
    from mixbench.results.lr_curves import lr_figures
    from mixbench.results.sources import load_sources

    (fig,) = lr_figures(load_sources([refs, mine])[0]).values()  # the figure names its folders
    (ax,) = fig.axes
    assert f"src 1 = {refs}" in ax.get_title() and f"src 2 = {mine}" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "pre (src 1+2)"


def test_what_reading_adds_to_a_record_is_never_written_back(tmp_path):
    """``mixbench reclassify`` and ``search --reuse-from`` write records they read: the folder, recipe and settings a
    table attaches stay in memory."""
    refs = write_all(tmp_path / "refs", [lm_run("pre", 30.0, 0), lm_run("pre", 31.0, 1, lr=3e-3)])
    records, _ = load_sources([refs])
    aggregate(records)
    assert {"_path", "_source", "_recipe", "_settings"} <= set(records[0])
    again = write_record(records[0], tmp_path / "copy" / "record.json")
    assert not [k for k in json.loads(again.read_text()) if k.startswith("_")]
