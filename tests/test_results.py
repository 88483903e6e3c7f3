import json

import pytest

from mixbench.cli import main
from mixbench.results import SCHEMA, aggregate, load_records, render, write_record


def record(norm, value, seed=0, status="completed", task="vit_small", metric="val/top1", hib=True):
    return {
        "schema": SCHEMA, "task": task, "model": {"name": task}, "norm": {"label": norm, "placement": norm},
        "seed": seed, "status": status, "metrics": {metric: value}, "scale": "embedded",
        "primary_metric": {"name": metric, "higher_is_better": hib, "value": value},
        "dataset": {"name": "cifar10_embedded"},
    }


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = write_record(record("pre", 50.0), tmp_path / "a" / "record.json")
    assert json.loads(path.read_text())["metrics"] == {"val/top1": 50.0}
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_failed_write_keeps_the_previous_record(tmp_path):
    path = write_record(record("pre", 50.0), tmp_path / "record.json")
    with pytest.raises(TypeError, match="cannot serialize"):
        _raise_midway(path)
    assert json.loads(path.read_text())["metrics"] == {"val/top1": 50.0}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def _raise_midway(path):
    """Serialization that fails after part of the file has been written."""
    class Boom:
        def __str__(self):
            raise TypeError("cannot serialize")
    write_record({"value": Boom()}, path)


def test_aggregate_mean_std_and_best(tmp_path):
    recs = [record("pre", 50.0, 0), record("pre", 52.0, 1), record("mix(α=0.25)", 55.0, 0), record("mix(α=0.25)", 57.0, 1),
            record("post", float("nan"), 0, status="diverged")]
    table = aggregate(recs)
    (col,) = table.columns
    assert table.cells[("pre", col)].mean == 51.0
    assert table.cells[("pre", col)].std == pytest.approx(2 ** 0.5)
    assert table.best[col] == "mix(α=0.25)"
    assert table.cells[("post", col)].text() == "diverged"
    md = render(table, "md")
    assert "**56.00 ± 1.41 (n=2)**" in md and "51.00 ± 1.41 (n=2)" in md and "diverged" in md


def test_lower_is_better_picks_the_minimum():
    table = aggregate([record("pre", 30.0, metric="val/ppl", hib=False), record("mix(α=0.25)", 28.0, metric="val/ppl", hib=False)])
    assert table.best[table.columns[0]] == "mix(α=0.25)"


@pytest.mark.parametrize("fmt, marker", [("csv", "*56.00"), ("latex", r"\textbf{56.00"), ("md", "**56.00")])
def test_formats(fmt, marker):
    table = aggregate([record("pre", 50.0), record("mix(α=0.25)", 56.0)])
    assert marker in render(table, fmt)


def test_table_cli_skips_malformed_records(tmp_path, capsys):
    write_record(record("pre", 50.0), tmp_path / "runs" / "a" / "record.json")
    (tmp_path / "runs" / "b").mkdir(parents=True)
    (tmp_path / "runs" / "b" / "record.json").write_text("{not json")
    (tmp_path / "runs" / "c").mkdir()
    (tmp_path / "runs" / "c" / "record.json").write_text(json.dumps({"schema": SCHEMA}))
    records, problems = load_records(tmp_path)
    assert len(records) == 1 and len(problems) == 2
    assert main(["table", "--results-dir", str(tmp_path), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "| pre |" in out and "50.00" in out
