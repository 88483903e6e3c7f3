"""``mixbench plot ladder``: the tuned table's Δ by model size, the best lr by size, and the ladder's table with where each
placement breaks; numbers from :func:`mixbench.results.table.aggregate`, checked by hand where noted."""

import json
import math
import re
import subprocess
import sys

import pytest
from _support.ladder import RUNS, run
from _support.paths import REPO_ROOT

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.results.ladder_figures import breaks_at, delta_figure, ladders, lr_figure, markdown, task_default
from mixbench.results.records import write_record
from mixbench.results.sources import load_sources
from mixbench.results.table import aggregate

LADDER = REPO_ROOT / "results" / "proxy" / "ladder"


def md_rows(md: str) -> dict[str, list[str]]:
    """Placement → its cells in the markdown table (first column: the header row as ``placement``)."""
    rows = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.replace("\\*", "*") for c in line.strip("| ").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def numbers(text: str) -> list[float]:
    return [float(x.replace("−", "-")) for x in re.findall(r"[−+-]?\d+\.\d+", text)]


def test_the_table_shows_aggregates_delta_and_interval_each_at_its_best_lr():
    (ladder,) = ladders(RUNS).values()
    assert [(r.label, r.params, r.default) for r in ladder.rungs] == [("llama_s · 1M", 1_000_000, 1e-3), ("llama_l · 4M", 4_000_000, 1e-3)]
    table = aggregate(RUNS, baseline="pre", best_over="optim.lr")
    rows = md_rows(markdown(ladder))
    assert rows["placement"][:2] == ["llama_s · 1M (default lr 1e-3)", "llama_l · 4M (default lr 1e-3)"]
    checked = 0
    for i, rung in enumerate(ladder.rungs):
        for row in ("mix", "post"):
            delta = table.cells[(row, rung.column)].delta
            if delta is None:
                continue
            expected = [delta.diff] + ([delta.low, delta.high] if delta.low is not None else [])
            assert numbers(rows[row][i])[: len(expected)] == pytest.approx(expected, abs=0.005)
            checked += 1
    assert checked == 3  # mix at both sizes, post at the small one
    # every best lr here is an edge of its sweep (two lrs tried each): marked, the baseline's too
    untuned = "lr not bracketed; pre's lr not bracketed"
    assert rows["mix"][0] == f"Δ −3.00 [−5.27, −0.73]* @lr 1e-3 ({untuned})"  # by hand: 28 − 31, Welch ν = 4
    assert rows["mix"][1] == f"Δ −3.00 (n=1) @lr 3e-4 ({untuned})"  # 18 − 21, one seed: no interval
    assert rows["post"][0].startswith("Δ +10.00 [") and rows["post"][0].endswith(f"@lr 1e-3 (1/3 stalled; {untuned})")  # 41 − 31
    assert rows["pre (baseline)"][:2] == [
        "31.00 ± 1.00 (n=3) @lr 1e-3 (lr not bracketed)",
        "21.00 ± 1.00 (n=3) @lr 1e-3 (lr not bracketed)",
    ]


def test_a_best_lr_with_an_lr_that_trained_on_each_side_loses_its_mark_and_one_whose_seeds_crashed_brackets_nothing():
    bracketing = [
        run("pre", 33.0, 3e-4, "s"),  # pre at the small size: 3e-4 < 1e-3 (best) < 3e-3
        run("mix", 31.0, 3e-3, "s", status="failed"),  # mix: 3e-3 only crashed, 1e-3 stays its edge
    ]
    (ladder,) = ladders([*RUNS, *bracketing]).values()
    rows = md_rows(markdown(ladder))
    assert rows["pre (baseline)"][0] == "31.00 ± 1.00 (n=3) @lr 1e-3"
    assert rows["mix"][0] == "Δ −3.00 [−5.27, −0.73]* @lr 1e-3 (lr not bracketed)"  # the baseline's mark gone
    (ladder,) = ladders([*RUNS, bracketing[0], run("mix", 31.0, 3e-3, "s")]).values()  # a 3e-3 seed that trained
    assert md_rows(markdown(ladder))["mix"][0] == "Δ −3.00 [−5.27, −0.73]* @lr 1e-3"


