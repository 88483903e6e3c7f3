import csv
import io
import json
import math

import pytest
from _support.paths import REPO_ROOT
from _support.records import record, with_validations

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.results.frames import load_records_frame, records_frame
from mixbench.results.records import SCHEMA, load_records, write_record
from mixbench.results.render import _wrap_label, cells_frame, print_rich, render
from mixbench.results.table import aggregate, find_baseline


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
    recs = [
        record("pre", 50.0, 0),
        record("pre", 52.0, 1),
        record("mix(α=0.25)", 55.0, 0),
        record("mix(α=0.25)", 57.0, 1),
        record("post", float("nan"), 0, status="diverged"),
    ]
    table = aggregate(recs)
    (col,) = table.columns
    assert table.cells[("pre", col)].mean == 51.0
    assert table.cells[("pre", col)].std == pytest.approx(2**0.5)
    assert table.best[col] == "mix(α=0.25)"
    assert table.cells[("post", col)].text() == "1/1 diverged"
    md = render(table, "md")
    # Δ = 5, SE = sqrt(2/2 + 2/2), dof = 2, t_{0.975, 2} = 4.3027: 5 ± 6.0849, contains 0: no mark
    assert "**56.00 ± 1.41 (n=2) Δ +5.00 [−1.08, 11.08]**" in md and "| 51.00 ± 1.41 (n=2) |" in md and "1/1 diverged" in md


def test_lower_is_better_picks_the_minimum():
    table = aggregate([record("pre", 30.0, metric="val/ppl", hib=False), record("mix(α=0.25)", 28.0, metric="val/ppl", hib=False)])
    assert table.best[table.columns[0]] == "mix(α=0.25)"


@pytest.mark.parametrize("fmt, marker", [("latex", r"\textbf{56.00 (n=1) $\Delta$ +6.00}"), ("md", "**56.00 (n=1) Δ +6.00**")])
def test_formats(fmt, marker):
    table = aggregate([record("pre", 50.0), record("mix(α=0.25)", 56.0)])
    text = render(table, fmt)
    assert marker in text
    assert "confidence interval" in text.splitlines()[-1]  # the legend under the table


def test_significance_mark_only_where_the_interval_excludes_zero():
    # pre 30, 31, 32; far: 27, 28, 29 (Δ −3, Welch [−5.27, −0.73]); near: 28, 29, 30 (Δ −2, [−4.27, 0.27])
    recs = [record("pre", v, s) for s, v in enumerate((30.0, 31.0, 32.0))]
    recs += [record("mix(α=0.25)", v, s) for s, v in enumerate((27.0, 28.0, 29.0))]
    recs += [record("post", v, s) for s, v in enumerate((28.0, 29.0, 30.0))]
    table = aggregate(recs)
    (col,) = table.columns
    far, near = table.cells[("mix(α=0.25)", col)], table.cells[("post", col)]
    assert far.delta.significant and far.delta.dof == pytest.approx(4.0)
    assert far.delta_text() == "Δ −3.00 [−5.27, −0.73]*"
    assert near.delta.significant is False and near.delta_text() == "Δ −2.00 [−4.27, 0.27]"
    assert table.cells[("pre", col)].delta is None  # the baseline has no Δ
    md = render(table, "md")
    assert md.count(r"]\*") == 1 and r"−0.73]\*" in md


def test_repeats_of_a_seed_are_one_sample():
    recs = [
        record("pre", 30.0, 0, started="2026-01-01T10:00:00+00:00"),
        record("pre", 30.2, 0, started="2026-01-02T10:00:00+00:00"),
        record("pre", 31.0, 1),
    ]
    cell = aggregate(recs).cells[("pre", aggregate(recs).columns[0])]
    assert (cell.n, cell.n_seeds, cell.records, cell.repeats) == (2, 2, 3, 1)
    assert cell.mean == pytest.approx((30.1 + 31.0) / 2) and cell.std == pytest.approx(abs(31.0 - 30.1) / 2**0.5)
    assert cell.summary() == "30.55 ± 0.64 (n=2 seeds, 1 repeat)"
    only_repeats = aggregate([record("pre", 30.0, 0), record("pre", 30.2, 0)])
    assert only_repeats.cells[("pre", only_repeats.columns[0])].summary() == "30.10 (n=1 seed, 1 repeat)"  # no std of repeats


