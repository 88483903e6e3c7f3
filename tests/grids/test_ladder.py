"""The size ladder (``mixbench reproduce ladder``): its lr grid, budgets, and the planner's rules round by round."""

import logging
import math
import shutil

import pytest

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.grids.ladder import family_settings, grid_index, grid_position, lm_budget, lr_at, next_step, records_by_position, rungs
from mixbench.results.records import SCHEMA

SEEDS = {"best": 3, "disagree": 5}
ANCHOR = 1e-3


def run(ppl, k, seed=0, status="completed", lr=None):
    """A finished LM record at the k-th lr of the 1e-3 grid (or at ``lr``, one run by hand off the grid)."""
    return {
        "schema": SCHEMA,
        "task": "c4_llama_71m",
        "family": "lm",
        "model": {"name": "llama_71m", "options": {"vocab_size": 100}},
        "norm": {"label": "pre", "placement": "pre"},
        "seed": seed,
        "status": status,
        "metrics": {"val/ppl": ppl, "val/loss": math.log(ppl) if ppl < 1e6 else float("nan")},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": ppl},
        "dataset": {"name": "textmix"},
        "scale": "proxy",
        "config": {"optim": {"lr": lr_at(ANCHOR, k) if lr is None else lr}, "seed": seed},
    }


def by_k(*records):
    return records_by_position(ANCHOR, records)


def step(*records, start=0, max_lrs=7):
    return next_step(by_k(*records), start, False, SEEDS, max_lrs)