def test_breaks_at_the_smallest_size_where_every_lr_failed_and_the_lr_below_the_default():
    (ladder,) = ladders(RUNS).values()
    assert breaks_at(ladder, "post").text == "llama_l · 4M" and breaks_at(ladder, "mix") is None  # 1e-4 … 1e-3 all stalled
    rows = md_rows(markdown(ladder))
    assert rows["post"][1] == "(950.00 @lr 1e-4) 3/3 lrs stalled"  # the table's text: the best a stalled seed measured
    assert rows["post"][2] == "llama_l · 4M" and rows["mix"][2] == rows["pre (baseline)"][2] == "—"
    assert rows["mix"][3] == "3e-4 at llama_l · 4M" and rows["post"][3] == "—"  # post's best at the small size is 1e-3
    # a placement that stalls at every lr of the small size too breaks there, the smallest — provisionally: its 2 lrs
    # (1e-3, 3e-3) are not yet the 3 spanning a decade that stop the sweep
    stalled_small = [r for r in RUNS if not (r["norm"]["label"] == "post" and r["status"] == "completed")]
    (ladder,) = ladders(stalled_small).values()
    broken = breaks_at(ladder, "post")
    assert broken.rung.label == "llama_s · 1M" and not broken.settled and broken.text == "llama_s · 1M? (2 lrs tried)"
    assert md_rows(markdown(ladder))["post"][2] == "llama_s · 1M? (2 lrs tried)"
    stalled_small.append(run("post", 900.0, 3e-4, "s", status="stalled"))  # 3e-4 … 3e-3: settled
    (ladder,) = ladders(stalled_small).values()
    assert breaks_at(ladder, "post").text == "llama_s · 1M"
    # … unless the lowest failed lr was still improving when its run ended (0.1 nats over its second half): not settled
    improving = run("post", 900.0, 3e-4, "s", status="stalled")
    improving["validations"] = [{"fraction": f, "metrics": {"val/loss": x}} for f, x in ((0.5, 6.97), (1.0, 6.87))]
    (ladder,) = ladders([*stalled_small[:-1], improving]).values()
    broken = breaks_at(ladder, "post")
    assert not broken.settled and broken.text == "llama_s · 1M? (3 lrs tried; the lowest was still improving)"


def test_the_delta_figure_marks_one_seed_cells_seed_failures_and_the_fails_strip():
    (ladder,) = ladders(RUNS).values()
    fig = delta_figure(ladder)
    strip, ax = fig.axes[:2]  # lower is better: the fails strip on top
    (cross,) = [line for line in strip.get_lines() if line.get_marker() == "x"]
    assert cross.get_xdata()[0] == pytest.approx(4e6, rel=0.1)  # post at the large size
    assert [t.get_text() for t in strip.texts] == ["post: (950.00 @lr 1e-4) 3/3 lrs stalled"]
    hollow = [line for line in ax.get_lines() if line.get_marker() == "o" and line.get_markerfacecolor() == "none"]
    assert [(line.get_xdata()[0] / 4e6, line.get_ydata()[0]) for line in hollow] == [(pytest.approx(1, rel=0.1), pytest.approx(-3.0))]
    assert [t.get_text() for t in ax.texts] == ["1/3 stalled"]
    bars = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
    assert len(bars) == 2  # Welch intervals: mix and post at the small size only


def test_the_best_lr_figure_shows_each_sweep_and_its_failed_lrs():
    (ladder,) = ladders(RUNS).values()
    ax = lr_figure(ladder).axes[0]
    best = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if line.get_marker() == "*"}
    assert best["pre"] == [1e-3, 1e-3] and best["mix"] == [1e-3, 3e-4]
    assert best["post"][0] == 1e-3 and math.isnan(best["post"][1])  # no best where every lr stalled
    stalled = [line for line in ax.get_lines() if line.get_marker() == "o" and line.get_markerfacecolor() == "none"]
    assert sorted(line.get_ydata()[0] for line in stalled) == [1e-4, 3e-4, 1e-3, 3e-3]  # post: large 1e-4…1e-3, small 3e-3
    (some,) = [line for line in ax.get_lines() if line.get_fillstyle() == "bottom"]
    assert some.get_ydata()[0] == 1e-3 and some.get_xdata()[0] == pytest.approx(1e6, rel=0.1)  # post, small: 1/3 stalled
    dots = [line for line in ax.get_lines() if line.get_marker() == "."]
    assert len(dots) == 8  # pre and mix: 2 lrs at each size, every seed finished
    bars = [line for line in ax.get_lines() if line.get_linewidth() == 6]
    assert [list(line.get_ydata()) for line in bars] == [[1e-3, 1e-3]] * 2  # llama_lm's default lr at both sizes
    hollow = [line for line in ax.get_lines() if line.get_marker() == "*" and line.get_markerfacecolor() == "white"]
    assert len(hollow) == 5  # every best here is an edge of its 2 lrs tried: none bracketed
    bracketed_pre = [*RUNS, run("pre", 40.0, 3e-4, "s")]  # pre at the small size: 3e-4 < 1e-3 (best) < 3e-3
    ax = lr_figure(ladders(bracketed_pre)["lm"]).axes[0]
    assert len([line for line in ax.get_lines() if line.get_marker() == "*" and line.get_markerfacecolor() == "white"]) == 4


