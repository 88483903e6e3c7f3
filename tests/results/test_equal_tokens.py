"""The LM ladder at equal tokens (mixbench.results.equal_tokens): validations picked by token count, Δ at each size's
full budget, and the committed ladder's numbers."""

import math

import pytest
from _support.paths import REPO_ROOT

from mixbench.results.equal_tokens import FAILED, cell_text, equal_token_points, loss_near, markdown, targets, validation_tokens
from mixbench.results.ladder_figures import ladders
from mixbench.results.records import SCHEMA, load_records

LADDER = REPO_ROOT / "results" / "proxy" / "ladder"


def record(task, params, norm, seed, steps, losses, lr=1e-3, status="completed"):
    """An LM record of ``steps`` steps of 128 × 256 tokens whose validations at 25/50/75/100 % gave ``losses``."""
    fractions = (0.25, 0.5, 0.75, 1.0)
    return {
        "schema": SCHEMA,
        "task": task,
        "family": "lm",
        "model": {"name": task, "options": {}, "num_params": params},
        "norm": {"label": norm, "placement": norm},
        "seed": seed,
        "status": status,
        "scale": "proxy",
        "dataset": {"name": "textmix", "seq_len": 256},
        "effective": {"global_batch_size": 128},
        "steps": steps,
        "metrics": {"val/loss": losses[-1], "val/ppl": math.exp(losses[-1])},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": math.exp(losses[-1])},
        "validations": [{"step": int(f * steps), "fraction": f, "metrics": {"val/loss": x}} for f, x in zip(fractions, losses)],
        "config": {"optim": {"lr": lr}, "seed": seed},
        "started_at": f"2026-01-01T00:00:0{seed}",
    }


def test_a_validation_counts_at_a_target_within_the_tolerance_and_the_nearest_wins():
    r = record("small", 10, "pre", 0, 400, [5.0, 4.0, 3.5, 3.0])  # 3.28M, 6.55M, 9.83M, 13.1M tokens
    assert loss_near(r, 6.5e6)[:1] == (4.0,) and loss_near(r, 6.5e6)[2] == 0.5
    assert loss_near(r, 13.1e6)[0] == 3.0
    assert loss_near(r, 4.5e6) is None  # 3.28M is 27 % away, 6.55M 46 %: nothing within ±15 %
    assert targets([r, record("big", 20, "pre", 0, 800, [5, 4, 3, 2])]) == pytest.approx([13107200, 26214400])


def test_deltas_at_equal_tokens_compare_each_size_where_it_has_validations():
    rows = []
    for seed, shift in ((0, 0.0), (1, 0.02)):
        rows.append(record("small", 10, "pre", seed, 400, [5.0 + shift, 4.0 + shift, 3.5, 3.0 + shift]))
        rows.append(record("small", 10, "mix", seed, 400, [4.5, 3.5 - shift, 3.2, 2.6 + shift]))
        rows.append(record("big", 20, "pre", seed, 800, [4.0 + shift, 3.0 + shift, 2.5, 2.0]))
        rows.append(record("big", 20, "mix", seed, 800, [3.8, 2.9 + shift, 2.45, 1.9]))
    rows.append(record("big", 20, "post", 0, 800, [7.0] * 4, status="stalled"))
    (ladder,) = ladders(rows).values()
    points = equal_token_points(ladder, rows)
    at = {(p.target, p.column.split(" ")[0], p.row): p for p in points}
    small_end = next(t for t in targets(rows) if t < 2e7)
    # at the small model's whole budget (13.1M): the small model's end, the big model's 50 % validation
    assert at[(small_end, "small", "mix")].delta == pytest.approx((2.6 + 2.62) / 2 - (3.0 + 3.02) / 2)
    big_mid = at[(small_end, "big", "mix")]
    assert big_mid.fraction == 0.5 and big_mid.delta == pytest.approx((2.9 + 2.92) / 2 - (3.0 + 3.02) / 2)
    assert big_mid.low is not None and big_mid.low < big_mid.delta < big_mid.high
    table = markdown(ladder, points)
    assert "50% of its run" in table and FAILED in table  # post stalled at its only lr at the big size
    # one lr each: every best lr is an edge of its sweep, and the table says so, the baseline's too
    pre_row, mix_row = (next(line for line in table.splitlines() if line.startswith(f"| {row} |")) for row in ("pre", "mix"))
    assert pre_row.count("(lr not bracketed)") == 2 and "pre's" not in pre_row
    assert mix_row.count("(lr not bracketed; pre's lr not bracketed)") == 2


def test_a_best_lr_bracketed_by_lrs_that_trained_loses_its_mark_at_equal_tokens():
    rows = [
        record("small", 10, norm, seed, 400, [5.0, 4.0, 3.5, 3.0 - 0.1 * (norm == "mix") + 0.01 * seed])
        for norm in ("pre", "mix")
        for seed in (0, 1)
    ]
    rows += [record("small", 10, "pre", 0, 400, [5.0, 4.0, 3.6, x], lr=lr) for lr, x in ((3e-4, 3.3), (3e-3, 3.4))]
    (ladder,) = ladders(rows).values()
    table = markdown(ladder, equal_token_points(ladder, rows))
    pre_row, mix_row = (next(line for line in table.splitlines() if line.startswith(f"| {row} |")) for row in ("pre", "mix"))
    assert "bracketed" not in pre_row and mix_row.endswith("100% of its run (lr not bracketed) |")


