"""A run stopped by Ctrl-C (status ``interrupted``, mixbench/training/preemption.py) is a not-finished outcome of the
results code: read from disk, counted per cell like a crash, in the CSV, the budget views and the lr figures."""

import csv
import io
import logging

from _support.records import lm_run, record, with_validations

from mixbench.cli.app import main
from mixbench.results.records import load_records, write_record
from mixbench.results.table import aggregate, at_budget


def _folder(tmp_path, records):
    for i, r in enumerate(records):
        write_record(r, tmp_path / str(i) / "record.json")
    return str(tmp_path)


def _cell(records, row="pre"):
    table = aggregate(records)
    return table.cells[(row, table.columns[0])]


def test_an_interrupted_seed_is_counted_apart_and_left_out_of_the_mean(tmp_path, capsys, caplog):
    folder = _folder(tmp_path, [record("pre", 30.0, 0), record("pre", 12.0, 1, status="interrupted")])
    records, problems = load_records(folder)
    assert problems == [] and sorted(r["status"] for r in records) == ["completed", "interrupted"]
    with caplog.at_level(logging.WARNING):
        assert main(["table", "--results-dir", folder, "--format", "md"]) == 0
    assert "| pre | **30.00 (n=1) 1/2 interrupted** |" in capsys.readouterr().out
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no "skipped unreadable record: unknown status"
    assert main(["table", "--results-dir", folder, "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert (row["mean"], row["n"], row["n_seeds"], row["failed"], row["interrupted"]) == ("30.0", "1", "2", "0", "1")


def test_a_resumed_run_counts_by_its_finished_record():
    interrupted = record("pre", 12.0, 0, status="interrupted", started="2026-01-01T00:00:00+00:00")
    finished = record("pre", 30.0, 0, started="2026-01-02T00:00:00+00:00")
    cell = _cell([interrupted, finished])
    assert cell.outcomes == {0: "completed"} and cell.values == [30.0] and cell.interrupted == 0
    later_stop = record("pre", 12.0, 0, status="interrupted", started="2026-01-03T00:00:00+00:00")
    assert _cell([finished, later_stop]).outcomes == {0: "completed"}  # a repeat stopped by Ctrl-C overrules nothing
    crashed = record("pre", None, 0, status="failed", started="2026-01-02T00:00:00+00:00")
    assert _cell([interrupted, crashed]).outcomes == {0: "failed"}  # neither trained to the end: the latest says how it stopped
    assert _cell([crashed, later_stop]).summary() == "1/1 interrupted (1 repeat)"


def test_an_interrupted_run_stays_interrupted_at_every_budget():
    stopped = with_validations(record("pre", 12.0, 0, status="interrupted"), [(25, 20.0)])
    assert at_budget(stopped, 0.25)["status"] == "interrupted"  # not a finished run at 25 %, as a crash is not
    assert at_budget(stopped, 1.0)["status"] == "interrupted"


def test_an_lr_where_every_seed_was_interrupted_gets_its_own_edge_marker():
    from mixbench.results.lr_curves import lr_figures

    runs = [lm_run("pre", 30.0, 2.0, 1e-3), lm_run("pre", 12.0, 1.0, 3e-3, status="interrupted")]
    table = aggregate(runs, best_over="optim.lr")
    sweep = table.sweeps[("pre", table.columns[0])]
    assert sweep.best == 1e-3 and sweep.outcome(3e-3) == "interrupted"
    (fig,) = lr_figures(runs).values()
    ax = fig.axes[0]
    assert [line.get_marker() for line in ax.get_lines() if line.get_markerfacecolor() == "none"] == ["D"]
    assert "no seed finished: interrupted" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_sweep_where_no_lr_finished_counts_its_interrupted_lrs():
    runs = [lm_run("pre", 12.0, 1.0, 1e-3, status="interrupted"), lm_run("pre", 12.0, 1.0, 3e-3, status="failed")]
    table = aggregate([*runs, lm_run("pre", 12.0, 1.0, 1e-2, status="interrupted")], best_over="optim.lr")
    assert table.sweeps[("pre", table.columns[0])].summary() == "1/3 lrs failed 2/3 lrs interrupted"