def test_the_lr_grid_is_half_decades_around_its_anchor_and_indexes_back():
    assert [lr_at(1e-3, k) for k in range(-4, 3)] == [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    assert [lr_at(5e-4, k) for k in (-2, -1, 0, 1)] == [5e-5, 1.5e-4, 5e-4, 1.5e-3]  # the 1B rung's
    assert [lr_at(4e-3, k) for k in (-1, 0, 1, 2)] == [1.2e-3, 4e-3, 1.2e-2, 4e-2]  # the ViT recipe's
    for anchor in (1e-3, 5e-4, 4e-3):
        assert all(grid_index(anchor, lr_at(anchor, k)) == k for k in range(-6, 5))


def test_an_lr_run_by_hand_off_the_grid_keeps_a_place_of_its_own_between_its_grid_neighbours():
    assert grid_position(1e-3, 3e-4) == -1 and grid_position(1e-3, 1e-3) == 0 and grid_position(5e-4, 1.5e-4) == -1
    assert -1 < grid_position(1e-3, 3.1e-4) < grid_position(1e-3, 5e-4) < grid_position(1e-3, 9.9e-4) < 0
    assert 0 < grid_position(1e-3, 2e-3) < 1 and -2 < grid_position(1e-3, 2e-4) < -1
    # the share of the way, in log lr, from the grid lr below: 5e-4 (nearest grid lr 3e-4, below it), 8e-4 (nearest 1e-3, above)
    assert grid_position(1e-3, 5e-4) == pytest.approx(-1 + math.log(5 / 3) / math.log(10 / 3))  # −0.576
    assert grid_position(1e-3, 8e-4) == pytest.approx(-1 + math.log(8 / 3) / math.log(10 / 3))  # −0.185
    positions = by_k(run(41.5, -1), run(35.8, 0, lr=5e-4), run(37.1, 0), run(38.4, 0, seed=1))
    assert [[r["config"]["optim"]["lr"] for r in positions[k]] for k in sorted(positions)] == [[3e-4], [5e-4], [1e-3, 1e-3]]


def test_a_best_lr_run_by_hand_off_the_grid_gets_its_seeds_and_steps_go_to_its_grid_neighbours():
    # LLaMA-250M Pre-LN at 25M tokens: 5e-4, run by hand between 3e-4 and 1e-3, beat 1e-3's three seeds on one seed
    by_hand = run(35.83, 0, lr=5e-4)
    at_5e_4 = grid_position(ANCHOR, 5e-4)
    swept = (run(41.50, -1), by_hand, run(37.09, 0), run(38.37, 0, seed=1), run(34.16, 0, seed=2), run(113.52, 1))
    assert step(*swept).runs == ((at_5e_4, 1), (at_5e_4, 2))  # bracketed by 3e-4 and 1e-3: its seeds
    assert step(*swept, run(36.0, 0, seed=1, lr=5e-4), run(36.5, 0, seed=2, lr=5e-4)).done.startswith("best lr bracketed")
    assert step(by_hand, run(40, 0), run(60, 1)).runs == ((-1, 0),)  # best at the bottom: the grid lr below it, 3e-4
    assert step(run(60, -1), run(40, 0), run(30, 0, lr=2e-3)).runs == ((1, 0),)  # at the top: the grid lr above, 3e-3
    assert step(run(1e9, 0, lr=5e-4, status="diverged"), run(1e9, 0, status="diverged"), run(1e9, 1, status="diverged")).runs == ((-1, 0),)


def test_lm_budgets_are_the_same_fraction_of_each_sizes_paper_tokens():
    budget = {"fraction": 0.005, "tokens_per_step": 128 * 256}
    steps = [lm_budget(budget, tokens) for tokens in (1.1e9, 2.2e9, 3.9e9, 5e9)]
    assert steps == [168, 336, 596, 764]  # multiples of 4: validations at 25 / 50 / 75 / 100 %
    assert all(abs(s * 32768 / t - 0.005) < 0.0002 for s, t in zip(steps, (1.1e9, 2.2e9, 3.9e9, 5e9)))
    assert lm_budget({"fraction": 1, "tokens_per_step": 32768}, 2.5e7) == 764  # the whole paper budget
    for fraction in (0, 1.5):
        with pytest.raises(ConfigError, match=r"fraction must be in \(0, 1\]"):
            lm_budget({"fraction": fraction, "tokens_per_step": 1}, 1e9)
    assert lm_budget({"tokens": 1, "tokens_per_step": 1}, None) == 4  # at least one step a validation
    for budget in ({"tokens": 0, "tokens_per_step": 1}, {"tokens": 100, "tokens_per_step": 0}):
        with pytest.raises(ConfigError, match="must be > 0"):
            lm_budget(budget, None)


def test_the_committed_ladder_has_four_llama_sizes_and_two_vit_sizes():
    ladder = rungs("ladder")
    assert [r.task for r in ladder if r.family == "llama"] == ["c4_llama_71m", "c4_llama_130m", "c4_llama_250m", "c4_llama_1b"]
    assert [r.task for r in ladder if r.family == "vit"] == ["in1k_vit_tiny", "in1k_vit_small"]
    llama = [r for r in ladder if r.family == "llama"]
    assert [r.anchor for r in llama] == [1e-3, 1e-3, 1e-3, 5e-4]  # the paper's lrs
    assert "trainer.max_steps=764" in llama[-1].overrides and "trainer.val_check_interval=191" in llama[-1].overrides
    assert {p for p, _ in llama[0].starts} >= {"pre", "post", "deepnorm", "mix", "olmo2", "lns", "peri", "dyt"}


def test_a_fresh_placement_starts_with_its_lr_and_one_half_decade_each_side():
    assert step(start=0).runs == ((-1, 0), (0, 0), (1, 0))
    assert step(run(50, 0), start=0).runs == ((-1, 0), (1, 0))  # what is finished is not run again


def test_the_sweep_goes_on_past_a_best_lr_at_the_edge_of_what_was_tried():
    assert step(run(60, -1), run(50, 0), run(40, 1)).runs == ((2, 0),)  # best at the top: one step up
    assert step(run(40, -1), run(50, 0), run(60, 1)).runs == ((-2, 0),)  # best at the bottom: one step down
    # the best is bracketed by a diverged lr above it: no step further up, its seeds next
    assert step(run(60, -1), run(50, 0), run(1e9, 1, status="diverged")).runs == ((0, 1), (0, 2))


def test_seeds_at_the_best_lr_three_and_five_where_they_disagree():
    swept = (run(60, -1), run(50, 0), run(55, 1))
    assert step(*swept).runs == ((0, 1), (0, 2))
    done = step(*swept, run(51, 0, seed=1), run(49, 0, seed=2))
    assert done.runs == () and "bracketed" in done.done
    disagree = step(*swept, run(51, 0, seed=1), run(900, 0, seed=2, status="stalled"))
    # one of three seeds stalled at 1e-3: counting it, 3e-3 (one seed, trained) is now best, at the top of what was
    # tried — the sweep goes on above it before any seed is added there
    assert disagree.runs == ((2, 0),)


def test_seeds_first_asks_for_the_best_lrs_seeds_ahead_of_each_sweep_round():
    def first(*records):
        return next_step(by_k(*records), 0, False, SEEDS, 7, seeds_first=True).runs

    assert first() == ((-1, 0), (0, 0), (1, 0))  # nothing finished: nothing to seed yet
    assert first(run(50, 0)) == ((0, 1), (0, 2), (-1, 0), (1, 0))  # the start lr trained: its seeds, then its bracket
    assert first(run(60, -1), run(50, 0), run(40, 1)) == ((1, 1), (1, 2), (2, 0))  # the best moved up: its seeds, then above
    assert first(run(900, 0, status="stalled")) == ((-1, 0), (1, 0))  # no lr trained: the sweep alone
    bracketed = (run(60, -1), run(50, 0), run(55, 1))
    assert first(*bracketed) == step(*bracketed).runs == ((0, 1), (0, 2))  # once bracketed, the same as without


def test_a_best_lr_whose_seeds_disagree_gets_five():
    rows = [run(60, -1), run(70, 1), run(50, 0), run(52, 0, seed=1), run(900, 0, seed=2, status="stalled")]
    rows += [run(900, -1, seed=1, status="stalled"), run(900, 1, seed=1, status="stalled")]  # every lr 1 of 2 or 3 stalled
    rows += [run(900, -1, seed=2, status="stalled"), run(900, 1, seed=2, status="stalled")]
    assert step(*rows).runs == ((0, 3), (0, 4))


def test_a_placement_that_fails_at_its_start_lr_and_both_neighbours_fails_at_every_lr():
    failed = [run(1e9, k, status="diverged") for k in (-1, 0, 1)]  # 3e-4, 1e-3, 3e-3: three lrs spanning a decade
    end = step(*failed)
    assert end.runs == () and "failed at every lr tried (3 lrs" in end.done
    two = next_step(by_k(*failed[1:]), 0, False, SEEDS, 7)  # only 1e-3 and 3e-3 tried (the third crashed): it again
    assert two.runs == ((-1, 0),)
    seeded = next_step(by_k(*failed), 0, False, SEEDS, 7, seeds_first=True)  # no lr trained: no seeds to ask for
    assert seeded == end
    bracketed = (run(60, -1), run(50, 0), run(55, 1), run(51, 0, seed=1), run(49, 0, seed=2))
    assert next_step(by_k(*bracketed), 0, False, SEEDS, 7, seeds_first=True).done == "best lr bracketed, 3 seeds there"


def accuracy(acc, k, seed=0):
    """A finished image-classification record at the k-th lr: higher is better."""
    record = run(1.0, k, seed=seed)
    record["metrics"] = {"val/acc1": acc}
    record["primary_metric"] = {"name": "val/acc1", "higher_is_better": True, "value": acc}
    return record


def test_where_higher_is_better_the_best_lr_is_the_highest_scoring_one():
    swept = by_k(accuracy(60.0, -1), accuracy(70.0, 0), accuracy(65.0, 1))
    assert next_step(swept, 0, True, SEEDS, 7).runs == ((0, 1), (0, 2))  # bracketed at 1e-3: its seeds
    assert next_step(swept, 0, True, SEEDS, 7, seeds_first=True).runs == ((0, 1), (0, 2))
    rising = by_k(accuracy(60.0, -1), accuracy(65.0, 0), accuracy(70.0, 1))
    assert next_step(rising, 0, True, SEEDS, 7, seeds_first=True).runs == ((1, 1), (1, 2), (2, 0))  # best at the top


def test_max_lrs_stops_a_sweep_that_never_brackets():
    rising = [run(100 - 10 * k, k) for k in range(-1, 6)]  # 7 lrs, each better than the last
    end = step(*rising, max_lrs=7)
    assert end.runs == () and "max_lrs" in end.done


def test_family_settings_go_to_their_own_family_only():
    extras = ("llama:data.path=x", "vit:data.path=y", "results_dir=r")
    assert family_settings(extras, "llama", {"llama", "vit"}) == ("data.path=x", "results_dir=r")
    assert family_settings(extras, "vit", {"llama", "vit"}) == ("data.path=y", "results_dir=r")
    with pytest.raises(ConfigError, match="no ladder family 'lm'"):
        family_settings(("lm:data.path=x",), "llama", {"llama", "vit"})


def test_dry_run_lists_every_size_with_its_placements_at_three_lrs(tmp_path, capsys, local_data):
    data = [f"llama:data.path={local_data.text}", f"vit:data.path={local_data.cifar}"]
    argv = [
        "reproduce",
        "ladder",
        "--dry-run",
        *data,
        "llama:data.tokenizer=embedded",
        "llama:model.vocab_size=8192",
        f"results_dir={tmp_path}",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("mixbench run ") for line in lines)
    for task, steps in [("c4_llama_71m", 168), ("c4_llama_130m", 336), ("c4_llama_250m", 596), ("c4_llama_1b", 764)]:
        mine = [line for line in lines if f"task={task} " in line]
        assert len(mine) == 8 * 3 and all(f"trainer.max_steps={steps}" in line for line in mine)
        assert all("data.tokenizer=embedded" in line for line in mine)
    for task in ("in1k_vit_tiny", "in1k_vit_small"):
        mine = [line for line in lines if f"task={task} " in line]
        assert len(mine) == 5 * 3 and not any("data.tokenizer" in line for line in mine)
        assert {line.split("optim.lr=")[1].split()[0] for line in mine} == {"0.004", "0.012", "0.04"}
    assert main(["reproduce", "ladder", "--dry-run", "--seeds", "2", f"results_dir={tmp_path}"]) == 2  # the ladder picks seeds


def test_a_round_lists_every_placement_at_its_start_lr_before_the_steps_around_it(tmp_path, capsys, local_data):
    argv = [
        "reproduce",
        "ladder",
        "--dry-run",
        "--only",
        "task=c4_llama_1b",
        f"llama:data.path={local_data.text}",
        "llama:data.tokenizer=embedded",
        f"results_dir={tmp_path}",
    ]
    assert main(argv) == 0
    lrs = [line.split("optim.lr=")[1].split()[0] for line in capsys.readouterr().out.splitlines()]
    assert lrs[:8] == ["0.0005"] * 8 and sorted(set(lrs[8:])) == ["0.00015", "0.0015"]  # a round cut short has tried all 8


def test_a_fixed_token_budget_gives_every_size_the_same_steps():
    budget = {"tokens": 2.5e7, "tokens_per_step": 128 * 256}
    assert [lm_budget(budget, tokens) for tokens in (1.1e9, 5e9, None)] == [764, 764, 764]  # the 1B rung's 764 steps
    with pytest.raises(ConfigError, match="either fraction"):
        lm_budget({"tokens": 2.5e7, "fraction": 0.005, "tokens_per_step": 1}, 1e9)
    with pytest.raises(ConfigError, match="paper_tokens"):
        lm_budget({"fraction": 0.005, "tokens_per_step": 1}, None)


def test_the_equal_data_ladder_runs_four_sizes_at_764_steps_from_each_sizes_ladder_best():
    sizes = rungs("ladder_tokens")
    assert [r.task for r in sizes] == ["c4_llama_71m", "c4_llama_130m", "c4_llama_250m", "c4_llama_1b"]
    assert all("trainer.max_steps=764" in r.overrides and "trainer.val_check_interval=191" in r.overrides for r in sizes)
    assert dict(sizes[0].starts) == {"pre": 3e-3, "mix": None, "post": 3e-4, "deepnorm": None}  # 71M's ladder bests
    one_b = {r.task: r for r in rungs("ladder")}["c4_llama_1b"]
    assert sizes[-1].overrides == one_b.overrides and sizes[-1].anchor == one_b.anchor  # the 1B records count in both
    assert [r.seeds_first for r in sizes] == [False, False, False, True] and not one_b.seeds_first  # 1B: seeds first


def test_a_rung_start_for_an_unknown_placement_is_refused(tmp_path):
    grids = tmp_path / "configs" / "grids"
    grids.mkdir(parents=True)
    (grids / "tiny.yaml").write_text(
        "tiny:\n  kind: ladder\n  runs: []\n  families:\n    - name: llama\n      placements: {pre: null}\n"
        "      rungs:\n        - {task: c4_llama_71m, lr: 1.0e-3, starts: {psot: 3.0e-4}}\n"
    )
    with pytest.raises(ConfigError, match="psot"):
        rungs("tiny", root=tmp_path)


def stalled(k, losses, seed=0):
    """A stalled record at the k-th lr whose validations at 25/50/75/100 % gave ``losses``."""
    record = run(963, k, seed=seed, status="stalled")
    record["validations"] = [{"fraction": f, "metrics": {"val/loss": x}} for f, x in zip((0.25, 0.5, 0.75, 1.0), losses)]
    return record


def test_a_sweep_that_fails_everywhere_goes_on_below_a_lowest_lr_that_was_still_improving():
    flat = (6.9995, 6.9784, 6.9597, 6.9584)  # 1B Post-LN at 5e-4: 0.02 nats over its second half
    falling = (6.9809, 6.9727, 6.8896, 6.8734)  # at 1.5e-4: 0.099 nats, still learning
    ended = step(stalled(-1, flat), stalled(0, flat), stalled(1, flat))
    assert ended.runs == () and "failed at every lr" in ended.done
    more = step(stalled(-1, falling), stalled(0, flat), stalled(1, flat))
    assert more.runs == ((-2, 0), (-1, 1))  # one lr lower, and a second seed at the lowest failed lr
    seeded = step(stalled(-1, falling), stalled(-1, falling, seed=1), stalled(0, flat), stalled(1, flat))
    assert seeded.runs == ((-2, 0),)
    lower_flat = step(stalled(-2, flat), stalled(-1, falling), stalled(-1, falling, seed=1), stalled(0, flat), stalled(1, flat))
    assert lower_flat.runs == () and "failed at every lr" in lower_flat.done  # the new lowest lr was not improving: the sweep ends
    capped = step(stalled(-1, falling), stalled(0, flat), stalled(1, flat), max_lrs=3)
    assert capped.runs == () and "max_lrs" in capped.done


def test_dry_run_of_the_equal_data_ladder_lists_the_four_sizes_at_764_steps(tmp_path, capsys, local_data):
    argv = [
        "reproduce",
        "ladder_tokens",
        "--dry-run",
        f"llama:data.path={local_data.text}",
        "llama:data.tokenizer=embedded",
        "llama:model.vocab_size=8192",
        f"results_dir={tmp_path}",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    for task in ("c4_llama_71m", "c4_llama_130m", "c4_llama_250m", "c4_llama_1b"):
        mine = [line for line in lines if f"task={task} " in line]
        assert len(mine) == 4 * 3 and all("trainer.max_steps=764" in line for line in mine)


SIXTH_LEASE_250M_PRE = [  # LLaMA-250M Pre-LN at 25M tokens after the sixth lease
    "seed0-20261207T154725-547d49",  # 3e-4
    "seed0-20261207T164914-8576cd",  # 5e-4, run by hand
    "seed0-20261207T153841-31f4b2",  # 1e-3, seeds 0-2
    "seed1-20261207T155102-b667dd",
    "seed2-20261207T155447-f20c7a",
    "seed0-20261207T142712-a20490",  # 3e-3
]


def test_the_committed_fixed_token_records_plan_the_seeds_of_an_lr_run_by_hand(tmp_path, capsys, caplog):
    """As bench/device/ladder.sh plans a lease: LLaMA-250M Pre-LN's 5e-4, run by hand between the grid's 3e-4 and
    1e-3, is its best so far on one seed; the plan asks for its seeds (the planner once crashed on it mid-lease)."""
    pre = "results/proxy/ladder_tokens/runs/c4_llama_250m/llama_250m/pre"
    for run in SIXTH_LEASE_250M_PRE:  # the records as they were: later seeds at 5e-4 would change the plan
        shutil.copytree(f"{pre}/{run}", tmp_path / "runs" / "c4_llama_250m" / "llama_250m" / "pre" / run)
    settings = ["llama:data.path=.data/textmix3/pkgtext-train.*.json.gz", "llama:data.tokenizer=embedded"]
    settings += ["llama:model.vocab_size=8192", "llama:data.num_workers=2", "save_weights=false", "compile=true"]
    settings += ["trainer.enable_progress_bar=false", f"results_dir={tmp_path}", "resume=auto"]
    caplog.set_level(logging.INFO)
    only = ["--only", "task=c4_llama_250m", "--only", "norm=pre"]
    assert main(["reproduce", "ladder_tokens", "--dry-run", "--data-elsewhere", *only, *settings]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert [(line.split("optim.lr=")[1].split()[0], line.split("seed=")[1].split()[0]) for line in planned] == [
        ("0.0005", "1"),
        ("0.0005", "2"),
    ]
    assert "c4_llama_250m pre: finished 0.0003×1, 0.0005×1, 0.001×3, 0.003×1; next 2 run(s)" in caplog.text