def test_a_seed_counts_by_its_latest_record_and_a_crash_decides_nothing():
    recs = [
        record("pre", 30.0, 0, started="2026-01-01T00:00:00+00:00"),
        record("pre", float("nan"), 0, status="diverged", started="2026-01-02T00:00:00+00:00"),  # re-run diverged
        record("pre", 31.0, 1, started="2026-01-01T00:00:00+00:00"),
        record("pre", None, 1, status="failed", started="2026-01-03T00:00:00+00:00"),  # later crash: seed 1 stays finished
        record("pre", None, 2, status="failed"),
    ]
    table = aggregate(recs)
    cell = table.cells[("pre", table.columns[0])]
    assert cell.outcomes == {0: "diverged", 1: "completed", 2: "failed"}
    assert cell.values == [31.0]
    assert cell.summary() == "31.00 (n=1 seed, 2 repeats) 1/3 diverged 1/3 failed"


def test_diverged_and_stalled_seeds_are_counted_and_the_mean_is_over_finished_seeds(tmp_path):
    recs = [
        record("pre", 30.0, 0),
        record("pre", 32.0, 1),
        record("pre", 30.0, 2),
        record("mix(α=0.25)", 28.0, 0),
        record("mix(α=0.25)", 29.0, 1),
        record("mix(α=0.25)", float("nan"), 2, status="diverged"),
        record("mix(α=0.25)", 1e3, 3, status="stalled"),
        record("post", 28.0, 0, status="completed", with_value=False),
    ]
    table = aggregate(recs)
    (col,) = table.columns
    mix = table.cells[("mix(α=0.25)", col)]
    assert (mix.n, mix.n_seeds, mix.diverged, mix.stalled) == (2, 4, 1, 1) and mix.mean == 28.5
    assert mix.summary() == "28.50 ± 0.71 (n=2) 1/4 diverged 1/4 stalled"
    assert table.cells[("post", col)].text() == "1/1 diverged"  # "completed" without its primary metric
    # the stalled status is accepted from disk; anything else is not
    write_record(record("pre", 1e3, 5, status="stalled"), tmp_path / "a" / "record.json")
    write_record(record("pre", 1e3, 6, status="exploded"), tmp_path / "b" / "record.json")
    records, problems = load_records(tmp_path)
    assert [r["status"] for r in records] == ["stalled"] and "unknown status 'exploded'" in problems[0]


