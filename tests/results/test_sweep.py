"""``mixbench table --best-over optim.lr``: each norm at its own best learning rate, Δ against the baseline at its own
best lr, and the LR sensitivity of Wortsman et al. 2023 §2.2; numbers computed by hand in the comments."""

import csv
import io
import math

import pytest
from _support.paths import REPO_ROOT
from _support.records import V, lm_run

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.results.records import load_records, write_record
from mixbench.results.render import render
from mixbench.results.sensitivity import capped, init_loss, lr_sensitivity
from mixbench.results.sweep import Sweep, legend, value_text
from mixbench.results.table import aggregate, budget_views

L0 = math.log(V)


NAN = float("nan")
SWEEP = [
    # pre: best at 1e-3 (3 seeds, ppl 30/31/32, mean 31) against one seed elsewhere; 3e-3 diverged, 1e-2 stalled.
    lm_run("pre", 45.0, 3.0, 1e-4),
    lm_run("pre", 36.0, 2.5, 3e-4),
    *(lm_run("pre", p, loss, 1e-3, seed=s) for s, (p, loss) in enumerate([(30.0, 2.0), (31.0, 2.2), (32.0, 2.1)])),
    lm_run("pre", NAN, NAN, 3e-3, status="diverged"),
    lm_run("pre", 99.0, 4.7, 1e-2, status="stalled"),  # its loss is above ℓ₀: S counts it capped, as ℓ₀
    # mix: best at 3e-3 (ppl 27/28/29); at 1e-2 one seed finished (2.6) and one diverged (NaN): ℓ(1e-2) = (2.6 + ℓ₀) / 2
    lm_run("mix", 40.0, 2.8, 1e-4),
    lm_run("mix", 33.0, 2.3, 3e-4),
    lm_run("mix", 29.0, 2.05, 1e-3),
    *(lm_run("mix", p, loss, 3e-3, seed=s) for s, (p, loss) in enumerate([(27.0, 1.9), (28.0, 2.0), (29.0, 1.95)])),
    lm_run("mix", 35.0, 2.6, 1e-2),
    lm_run("mix", NAN, NAN, 1e-2, seed=1, status="diverged"),
    # post: 3 of the 5 lrs; the lucky single seed at 1e-4 (29.0) beats the 3-seed mean at 1e-3 (29.17): the winner's curse
    lm_run("post", 29.0, 2.4, 1e-4),
    lm_run("post", 35.0, 2.6, 3e-4),
    *(lm_run("post", p, 2.3, 1e-3, seed=s) for s, p in enumerate([30.0, 29.5, 28.0])),
    # hybrid: nothing trains
    *(lm_run("hybrid", 900.0, 4.6, lr, status="stalled") for lr in (1e-4, 3e-4, 1e-2)),
    *(lm_run("hybrid", 900.0, 4.6, 1e-3, seed=s, status="stalled") for s in range(3)),
    lm_run("hybrid", NAN, NAN, 3e-3, status="diverged"),
]


def cells_of(records, **kwargs):
    table = aggregate(records, best_over="optim.lr", **kwargs)
    (col,) = table.columns
    return table, col


def test_each_row_at_its_own_best_lr_against_the_baseline_at_its_own():
    table, col = cells_of(SWEEP)
    assert "optim.lr" not in col  # the lrs share one column
    sweeps = {row: table.sweeps[(row, col)] for row in table.rows}
    assert {row: s.best for row, s in sweeps.items()} == {"pre": 1e-3, "post": 1e-4, "mix": 3e-3, "hybrid": None}
    pre, mix, post = (table.cells[(row, col)] for row in ("pre", "mix", "post"))
    assert (pre.mean, pre.n) == (31.0, 3) and (mix.mean, mix.n) == (28.0, 3)  # every seed at the chosen lr
    # mix − pre = 28 − 31 = −3; SE = sqrt(1/3 + 1/3) = 0.8165, ν = 4, t(0.975, 4) = 2.7764: [−5.267, −0.733]
    assert mix.delta.diff == pytest.approx(-3.0) and mix.delta.dof == pytest.approx(4.0)
    assert (mix.delta.low, mix.delta.high) == pytest.approx((-5.2669, -0.7331), abs=1e-4)
    # post: chosen by the mean of the seeds each lr has (1 seed at 1e-4: 29.0 < 29.17), shown with its one seed: no interval
    assert (post.n, post.delta.diff, post.delta.low) == (1, pytest.approx(-2.0), None)
    assert table.best[col] == "mix" and table.cells[("hybrid", col)].n == 0


