"""``--best-over``'s rules at their edges, where mutation testing (bench/mutation) found the cell and its numbers could
change without a test noticing: ties between values, the share of seeds that ended, repeats a seed's outcome
overrules, the best measured value of a row where nothing finished, and the outcome a value is shown with."""

import math

import pytest
from _support.records import lm_run, record

from mixbench.results.cell import Cell, Delta
from mixbench.results.sweep import Sweep, best_value, ended_share


def vit_run(norm, top1, lr, seed=0, status="completed"):
    """A ViT record (val/top1, ↑) at learning rate ``lr``."""
    return {**record(norm, top1, seed=seed, status=status), "config": {"optim": {"lr": lr}, "seed": seed}}


def cell(*ppls_and_statuses):
    return Cell.from_records([lm_run("pre", ppl, math.log(ppl), 1e-3, seed=i, status=s) for i, (ppl, s) in enumerate(ppls_and_statuses)])


def test_ties_go_to_the_smaller_number_and_text_comes_after_numbers_in_its_own_order():
    same = cell((30.0, "completed"))
    assert best_value({1e-4: same, 1e-5: same}, False) == 1e-5  # by size, not by text ("0.0001" < "1e-05") nor by order
    assert best_value({"b": same, "a": same}, False) == "a"
    assert best_value({"auto": same, 1e-3: same}, False) == 1e-3


def test_the_smaller_share_of_seeds_that_ended_wins_before_the_mean():
    one_of_three = cell((40.0, "completed"), (41.0, "completed"), (900.0, "stalled"))  # 1/3 ended
    one_of_two = cell((30.0, "completed"), (900.0, "stalled"))  # 1/2 ended, a better mean
    assert ended_share(one_of_three) == pytest.approx(1 / 3) and ended_share(one_of_two) == 0.5
    assert best_value({1e-3: one_of_two, 3e-3: one_of_three}, False) == 3e-3
    assert ended_share(Cell()) is None


def test_a_repeat_that_the_seeds_newer_outcome_overrules_is_not_averaged_into_the_loss():
    """Seed 0 at 1e-3 finished, then a newer run of it stalled: the seed counts as stalled, its ℓ(η) is the stalled
    run's loss (under ℓ₀ = ln 100), not a mean with the overruled finished run; a value whose seeds all crashed has none."""
    records = [
        lm_run("pre", 30.0, 3.4, 1e-3, started_at="2026-01-01T00:00:00+00:00"),
        lm_run("pre", 90.0, 4.5, 1e-3, status="stalled", started_at="2026-01-02T00:00:00+00:00"),
        lm_run("pre", 40.0, 3.7, 3e-3),
        lm_run("pre", math.nan, math.nan, 1e-2, status="failed"),  # only crashed: no ℓ(η)
    ]
    sweep = Sweep.from_records(records, "optim.lr", higher_is_better=False)
    assert sweep.losses == {1e-3: pytest.approx(4.5), 3e-3: pytest.approx(3.7), 1e-2: None} and sweep.best == 3e-3


def test_without_val_loss_in_a_finished_record_there_is_no_sensitivity():
    records = [lm_run("pre", 30.0, 3.4, 1e-3), {**lm_run("pre", 40.0, 3.7, 3e-3), "metrics": {"val/ppl": 40.0}}]
    sweep = Sweep.from_records(records, "optim.lr", higher_is_better=False)
    assert sweep.losses == {} and sweep.sensitivity is None and sweep.sensitivity_text() == ""


def test_a_row_where_nothing_finished_shows_its_best_measured_value_in_the_metrics_direction():
    lm = [lm_run("pre", 950.0, 6.9, 1e-4, status="stalled"), lm_run("pre", 900.0, 6.8, 1e-3, status="stalled")]
    assert Sweep.from_records(lm, "optim.lr", higher_is_better=False).summary() == "(900.00 @lr 1e-3) 2/2 lrs stalled"
    vit = [vit_run("pre", 18.0, 1e-2, status="stalled"), vit_run("pre", 15.0, 3e-2, status="stalled")]
    assert Sweep.from_records(vit, "optim.lr", higher_is_better=True).summary() == "(18.00 @lr 1e-2) 2/2 lrs stalled"