def test_plot_ladder_writes_the_figures_and_tables(tmp_path):
    for i, r in enumerate(RUNS):
        write_record(r, tmp_path / "runs" / str(i) / "record.json")
    out = tmp_path / "figs"
    assert main(["plot", "ladder", "--results-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["ladder_best_lr_lm.png", "ladder_delta_lm.png", "ladder_lm.md"]
    assert all((out / name).stat().st_size > 1000 for name in written)
    assert main(["plot", "ladder", "--results-dir", str(tmp_path / "runs"), "--baseline", "nope", "--out", str(out)]) == 2
    assert main(["plot", "ladder", "--results-dir", str(tmp_path / "runs"), "--out", str(out / "ladder_lm.md")]) == 2
    assert main(["plot", "lr", "--results-dir", str(tmp_path / "runs"), "--baseline", "mix"]) == 2
    assert (out / "ladder_lm.md").read_text().startswith("## lm:")  # a refused call leaves what was written


def test_columns_of_one_size_stay_apart_labelled():
    def decay(r, value):
        return {**r, "config": {**r["config"], "optim": {**r["config"]["optim"], "weight_decay": value}}}

    small = [decay(r, 0.1) for r in RUNS if r["model"]["name"] == "llama_s"]
    (ladder,) = ladders([decay(r, 0.0) for r in RUNS] + small).values()
    labels = [r.label for r in ladder.rungs]
    assert len(labels) == 3 and labels[-1] == "llama_l · 4M"
    assert sorted(labels[:2]) == ["llama_s · 1M · optim.weight_decay=0.0", "llama_s · 1M · optim.weight_decay=0.1"]


def test_a_column_without_model_sizes_is_refused():
    sizeless = [{**r, "model": {"name": "llama_x", "label": "llama_x"}} for r in RUNS[:3]]
    with pytest.raises(ConfigError, match="llama_x.*model.num_params"):
        ladders(RUNS + sizeless)


def test_the_default_lr_is_the_tasks():
    assert task_default("llama_lm") == 1e-3 and task_default("c4_llama_1b") == 5e-4  # from its base task's recipe
    assert task_default("in1k_vit_tiny") == 4e-3 and task_default("no_such_task") is None


def test_plot_ladder_imports_neither_torch_nor_lightning(tmp_path):
    for i, r in enumerate(RUNS):
        write_record(r, tmp_path / "runs" / str(i) / "record.json")
    code = (
        "import json, sys\nfrom mixbench.cli.app import main\n"
        f"main(['plot', 'ladder', '--results-dir', {str(tmp_path / 'runs')!r}])\n"
        "print(json.dumps([m for m in ('torch', 'lightning') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "runs" / "ladder_delta_lm.png").stat().st_size > 0  # default --out: the results folder


def test_the_committed_ladder_has_pre_and_mix_at_every_llama_size():
    records, problems = load_sources([LADDER])
    assert not problems
    lm = ladders(records)["lm"]
    assert len(lm.rungs) >= 3 and [r.params for r in lm.rungs] == sorted(r.params for r in lm.rungs)
    rows = md_rows(markdown(lm))
    for row in ("pre (baseline)", "mix(α=0.25)"):
        cells = rows[row][: len(lm.rungs)]
        assert all(cell and cell != "not run" for cell in cells), (row, cells)
    assert all(cell.startswith("Δ ") for cell in rows["mix(α=0.25)"][: len(lm.rungs)])  # mix trains at every size