def test_lr_sensitivity_by_hand():
    table, col = cells_of(SWEEP)
    s = {row: table.sweeps[(row, col)] for row in table.rows}
    # pre: ℓ = 3.0, 2.5, 2.1 (mean of 2.0, 2.2, 2.1), ℓ₀ (diverged: NaN), ℓ₀ (stalled at 4.7, capped); ℓ* = 2.1
    # S = (0.9 + 0.4 + 0 + 2 × (4.60517 − 2.1)) / 5 = 1.262068
    assert s["pre"].init == pytest.approx(L0) and s["pre"].best_loss == pytest.approx(2.1)
    assert s["pre"].sensitivity == pytest.approx((0.9 + 0.4 + 2 * (L0 - 2.1)) / 5) == pytest.approx(1.262068, abs=1e-6)
    # mix: ℓ = 2.8, 2.3, 2.05, 1.95, 3.602585 (1e-2: the finished 2.6 and the diverged seed's ℓ₀, averaged); ℓ* = 1.95
    # S = (0.85 + 0.35 + 0.1 + 0 + 1.652585) / 5 = 0.590517
    assert s["mix"].sensitivity == pytest.approx((1.3 + (2.6 + L0) / 2 - 1.95) / 5) == pytest.approx(0.590517, abs=1e-6)
    # post, over its 3 lrs: ℓ = 2.4, 2.6, 2.3; S = (0.1 + 0.3 + 0) / 3
    assert s["post"].sensitivity == pytest.approx(0.4 / 3)
    assert s["hybrid"].sensitivity is None  # nothing finished: ℓ* undefined
    text = {row: " ".join(p for p in (s[row].summary(), s[row].sensitivity_text()) if p) for row in s}
    assert text["pre"] == "31.00 ± 1.00 (n=3) @lr 1e-3 S 1.26 (5 lrs, 1 diverged, 1 stalled)"
    assert text["mix"] == "28.00 ± 1.00 (n=3) @lr 3e-3 S 0.59 (5 lrs)"
    assert text["post"] == "29.00 (n=1) @lr 1e-4 S 0.13 (3 of 5 lrs)"  # flagged: fewer lrs than the column
    assert text["hybrid"] == "(900.00 @lr 1e-4) 1/5 lrs diverged 4/5 lrs stalled"  # the best a stalled seed measured


def test_sensitivity_formula_and_init_loss():
    assert lr_sensitivity([2.0, None, 3.0], init=4.0) == pytest.approx((0 + 2.0 + 1.0) / 3)  # not finite: ℓ₀
    assert lr_sensitivity([5.0, 2.0], init=4.0) == pytest.approx((2.0 + 0) / 2)  # a loss above ℓ₀ counts as ℓ₀
    assert lr_sensitivity([2.5], init=4.0) == 0.0 and lr_sensitivity([NAN, math.inf], init=4.0) == 0.0
    assert [capped(x, 4.0) for x in (3.5, 4.5, NAN, -math.inf, None)] == [3.5, 4.0, 4.0, 4.0, 4.0]
    vit = {"family": "vision", "model": {"options": {"num_classes": None}, "label": "vit_tiny[img_size=32,num_classes=10]"}}
    assert init_loss(vit) == pytest.approx(math.log(10))  # num_classes from the data: read from the label
    assert init_loss({**vit, "model": {"options": {"num_classes": 1000}}}) == pytest.approx(math.log(1000))
    assert init_loss(lm_run("pre", 1.0, 1.0, 1e-3)) == pytest.approx(L0)
    measured = lm_run("pre", 1.0, 1.0, 1e-3, validations=[{"step": 0, "fraction": 0.0, "metrics": {"val/loss": 4.2}}])
    assert init_loss(measured) == 4.2
    sft = lm_run("pre", 1.0, 1.0, 1e-3)
    sft["config"]["init_from"] = "runs/pretrain"
    assert init_loss(sft) is None  # fine-tuning starts from trained weights: its loss at init is not chance


