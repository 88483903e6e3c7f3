"""Grids that survive any fault (see ``chaos_harness.py``), and readers of a results folder that eight runs write into."""

import csv
import io
import json
import logging
import random
import threading

import pytest
from _support.chaos_harness import Chaos, Launcher, cell_count, plan, stop_problems

from mixbench.cli.app import main
from mixbench.results.records import SCHEMA, load_records, write_record

log = logging.getLogger(__name__)


def survived(report, faults: int) -> None:
    log.warning("chaos: %s", report.summary())  # the figures docs/operations.md quotes
    assert report.problems == []
    assert report.injected >= faults and report.faults["full disk"] == 1 and report.faults["corrupt record"] >= 1
    assert report.faults["second writer"] >= 1 and report.faults["truncation"] >= 1 and report.faults["SIGTERM"] >= 1
    assert report.exact == report.total == cell_count()


def test_a_grid_survives_ten_faults_and_every_record_is_exact(tmp_path):
    survived(Chaos(tmp_path, faults=12, seed=0).run(), faults=10)  # a few more planned: the grid may end before the last


@pytest.mark.parametrize("faults", [12, 220])
def test_the_fault_plan_fixes_every_kind_and_puts_the_first_of_each_early(faults):
    """The kinds are planned, not drawn while the grid runs (the short grid once met no SIGTERM: its draws depended on
    timing): the counts add up, about two SIGKILLs a SIGTERM, and each kind's first fault but SIGKILL's early."""
    for seed in range(20):
        kinds = plan(faults, random.Random(seed))
        assert len(kinds) == faults and kinds.count("full disk") == 1
        assert kinds.count("second writer") == kinds.count("truncation") == max(1, faults // 10)
        assert kinds.count("corrupt record") == max(1, faults // 50)
        assert 1.5 <= kinds.count("SIGKILL") / kinds.count("SIGTERM") <= 2.5
        for kind in ("second writer", "truncation", "corrupt record", "full disk", "SIGTERM"):
            assert kinds.index(kind) < max(5, faults // 3), (seed, kind, kinds)


@pytest.mark.slow
def test_a_grid_survives_two_hundred_faults_and_every_record_is_exact(tmp_path):
    survived(Chaos(tmp_path, faults=220, seed=1, steps=48).run(), faults=200)  # longer runs: room for 200 faults


WRITER = [  # a sweep of tiny ViT runs: records written at different moments
    "run",
    "-m",
    "task=vit_tiny",
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "trainer.max_steps=2",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "save_weights=false",
]


def test_table_and_load_records_read_a_results_folder_that_eight_runs_write_into(tmp_path, capsys):
    """``load_records`` in a loop here, ``mixbench table`` in a loop in a thread beside it, while eight sweeps write
    sixteen records: never half a record, never a record that goes away, never a failed table.  The folder exists
    before the first run writes (a results folder that does not exist yet is `--results-dir`'s exit 2)."""
    results = tmp_path / "results"
    results.mkdir()
    launcher = Launcher(tmp_path / "logs")
    writers = [launcher.start([*WRITER, f"seed={2 * i},{2 * i + 1}", f"results_dir={results}"]) for i in range(8)]
    writing, tables = threading.Event(), []
    writing.set()

    def table_loop() -> None:
        while writing.is_set():
            tables.append(main(["table", "--results-dir", str(results), "--format", "csv"]))

    reader = threading.Thread(target=table_loop)
    reader.start()
    counts = [0]
    try:
        while any(w.running for w in writers):
            records, problems = load_records(results)
            assert problems == []  # never half a record
            assert len(records) >= counts[-1]  # nor one that goes away
            counts.append(len(records))
    finally:
        writing.clear()
        reader.join()
    assert [problem for w in writers for problem in stop_problems(w, expected=(0,))] == []
    assert set(tables) == {0} and len(tables) > 2
    assert len({c for c in counts if 0 < c < 16}) >= 3  # read while the records came in
    records, problems = load_records(results)
    assert problems == [] and len(records) == 16
    capsys.readouterr()
    assert main(["table", "--results-dir", str(results), "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))  # one cell: vit_tiny × pre, 16 seeds
    assert (row["n"], row["records"]) == ("16", "16")


def test_a_record_rewritten_in_a_loop_is_always_read_whole(tmp_path):
    """The guarantee the readers above rely on, at a rate the grids cannot reach: a reader thread never reads part of
    a record while it is rewritten 300 times."""
    path, seen, writing = tmp_path / "run" / "record.json", [], threading.Event()
    record = {"schema": SCHEMA, "status": "completed", "metrics": {f"m{i}": float(i) for i in range(2000)}}
    write_record(record, path)
    writing.set()

    def read_loop() -> None:
        while writing.is_set():
            try:
                seen.append(json.loads(path.read_text()) == record)
            except ValueError:  # half a file
                seen.append(False)

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for _ in range(300):
            write_record(record, path)
    finally:
        writing.clear()
        reader.join()
    assert len(seen) > 300 and all(seen)