@pytest.mark.parametrize(
    "statuses, shown",
    [
        (["stalled", "stalled", "diverged"], "stalled"),  # the most common
        (["stalled", "diverged", "diverged"], "diverged"),
        (["stalled", "diverged"], "diverged"),  # a tie: the first of NOT_FINISHED
        (["failed", "stalled", "failed"], "stalled"),  # a seed that trained outweighs crashed ones
        (["interrupted", "failed", "interrupted"], "interrupted"),  # nothing trained: the most common of the rest
        (["interrupted", "failed"], "failed"),
    ],
)
def test_the_outcome_a_value_where_nothing_finished_is_shown_with(statuses, shown):
    records = [lm_run("pre", 900.0, 6.8, 1e-3, seed=i, status=s) for i, s in enumerate(statuses)]
    assert Sweep.from_records(records, "optim.lr", higher_is_better=False).outcome(1e-3) == shown


def test_a_cell_where_nothing_finished_shows_what_its_ended_seeds_measured():
    """``(mean of the finite values[, n=k]) k/n outcome`` for each outcome, the mean over the seeds that ended that way."""
    stalled_and_diverged = cell((900.0, "stalled"), (910.0, "stalled"), (1e6, "diverged"), (math.nan, "stalled"))
    assert stalled_and_diverged.summary() == "(1000000.00) 1/4 diverged (905.00, n=2) 3/4 stalled"
    assert stalled_and_diverged.measured_mean("stalled") == 905.0 and stalled_and_diverged.measured_mean("diverged") == 1e6
    assert cell((900.0, "stalled"), (902.0, "stalled")).text(digits=1) == "(901.0) 2/2 stalled"
    finished = cell((30.0, "completed"), (900.0, "stalled"))  # a finished seed: its mean, the stalled one only counted
    assert finished.summary() == "30.00 (n=1) 1/2 stalled"
    repeated = Cell.from_records([lm_run("pre", 900.0, 6.8, 1e-3, status="stalled", started_at=f"2026-01-0{d}") for d in (1, 2)])
    assert repeated.summary() == "(900.00) 1/1 stalled (1 repeat)"


@pytest.mark.parametrize("diff, shown", [(0.5, "Δ +0.50"), (0.0, "Δ +0.00"), (-0.5, "Δ −0.50"), (1.25, "Δ +1.25")])
def test_the_delta_keeps_its_sign(diff, shown):
    one = cell((30.0, "completed"))
    one.delta = Delta("pre", diff)
    assert one.delta_text() == shown and one.text() == f"30.00 (n=1) {shown}"
    assert one.text(digits=1) == f"30.0 (n=1) Δ {shown[2]}{abs(diff):.1f}"
    one.delta = Delta("pre", diff, diff - 1.0, diff + 1.0)  # excludes 0 only at 1.25
    interval = f" [{diff - 1.0:.2f}, {diff + 1.0:.2f}]".replace("-", "−") + ("*" if diff == 1.25 else "")
    assert one.delta_text() == shown + interval


def test_a_record_without_metrics_is_read_as_having_none():
    """A stalled run that wrote ``"metrics": null`` (an old writer) counts as stalled, with no ℓ(η) of its own."""
    records = [lm_run("pre", 30.0, 3.4, 1e-3), {**lm_run("pre", 900.0, 6.8, 3e-3, status="stalled"), "metrics": None}]
    sweep = Sweep.from_records(records, "optim.lr", higher_is_better=False)
    assert sweep.best == 1e-3 and sweep.outcome(3e-3) == "stalled" and sweep.losses[3e-3] == pytest.approx(math.log(100))