def test_ties_go_to_more_seeds_then_the_smaller_value():
    runs = [lm_run("pre", 30.0, 2.0, 1e-3, seed=0), lm_run("pre", 32.0, 2.0, 1e-3, seed=1), lm_run("pre", 31.0, 2.0, 3e-3)]
    assert Sweep.from_records(runs, "optim.lr", False).best == 1e-3  # mean 31 both: 2 seeds beat 1
    runs = [lm_run("pre", 31.0, 2.0, 3e-3), lm_run("pre", 31.0, 2.0, 1e-3), lm_run("pre", 33.0, 2.0, 3e-4)]
    assert Sweep.from_records(runs, "optim.lr", False).best == 1e-3  # one seed each: the smaller lr
    assert Sweep.from_records(runs, "optim.lr", True).best == 3e-4  # higher is better: 33 wins


def test_one_lr_is_not_a_sweep_and_the_text_says_so():
    table, col = cells_of([lm_run("pre", 30.0, 2.0, 1e-3, seed=s) for s in range(2)])
    sweep = table.sweeps[("pre", col)]
    assert sweep.sensitivity is None and sweep.sensitivity_text() == "(1 lr: not swept)"  # no S: one lr says nothing


def test_markdown_csv_and_latex_show_the_lr_and_sensitivity():
    table, _ = cells_of(SWEEP)
    md = render(table, "md")
    assert r"| mix | **28.00 ± 1.00 (n=3) @lr 3e-3 Δ −3.00 [−5.27, −0.73]\* S 0.59 (5 lrs)** |" in md
    assert "| hybrid | (900.00 @lr 1e-4) 1/5 lrs diverged 4/5 lrs stalled |" in md and "winner's curse" in md
    assert r"@lr 1e-3 S 1.26 (5 lrs, 1 diverged, 1 stalled)" in render(table, "latex")
    rows = {r["norm"]: r for r in csv.DictReader(io.StringIO(render(table, "csv")))}
    assert float(rows["mix"]["best_value"]) == 3e-3 and float(rows["mix"]["sensitivity"]) == pytest.approx(0.590517, abs=1e-6)
    assert float(rows["mix"]["delta"]) == -3.0 and float(rows["mix"]["ci_low"]) == pytest.approx(-5.2669, abs=1e-4)
    assert (rows["post"]["swept"], rows["post"]["swept_column"], rows["mix"]["best_over"]) == ("3", "5", "optim.lr")
    hybrid = rows["hybrid"]
    assert (hybrid["best_value"], hybrid["mean"], hybrid["sensitivity"]) == ("", "", "")
    assert (hybrid["swept"], hybrid["swept_finished"], hybrid["swept_diverged"], hybrid["swept_stalled"]) == ("5", "0", "1", "4")
    assert float(rows["pre"]["init_loss"]) == pytest.approx(L0) and float(rows["pre"]["best_loss"]) == pytest.approx(2.1)
    assert "best_value" not in render(aggregate(SWEEP), "csv").splitlines()[0]  # without --best-over: the columns as before


def test_without_best_over_each_lr_is_a_column_of_its_own():
    assert len(aggregate(SWEEP).columns) == 5