def test_csv_has_numeric_columns(tmp_path, capsys):
    import pandas as pd

    recs = [record("pre", v, s) for s, v in enumerate((30.0, 31.0, 32.0))]
    recs += [record("mix(α=0.25)", v, s) for s, v in enumerate((27.0, 28.0, 29.0))]
    recs += [record("post", float("nan"), 0, status="diverged"), record("post", 29.0, 1)]
    for i, r in enumerate(recs):
        write_record(r, tmp_path / str(i) / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--format", "csv"]) == 0
    rows = {row["norm"]: row for row in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    numeric = (
        "higher_is_better",
        "mean",
        "std",
        "n",
        "n_seeds",
        "records",
        "repeats",
        "diverged",
        "stalled",
        "failed",
        "delta",
        "ci_low",
        "ci_high",
        "dof",
        "confidence",
        "significant",
        "best",
    )
    for row in rows.values():
        for name in numeric:
            assert row[name] == "" or isinstance(float(row[name]), float), (name, row[name])
    mix, post, pre = rows["mix(α=0.25)"], rows["post"], rows["pre"]
    assert float(mix["mean"]) == 28.0 and float(mix["std"]) == 1.0 and float(mix["n"]) == 3
    assert float(mix["delta"]) == -3.0 and float(mix["ci_low"]) == pytest.approx(-5.2666, abs=1e-3)
    assert float(mix["ci_high"]) == pytest.approx(-0.7334, abs=1e-3) and float(mix["significant"]) == 1 and float(mix["best"]) == 0
    assert (post["n"], post["n_seeds"], post["diverged"], post["delta"], post["ci_low"], post["significant"]) == (
        "1",
        "2",
        "1",
        "-2.0",
        "",
        "",
    )
    assert pre["baseline"] == "pre" and pre["delta"] == "" and float(pre["best"]) == 1
    assert pre["task"] == "vit_small" and pre["dataset"] == "cifar10_embedded" and pre["metric"] == "val/top1"
    frame = cells_frame(aggregate(load_records(tmp_path)[0]))  # the same numbers as a DataFrame
    assert frame.set_index("norm")["delta"].to_dict() == pytest.approx({"pre": math.nan, "mix(α=0.25)": -3.0, "post": -2.0}, nan_ok=True)
    assert frame["significant"].tolist()[1:] == [pd.NA, True] and frame["significant"].dtype == "boolean"


def test_missing_baseline_gives_no_delta(capsys, tmp_path):
    recs = [
        record("pre", 50.0, 0),
        record("pre", 52.0, 1),
        record("mix(α=0.25)", 55.0, 0),
        record("mix(α=0.25)", 57.0, 1),
        record("post", 40.0, 0, task="other"),
        record("post", 41.0, 1, task="other"),
    ]  # a column without pre
    table = aggregate(recs, baseline="sandwich")
    assert all(cell.delta is None for cell in table.cells.values())
    assert "Δ" not in render(table, "md").split("\n\n")[0] and "No baseline row 'sandwich'" in render(table, "md")
    table = aggregate(recs)  # pre: present in one column only
    assert table.baseline_of == {
        "other · other · cifar10_embedded [embedded]": None,
        "vit_small · vit_small · cifar10_embedded [embedded]": "pre",
    }
    assert table.cells[("post", "other · other · cifar10_embedded [embedded]")].delta is None
    assert table.cells[("mix(α=0.25)", "vit_small · vit_small · cifar10_embedded [embedded]")].delta.diff == 5.0
    for i, r in enumerate(recs):
        write_record(r, tmp_path / str(i) / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--format", "csv", "--baseline", "sandwich"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 3 and all(r["delta"] == r["ci_low"] == r["baseline"] == "" for r in rows)


def test_baseline_matches_the_label_or_the_label_without_its_parameters():
    rows = ["pre[layernorm]", "mix(α=0.25)", "post"]
    assert find_baseline("post", rows) == "post"
    assert find_baseline("mix", rows) == "mix(α=0.25)"
    assert find_baseline("pre", rows) is None  # not pre[layernorm] ...
    assert find_baseline("pre[layernorm]", rows) == "pre[layernorm]"  # ... unless given exactly
    with pytest.raises(ConfigError, match="matches several rows"):
        find_baseline("mix", ["mix(α=0.25)", "mix(α=0.5)"])
    table = aggregate([record("mix(α=0.25)", 50.0), record("pre", 56.0)], baseline="mix")
    (col,) = table.columns
    assert table.cells[("pre", col)].delta.diff == 6.0 and table.cells[("pre", col)].delta.baseline == "mix(α=0.25)"


def test_tidy_has_one_row_per_run_and_metric(tmp_path, capsys):
    for i, (norm, seed) in enumerate([("pre", 0), ("pre", 1), ("mix(α=0.25)", 0)]):
        rec = record(norm, 50.0 + i, seed)
        rec["metrics"]["val/top5"] = 90.0 + i
        write_record(rec, tmp_path / str(i) / "record.json")
    crashed = record("mix(α=0.25)", None, 1, status="failed")
    crashed["metrics"] = {}
    write_record(crashed, tmp_path / "3" / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--format", "tidy"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 3 * 2 + 1
    assert {(r["norm"], r["seed"], r["metric"]) for r in rows} == {
        *((n, s, m) for n, s in (("pre", "0"), ("pre", "1"), ("mix(α=0.25)", "0")) for m in ("val/top1", "val/top5")),
        ("mix(α=0.25)", "1", "val/top1"),
    }
    assert all(float(r["value"]) > 0 for r in rows if r["status"] == "completed")
    failed = next(r for r in rows if r["status"] == "failed")
    assert failed["value"] == "" and failed["primary"] == "1"
    assert {r["primary"] for r in rows if r["metric"] == "val/top5"} == {"0"}


def test_records_frame_columns_and_dtypes(tmp_path):
    import pandas as pd

    write_record(record("pre", 50.0, 0, started="2026-01-01T00:00:00+00:00"), tmp_path / "a" / "record.json")
    rerun = record("pre", 52.0, 0, started="2026-01-02T00:00:00+00:00")
    rerun["metrics"]["val/loss"] = 1.5
    write_record(rerun, tmp_path / "b" / "record.json")
    write_record(record("post", float("nan"), 1, status="diverged"), tmp_path / "c" / "record.json")
    frame, problems = load_records_frame(tmp_path)
    assert not problems and len(frame) == 3
    assert list(frame.columns) == [
        "task",
        "family",
        "model",
        "dataset",
        "scale",
        "norm",
        "seed",
        "repeat",
        "status",
        "primary_metric",
        "primary_value",
        "higher_is_better",
        "wall_time_s",
        "run_dir",
        "source",
        "val/loss",
        "val/top1",
    ]
    assert frame["source"].isna().all()  # one results folder: not named (mixbench.results.sources names several)
    for name in ("primary_value", "wall_time_s", "val/loss", "val/top1"):
        assert pd.api.types.is_float_dtype(frame[name]), name
    assert pd.api.types.is_integer_dtype(frame["seed"]) and pd.api.types.is_integer_dtype(frame["repeat"])
    assert frame["repeat"].tolist() == [0, 1, 0]  # the second record of pre, seed 0 is a re-run
    assert frame["val/top1"].tolist()[:2] == [50.0, 52.0] and math.isnan(frame["val/top1"][2])
    assert math.isnan(frame["val/loss"][0]) and frame["val/loss"][1] == 1.5
    assert frame["run_dir"].tolist() == [str(tmp_path / d) for d in "abc"]
    assert frame["family"].tolist() == ["vision"] * 3 and frame["model"][0] == "vit_small"
    assert records_frame([]).columns.tolist()[:3] == ["task", "family", "model"]


def test_rich_table_keeps_brackets_and_prints_the_legend(tmp_path):
    from rich.console import Console

    table = aggregate(
        [record("pre", v, s) for s, v in enumerate((30.0, 31.0))] + [record("mix(α=0.25)", v, s) for s, v in enumerate((27.0, 28.0))]
    )
    console = Console(record=True, width=200)
    print_rich(table, console)
    text = " ".join(console.export_text().split())  # the legend wraps at the table's width
    assert "[embedded]" in text and "[low, high]" in text and "Welch 95 %" in text and "Δ −3.00 [−6.04, 0.04]" in text


COMMITTED = REPO_ROOT / "results" / "proxy"


@pytest.mark.parametrize("folder", ["placements", "."], ids=["placements", "every-proxy-grid"])
def test_a_table_wider_than_the_terminal_fits_80_columns_and_cuts_no_cell(folder):
    """The committed proxy results (13 placements × tasks; all of them: a dozen columns) in an 80-column terminal: every
    line fits, and every cell's text and every header line appear whole on one line, never broken into pieces."""
    from rich.console import Console

    records, problems = load_records(COMMITTED / folder)
    assert records and not problems
    table = aggregate(records)
    console = Console(record=True, width=80, file=io.StringIO())
    print_rich(table, console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for (row, col), cell in table.cells.items():
        for piece in (*_wrap_label(row), cell.summary(), cell.delta_text()):  # a norm label broken only after commas
            assert not piece or piece in text, (row, col, piece)
    for col in table.columns:  # header parts broken only after commas
        info = table.info[col]
        for part in (info["task"], f"{info['dataset']} [{info['scale']}]", *info["model"].split(",")):
            assert part in text, part
    if len(table.columns) > 2:
        assert sum("mixbench results (" in line for line in lines) > 1  # split into blocks, the norm column in each


def test_table_shows_your_runs_by_default_not_the_committed_proxies(tmp_path, monkeypatch, capsys):
    """``mixbench table`` reads results/runs (where ``mixbench run`` writes); results/proxy stays a --results-dir away."""
    write_record(record("pre", 41.0), tmp_path / "results" / "runs" / "vit_small" / "a" / "record.json")
    write_record(record("post", 12.0), tmp_path / "results" / "proxy" / "grid" / "b" / "record.json")
    monkeypatch.chdir(tmp_path)
    assert main(["table", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["norm"] for r in rows] == ["pre"]
    assert main(["table", "--format", "csv", "--results-dir", "results/proxy"]) == 0
    assert [r["norm"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))] == ["post"]


def test_paper_comparison_counts_seeds(tmp_path, capsys):
    base = {
        "schema": SCHEMA,
        "task": "c4_llama_71m",
        "model": {"name": "llama_71m"},
        "norm": {"label": "mix(α=0.25)"},
        "status": "completed",
        "scale": "paper",
        "dataset": {"name": "c4"},
    }
    for i, (seed, ppl) in enumerate([(0, 33.0), (0, 33.2), (1, 34.0)]):
        rec = {
            **base,
            "seed": seed,
            "metrics": {"val/ppl": ppl},
            "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": ppl},
        }
        write_record(rec, tmp_path / str(i) / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--paper", "table1"]) == 0
    out = capsys.readouterr().out
    # seed 0 once (33.1), seed 1 (34.0): mean 33.55 over 2 seeds, Δ to the paper's 33.12 = +0.43
    assert "33.55 ± 0.64 (n=2 seeds, 1 repeat) / 33.12 (+0.43)" in out and "not run / 35.18" in out


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


def test_an_fp8_run_never_shares_a_cell_with_the_bf16_run_of_its_seed():
    bf16, fp8 = record("pre", 3.60, 0), {**record("pre", 3.64, 0), "fp8": {"recipe": "tensorwise", "skip": ["head"]}}
    table = aggregate([bf16, fp8])
    assert sorted(table.columns) == [
        "vit_small · vit_small · cifar10_embedded [embedded]",
        "vit_small · vit_small+fp8(tensorwise) · cifar10_embedded [embedded]",
    ]
    assert sorted(c.mean for c in table.cells.values()) == [3.60, 3.64]  # not one cell of two repeats averaged to 3.62


def test_table_at_budget_fractions_shows_early_speed_and_final_quality_apart():
    from mixbench.results.table import budget_views

    records = [with_validations(record("pre", 60.0 + s, seed=s), [(25, 20.0 + s), (50, 40.0 + s)]) for s in range(3)]
    records += [with_validations(record("mix", 55.0 + s, seed=s), [(25, 30.0 + s), (50, 45.0 + s)]) for s in range(3)]
    # diverged at step 60: it reached 25 % and 50 % with finite metrics, so it counts there, and as diverged at the end
    records.append(
        with_validations(record("post", float("nan"), seed=0, status="diverged"), [(25, 35.0), (50, 50.0)], divergence={"step": 60})
    )
    records.append(record("post", 0.0, seed=1, status="stalled"))  # never beat chance: stalled at every budget
    table = aggregate(budget_views(records, [0.25, 0.5, 1.0]), baseline="pre")
    cols = {table.info[c]["budget"]: c for c in table.columns}
    assert sorted(cols) == [0.25, 0.5, 1.0] and table.columns == [cols[0.25], cols[0.5], cols[1.0]]
    assert table.cells[("mix", cols[0.25])].mean == pytest.approx(31.0)
    assert table.cells[("mix", cols[0.25])].delta.diff == pytest.approx(10.0)  # mix ahead early ...
    assert table.cells[("mix", cols[1.0])].delta.diff == pytest.approx(-5.0)  # ... behind at the end
    post25, post100 = table.cells[("post", cols[0.25])], table.cells[("post", cols[1.0])]
    assert (post25.n, post25.diverged, post25.stalled) == (1, 0, 1) and post25.mean == 35.0
    assert (post100.n, post100.diverged, post100.stalled) == (0, 1, 1)


def test_table_at_rejects_bad_fractions_and_skips_records_without_validations(tmp_path, capsys):
    from mixbench.results.table import at_budget

    assert at_budget(record("pre", 50.0), 0.5) is None  # an older record: no validation at that budget
    assert at_budget(record("pre", 50.0), 1.0)["metrics"] == {"val/top1": 50.0}
    with pytest.raises(SystemExit):
        main(["table", "--results-dir", str(tmp_path), "--at", "0.5,1.5"])
    assert "budget fractions must be in (0, 1]" in capsys.readouterr().err


def test_runs_of_one_norm_under_different_training_settings_get_columns_of_their_own(tmp_path):
    def run(norm, value, seed, lr, workers, gain=1.0):
        r = record(norm, value, seed=seed)
        r["config"] = {"optim": {"lr": lr}, "data": {"num_workers": workers}, "norm": {"out_norm_gain": gain}}
        r["config"] |= {"init_from": f"sft/seed{seed}", "rlhf": {"reward_model": f"rm/seed{seed}"}}  # each seed's own input runs
        return r

    records = [
        run("pre", 50.0, 0, 4e-3, 2),
        run("pre", 51.0, 1, 4e-3, 8),  # only how it ran differs: one configuration
        run("pre", 53.0, 0, 8e-3, 2),
        run("pre", 54.0, 1, 8e-3, 2),  # a second learning rate: not two more seeds
        run("sandwich", 40.0, 0, 4e-3, 2, gain=0.0),
        run("sandwich", 42.0, 1, 4e-3, 2, gain=0.0),  # a placement's own option
    ]
    for i, r in enumerate(records):
        write_record(r, tmp_path / f"run{i}" / "record.json")
    loaded, problems = load_records(tmp_path)
    assert not problems
    table = aggregate(loaded)
    assert len(table.columns) == 2 and all("optim.lr=" in c and "num_workers" not in c and "gain" not in c for c in table.columns)
    low, high = sorted(table.columns, key=lambda c: float(c.rsplit("=", 1)[1]))
    assert table.cells[("pre", low)].mean == 50.5 and table.cells[("pre", low)].n == 2
    assert table.cells[("pre", high)].mean == 53.5 and table.cells[("sandwich", low)].mean == 41.0
    assert ("sandwich", high) not in table.cells
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert {r["recipe"] for r in rows} == {"optim.lr=0.004", "optim.lr=0.008"}
    assert len(aggregate([run("pre", 50.0, 0, 4e-3, 2), run("pre", 53.0, 1, 8e-3, 2)]).columns) == 2  # unread records too


def test_copies_of_one_run_count_once(tmp_path):
    """A confirmation run reused from a grid (``search --reuse-from``) is a copy of the grid's record: tabling both
    folders together must not count the run twice."""
    from mixbench.results.table import Cell

    runs = [record("pre", 50.0, seed=0), record("pre", 52.0, seed=1), record("pre", 51.0, seed=1)]  # seed 1 repeated
    for i, r in enumerate(runs):
        r["run_id"], r["started_at"] = "out", f"2026-11-27T0{i}:00:00"  # one folder name (run_dir=exp{i}/out)
    copy = {**runs[1], "reused_from": "grid/pre/seed1"}  # the same run, copied into a study
    for i, r in enumerate([*runs, copy]):
        write_record(r, tmp_path / f"r{i}" / "record.json")
    loaded, _ = load_records(tmp_path)
    cell = Cell.from_records(loaded)
    assert cell.records == 3 and cell.samples == {0: 50.0, 1: 51.5}  # the repeat is a second run, the copy is not


def test_rich_budget_columns_name_their_budget():
    """``--at 0.25,0.5,1.0`` in the terminal: each column header says which budget it shows, as the markdown does."""
    from rich.console import Console

    from mixbench.results.table import budget_views

    records = [with_validations(record("pre", 60.0 + s, seed=s), [(25, 20.0 + s), (50, 40.0 + s)]) for s in range(2)]
    table = aggregate(budget_views(records, [0.25, 0.5, 1.0]))
    console = Console(record=True, width=200, file=io.StringIO())
    print_rich(table, console)
    header = console.export_text().split("┡")[0]  # the lines above the rule under the column headers
    assert [fraction in header for fraction in ("@0.25", "@0.50", "@1.00")] == [True, True, True]


def test_table_results_dir_must_be_an_existing_folder(tmp_path, caplog):
    """A record file or a missing folder given as --results-dir: exit 2 and one line naming the fix (it used to print
    "no result records" and exit 0)."""
    path = write_record(record("pre", 50.0), tmp_path / "runs" / "a" / "record.json")
    assert main(["table", "--results-dir", str(path)]) == 2
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "is a file" in message and f"--results-dir {path.parent}" in message and "\n" not in message
    caplog.clear()
    assert main(["table", "--results-dir", str(tmp_path / "nope"), "--format", "md"]) == 2
    (message,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "no such folder" in message and "results/proxy/placements" in message and "\n" not in message
    assert main(["table", "--results-dir", str(tmp_path), "--format", "md"]) == 0  # the folder itself is fine


def test_table_without_results_dir_on_a_fresh_checkout_says_there_are_no_runs_yet(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)  # no results/runs here yet: the default folder, not a mistyped one
    assert main(["table"]) == 0
    assert "no result records" in caplog.text