def test_the_committed_ladder_at_equal_tokens_gives_the_issues_numbers():
    """The numbers issue 49's review computed by hand from the ladder's records of then (those started before
    2026-12-07; later seeds move them, and the README's numbers are tested against every record)."""
    records, _ = load_records(LADDER)
    records = [r for r in records if r["started_at"] < "2026-12-07"]
    (lm,) = [ladder for family, ladder in ladders(records).items() if family == "lm"]
    points = {(round(p.target / 1e5), p.column.split(" ")[0], p.row): p for p in equal_token_points(lm, records)}
    assert points[(110, "c4_llama_130m", "mix(α=0.25)")].delta == pytest.approx(-0.503, abs=5e-4)  # 11.0M, its end
    assert points[(110, "c4_llama_250m", "mix(α=0.25)")].delta == pytest.approx(-0.533, abs=5e-4)  # 9.8M, 50 %
    one_b = points[(110, "c4_llama_1b", "mix(α=0.25)")]
    assert one_b.delta == pytest.approx(-0.069, abs=5e-4) and one_b.low is None  # 12.5M, one seed


def test_the_nearest_of_two_close_validations_wins_whatever_their_losses():
    r = record("small", 10, "pre", 0, 400, [5.0, 4.0, 3.5, 3.0])
    r["validations"][1:3] = [
        {"step": 200, "fraction": 0.5, "metrics": {"val/loss": 4.0}},
        {"step": 220, "fraction": 0.55, "metrics": {"val/loss": 3.9}},
    ]
    tokens = 128 * 256
    assert loss_near(r, 200 * tokens) == (4.0, 200 * tokens, 0.5)  # the later one is nearer in loss, not in tokens
    assert loss_near(r, 221 * tokens) == (3.9, 220 * tokens, 0.55)


def test_a_run_without_a_validation_at_its_end_counts_its_final_metrics_there():
    r = record("small", 10, "pre", 0, 400, [5.0, 4.0, 3.5, 3.0])
    r["validations"].pop()
    r["metrics"]["val/loss"] = 2.9
    end = 400 * 128 * 256
    assert loss_near(r, end) == (2.9, end, 1.0)
    r["validations"].append({"step": 400, "fraction": 1.0, "metrics": {"val/loss": 3.0}})  # then the validation's own
    assert loss_near(r, end) == (3.0, end, 1.0)


def test_a_validation_that_gave_no_finite_loss_or_no_token_count_is_not_a_point():
    r = record("small", 10, "pre", 0, 400, [5.0, float("nan"), 3.5, 3.0])
    assert loss_near(r, 200 * 128 * 256) is None
    for flag in (True, "128"):  # a count that is not a number (a bool is no batch size)
        assert validation_tokens({**r, "effective": {"global_batch_size": flag}}, {"step": 10}) is None


def test_budgets_within_the_tolerance_are_one_target():
    runs = [record("a", 10, "pre", 0, steps, [5, 4, 3, 2]) for steps in (400, 440, 480, 530)]
    # 440 is 10 % above 400: the same target; 480 is 20 % above it, a new one; 530, 10 % above 480, is 480's
    assert targets(runs) == pytest.approx([400 * 32768, 480 * 32768])


def test_each_point_is_its_cells_finished_seeds_at_its_best_lr_against_a_baseline_not_itself():
    rows = [
        record("small", 10, norm, seed, 400, [5.0, 4.0, 3.5, 3.0 - 0.1 * (norm == "mix") + 0.01 * seed])
        for norm in ("pre", "mix")
        for seed in (0, 1)
    ]
    rows.append(record("small", 10, "pre", 2, 400, [5.0, 4.0, 9.0, 9.0], status="diverged"))  # not a finished seed
    for r in rows:  # validations that do not say where in the run they are
        for v in r["validations"]:
            v.pop("fraction")
    (ladder,) = ladders(rows).values()
    points = {(p.row, round(p.target)): p for p in equal_token_points(ladder, rows)}
    mid = 200 * 128 * 256
    pre, mix = points[("pre", 400 * 32768)], points[("mix", 400 * 32768)]
    assert pre.losses == [3.0, 3.01] and pre.delta is None and pre.lr == 1e-3
    assert mix.delta == pytest.approx(-0.1) and mix.baseline_n == 2 and mix.fraction is None
    assert cell_text(pre, "pre") == "3.005 ± 0.007 (n=2) " and cell_text(mix, "pre").endswith("(n=2, base n=2) ")  # no "of its run"
    assert points.get(("pre", mid)) is None  # 6.55M is no run's budget: no target there
    assert validation_tokens(rows[0], rows[0]["validations"][1]) == mid


def test_a_cell_whose_baseline_has_no_validation_near_the_target_says_so_without_the_baselines_lr_note():
    rows = [
        record(task, params, norm, 0, steps, [5.0, 4.0, 3.5, 3.0])
        for task, params, steps in (("small", 10, 400), ("big", 20, 800))
        for norm in ("pre", "mix")
    ]
    del next(r for r in rows if r["task"] == "big" and r["norm"]["label"] == "pre")["validations"][1]  # its 50 %
    (ladder,) = ladders(rows).values()
    table = markdown(ladder, equal_token_points(ladder, rows))
    small_budget = table.split("### 13.1M tokens")[1].split("###")[0]
    mix_row = next(line for line in small_budget.splitlines() if line.startswith("| mix |"))
    big_cell = mix_row.split(" | ")[-1]
    assert big_cell == "4.000 (n=1; no baseline here) at 13.1M, 50% of its run (lr not bracketed) |"