def test_at_budgets_pick_the_best_lr_per_column():
    """At half the budget the high lr leads, at the end the low one: each budget column names its own best."""

    def run(lr, seed, half, final):
        r = lm_run("pre", final, 2.0, lr, seed=seed, budget={"total_steps": 100})
        return {**r, "validations": [{"step": 50, "fraction": 0.5, "metrics": {"val/ppl": half, "val/loss": 3.0}}]}

    records = [run(1e-3, s, 50.0 + s, 30.0 + s) for s in range(2)] + [run(3e-3, s, 40.0 + s, 35.0 + s) for s in range(2)]
    table = aggregate(budget_views(records, [0.5, 1.0]), best_over="optim.lr")
    best = {table.info[c]["budget"]: table.sweeps[("pre", c)].best for c in table.columns}
    assert best == {0.5: 3e-3, 1.0: 1e-3}


def test_cli_best_over(tmp_path, capsys, caplog):
    for i, r in enumerate(SWEEP):
        write_record(r, tmp_path / str(i) / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--best-over", "optim.lr", "--format", "md"]) == 0
    assert "@lr 3e-3" in capsys.readouterr().out
    assert main(["table", "--results-dir", str(tmp_path), "--best-over", "optim.lr", "--width", "100"]) == 0  # rich
    out = capsys.readouterr().out
    assert "28.00 ± 1.00 (n=3) @lr 3e-3 ★" in out and "S 0.59 (5 lrs)" in out and "1/5 lrs diverged 4/5 lrs stalled" in out
    assert main(["table", "--results-dir", str(tmp_path), "--best-over", "optim.betas"]) == 2
    assert "no record sets optim.betas" in caplog.text
    assert main(["table", "--results-dir", str(tmp_path), "--best-over", "optim.lr", "--format", "tidy"]) == 2
    assert "use --format csv" in caplog.text


def test_records_without_the_key_are_left_out_and_bad_keys_are_errors(caplog):
    older = lm_run("pre", 30.0, 2.0, 1e-3)
    del older["config"]
    table, col = cells_of([older, lm_run("pre", 31.0, 2.0, 1e-3)])
    assert table.cells[("pre", col)].mean == 31.0 and "left out 1 record(s)" in caplog.text
    with pytest.raises(ConfigError, match="not a training setting"):
        aggregate(SWEEP, best_over="seed")


def test_value_text():
    values = (3e-3, 1e-4, 2.5e-4, 0.04, 0.1, 1.0, 8, "adamw")
    assert [value_text(v) for v in values] == ["3e-3", "1e-4", "2.5e-4", "4e-2", "0.1", "1", "8", "adamw"]


def test_committed_placements_have_one_lr_each():
    """The placements grid trained one lr: every row is at it, with sensitivity 0 flagged as no sweep."""

    records, _ = load_records(REPO_ROOT / "results" / "proxy" / "placements")
    table = aggregate(records, best_over="optim.lr")
    assert len(table.columns) == 3
    for sweep in table.sweeps.values():
        assert len(sweep.cells) == 1 and sweep.sensitivity_text() in ("", "(1 lr: not swept)")
    assert {table.sweeps[("pre", c)].best for c in table.columns} == {1e-3, 4e-3}


def test_lr_figure_lines_bands_best_and_edge_markers(tmp_path, capsys):
    from mixbench.results.lr_curves import lr_figures

    vision = []
    for lr, top1 in ((4e-3, 50.0), (1.2e-2, 55.0)):
        run = {**lm_run("pre", top1, 1.5, lr), "family": "vision", "task": "vit_tiny", "model": {"name": "vit_tiny", "options": {}}}
        vision.append({**run, "primary_metric": {"name": "val/top1", "higher_is_better": True, "value": top1}})
    at_best = [{**r, "model": {**r["model"], "label": "llama_tiny[num_layers=12]"}} for r in SWEEP if r["config"]["optim"]["lr"] == 1e-3]
    assert len(aggregate([*SWEEP, *vision, *at_best], best_over="optim.lr").columns) == 3
    figures = lr_figures([*SWEEP, *vision, *at_best])  # the follow-up at one lr a row: a column without a figure
    assert sorted(figures) == ["lm", "vision"]
    ax = figures["lm"].axes[0]
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["1e-4", "3e-4", "1e-3", "3e-3", "1e-2"]
    stars = {(x, y) for line in ax.get_lines() if line.get_marker() == "*" for x, y in line.get_xydata()}
    assert stars == {(1e-3, 31.0), (3e-3, 28.0), (1e-4, 29.0)}  # pre, mix, post at their best lr; hybrid has none
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
    assert sorted(line.get_marker() for line in hollow) == ["^", "^", "o", "o", "o", "o", "o"]  # pre: 3e-3, 1e-2; hybrid: 5 lrs
    assert {line.get_ydata()[0] for line in hollow} == {0.97}  # the top of the axis (lower is better), in axes coordinates
    bands = [c.get_paths()[0].vertices for c in ax.collections]
    at_3e3 = [{y for x, y in v if x == 3e-3} for v in bands]
    assert {27.0, 29.0} in at_3e3  # mix at 3e-3: min–max of 27, 28, 29 (at one-seed lrs the band pinches to the line)
    assert [(t.get_text(), t.xy) for t in ax.texts] == [("1/2 diverged", (1e-2, 35.0))]  # mix at 1e-2: drawn at its finished seed
    for i, r in enumerate(SWEEP):
        write_record(r, tmp_path / "runs" / str(i) / "record.json")
    out = tmp_path / "figs" / "lr_curves.png"
    assert main(["plot", "lr", "--results-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert [p.name for p in out.parent.iterdir()] == ["lr_curves_lm.png"]
    assert main(["plot", "lr", "--results-dir", str(tmp_path / "nope"), "--out", str(out)]) == 2


def test_figure_names_tell_columns_of_one_family_apart():
    from mixbench.results.lr_curves import figure_names

    deep = [{**r, "model": {**r["model"], "label": "llama_tiny[num_layers=24]"}} for r in SWEEP[:2]]
    names = figure_names(aggregate([*SWEEP[:2], *deep], best_over="optim.lr"))
    assert sorted(names.values()) == ["lm_llama_tiny", "lm_llama_tiny_num_layers_24"]


# ---------------------------------------------------------------- the four rules of issue 43, each on the smallest records


def test_rule1_the_best_lr_counts_every_seed_a_stalled_one_against_its_lr():
    """The committed LLaMA-24 DeepNorm case: at 1e-3 two seeds finished (44.13, 43.47) and the third stalled; one seed at
    3e-4 finished at 63.48.  The finished seeds alone pick 1e-3; counting the stall, 3e-4 wins.  A crash says nothing."""
    runs = [
        lm_run("deepnorm", 44.13, 3.79, 1e-3, seed=0),
        lm_run("deepnorm", 43.47, 3.77, 1e-3, seed=1),
        lm_run("deepnorm", 1050.0, 4.5, 1e-3, seed=2, status="stalled"),
        lm_run("deepnorm", 63.48, 4.15, 3e-4),
    ]
    assert Sweep.from_records(runs, "optim.lr", False).best == 3e-4
    crashed = [*runs[:2], {**runs[2], "status": "failed"}, runs[3]]
    assert Sweep.from_records(crashed, "optim.lr", False).best == 1e-3  # a crashed seed is not counted against 1e-3
    table, col = cells_of(runs)
    assert table.sweeps[("deepnorm", col)].summary() == "63.48 (n=1) @lr 3e-4"
    assert "smallest share of its seeds stalled or diverged" in legend("optim.lr")  # the rule, as the legend states it
    assert legend("optim.lr").replace("*", "\\*") in render(table, "md")  # and the rendered table states it (md escapes *)


def test_rule2_sensitivity_uses_the_measured_loss_where_finite_capped_at_init():
    """Wortsman et al.: ℓ(η) = min(measured loss, ℓ₀); only a loss that is not finite counts as ℓ₀.  A stalled run
    that ended at 4.0 (below ℓ₀ = 4.605) counts 4.0; a diverged run with NaN counts ℓ₀; one above ℓ₀ counts ℓ₀."""
    runs = [
        lm_run("pre", 30.0, 2.0, 1e-3),
        lm_run("pre", 900.0, 4.0, 1e-2, status="stalled"),
        lm_run("pre", NAN, NAN, 3e-3, status="diverged"),
        lm_run("pre", 999.0, 5.0, 3e-4, status="stalled"),
    ]
    sweep = Sweep.from_records(runs, "optim.lr", False)
    # ℓ = 2.0, 4.0, ℓ₀, ℓ₀ (ℓ* = 2.0): S = (0 + 2.0 + 2 × 2.605) / 4 = 1.80 (the stalled 4.0 as ℓ₀ would give 1.95)
    assert sweep.sensitivity == pytest.approx((0 + 2.0 + 2 * (L0 - 2.0)) / 4)
    assert sweep.sensitivity_text() == "S 1.80 (4 lrs, 1 diverged, 2 stalled)"


def test_rule3_an_lr_where_one_seed_stalled_and_the_others_crashed_is_swept():
    runs = [
        lm_run("pre", 30.0, 2.0, 1e-3),
        lm_run("pre", 900.0, 4.0, 1e-2, seed=0, status="stalled"),
        *(lm_run("pre", NAN, NAN, 1e-2, seed=s, status="failed") for s in (1, 2)),
    ]
    sweep = Sweep.from_records(runs, "optim.lr", False)
    assert sweep.outcome(1e-2) == "stalled" and sweep.trained == [1e-3, 1e-2]
    assert sweep.sensitivity_text() == "S 1.00 (2 lrs, 1 stalled)"  # (0 + 2.0) / 2; not "(1 lr: not swept)"


def test_rule4_a_column_of_two_primary_metrics_is_refused(tmp_path, caplog):
    ppl = lm_run("pre", 30.0, 2.0, 1e-3)
    loss = {**lm_run("pre", 30.0, 2.0, 1e-3, seed=1), "primary_metric": {"name": "val/loss", "higher_is_better": False}}
    for best_over in (None, "optim.lr"):
        with pytest.raises(ConfigError, match=r"column llama_lm · llama_tiny · textmix \[proxy\] mixes primary metrics val/loss, val/ppl"):
            aggregate([ppl, loss], best_over=best_over)
    for i, r in enumerate((ppl, loss)):
        write_record(r, tmp_path / str(i) / "record.json")
    assert main(["table", "--results-dir", str(tmp_path)]) == 2 and "table the records of each metric" in caplog.text


def test_committed_lr_sensitivity_table_under_the_rules():
    """The committed sweep (results/proxy/lr_sensitivity): DeepNorm's 24-block best lr is 3e-4 (1 of 3 seeds stalled at
    1e-3), and S with stalled runs at their measured loss moves as the review counted (Admin 3.50 → 1.86, HybridNorm
    2.86 → 1.63, Post-LN 2.49 → 1.67; Pre-LN 0.96 as before)."""

    records, _ = load_records(REPO_ROOT / "results" / "proxy" / "lr_sensitivity")
    table = aggregate(records, best_over="optim.lr")
    (col,) = [c for c in table.columns if "num_layers=24" in c]
    sweeps = {row: table.sweeps[(row, col)] for row in ("pre", "post", "admin", "hybrid", "deepnorm")}
    assert {row: round(s.sensitivity, 2) for row, s in sweeps.items()} == {
        "pre": 0.96,
        "post": 1.67,
        "admin": 1.86,
        "hybrid": 1.63,
        "deepnorm": 1.40,
    }
    assert sweeps["deepnorm"].best == 3e-4 and sweeps["deepnorm"].cells[1e-3].stalled == 1
