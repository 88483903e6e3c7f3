"""mixbench search: the plan grammar, a tiny multi-fidelity study that resumes from its SQLite file, a pruned trial's
record, the confirmation runs and the report."""

import json

import pytest
from _support.paths import REPO_ROOT
from _support.runs import LM_FOUR_STEPS

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.grids.search_space import Space, grammar_plans
from mixbench.layers.placement import NormSpec
from mixbench.results.records import write_record

optuna = pytest.importorskip("optuna")

TINY_LM = [
    *LM_FOUR_STEPS,
    "save_weights=false",
]


def test_plan_grammar_for_small_depths():
    assert grammar_plans(2, ("sandwich",)) == [
        ("pre", "pre"),
        ("pre", "sandwich"),
        ("sandwich", "sandwich"),
        ("post", "pre"),
        ("post", "sandwich"),
        ("post", "post"),
    ]
    for L in (1, 3, 4):
        plans = grammar_plans(L, ("sandwich", "lns"))
        assert len(plans) == len(set(plans)) == (L + 1) + 2 * L * (L + 1) // 2  # k = 0..L; j = 1..L-k per kind
        for plan in plans:
            k = next((i for i, p in enumerate(plan) if p != "post"), L)
            rest = plan[k:]
            assert len(set(rest) - {"pre"}) <= 1 and list(rest) == sorted(rest, key=lambda p: p != "pre")  # pre, then one kind
            assert NormSpec(placement="custom", layers=plan).plan(L) == list(plan)
    space = Space("alpha", 3)
    assert [space.overrides(p) for p in space.plans()][1] == ["norm=mix", "norm.num_post=1"]
    assert space.spec(space.plans()[3]).plan(3) == ["post"] * 3
    assert len(Space("blocks", 3, ("pre", "post")).plans()) == 8
    assert NormSpec(placement="custom", layers=("post", "pre", "pre")).label() == "custom[po,pr,pr]"  # one table row per plan
    with pytest.raises(ConfigError, match="unknown block placement"):
        Space("plan", 3, ("sandwhich",))
    with pytest.raises(ConfigError, match="at most 4096"):
        Space("blocks", 24, ("pre", "post"))


def trial_records(folder):
    return {r["search"]["trial"]: r for r in map(lambda p: json.loads(p.read_text()), folder.rglob("record.json"))}


def test_tiny_search_resumes_from_its_sqlite_file(tmp_path):
    args = [
        "search",
        "--study",
        "tiny",
        "--space",
        "alpha",
        "--pruner",
        "halving",
        "--min-steps",
        "2",
        "--reduction-factor",
        "2",
        "--results-dir",
        str(tmp_path),
        *TINY_LM,
    ]
    assert main([*args, "--trials", "4"]) == 0
    folder = tmp_path / "search" / "tiny"
    storage = f"sqlite:///{folder / 'study.sqlite3'}"
    first = optuna.load_study(study_name="tiny", storage=storage).trials
    assert len(first) == 4 and all(t.state.is_finished() for t in first)
    records = trial_records(folder / "trials")
    for t in first:
        if "repeat_of" in t.user_attrs:  # the same plan with the search seed: not trained again
            continue
        r = records[t.number]
        assert r["search"]["study"] == "tiny" and r["search"]["params"] == t.params
        assert r["norm"]["plan"] == ["post"] * t.params["num_post"] + ["pre"] * (len(r["norm"]["plan"]) - t.params["num_post"])
        if t.state == optuna.trial.TrialState.PRUNED:  # stopped at the first rung, recorded so
            assert r["status"] == "pruned" and r["steps"] == 2 and r["search"]["pruned_at_step"] == 2
        else:
            assert t.state == optuna.trial.TrialState.COMPLETE and r["status"] == "completed" and r["steps"] == 4
            assert t.value == pytest.approx(r["primary_metric"]["value"]) and t.intermediate_values.keys() <= {2, 4}
    assert main([*args, "--trials", "2"]) == 0  # resumes: the 4 finished trials stay, 2 more are added
    again = optuna.load_study(study_name="tiny", storage=storage).trials
    assert len(again) == 6 and [(t.number, t.state, t.value) for t in again[:4]] == [(t.number, t.state, t.value) for t in first]
    assert main([*args, "--trials", "3", "--max-trials", "6"]) == 0  # the study already holds 6: nothing runs
    assert len(optuna.load_study(study_name="tiny", storage=storage).trials) == 6
    assert main(["search", "--study", "tiny", "--space", "alpha", "--results-dir", str(tmp_path), *TINY_LM, "--trials", "1"]) == 2
    assert main(["table", "--results-dir", str(tmp_path), "--format", "csv"]) == 0  # trials are ordinary records
    assert main(["search", "--confirm", "tiny", "--seeds", "2", "--dry-run", "--results-dir", str(tmp_path)]) == 0


def test_a_pruned_trial_is_recorded_as_pruned_at_its_step(tmp_path):
    from mixbench.training.callbacks import TrialPruning
    from mixbench.training.config import compose
    from mixbench.training.run import run

    class AlwaysPrune:
        reported = []

        def report(self, value, step):
            self.reported.append(step)

        def should_prune(self):
            return True

    trial = AlwaysPrune()
    record = run(
        compose([*TINY_LM, f"results_dir={tmp_path}"]),
        callbacks=(TrialPruning(trial, "val/loss"),),
        record_extra={"search": {"study": "s", "trial": 0}},
    )
    assert record["status"] == "pruned" and record["steps"] == 2 and record["budget"]["stopped_early"]
    assert record["search"] == {"study": "s", "trial": 0, "pruned_at_step": 2} and trial.reported == [2]
    assert json.loads((tmp_path.glob("runs/*/*/*/*/record.json").__next__()).read_text())["status"] == "pruned"


def synthetic(folder, norm: dict, label: str, seed: int, value: float):
    from mixbench.results.records import SCHEMA, write_record

    run = folder / "confirm" / "runs" / label / f"seed{seed}"
    write_record(
        {
            "schema": SCHEMA,
            "task": "llama_lm",
            "family": "llama",
            "model": {"name": "llama_debug"},
            "norm": {**norm, "label": label},
            "seed": seed,
            "status": "completed",
            "metrics": {"val/loss": value},
            "scale": "embedded",
            "primary_metric": {"name": "val/loss", "higher_is_better": False, "value": value},
            "dataset": {"name": "tiny"},
            "started_at": "2026-11-27T00:00:00",
        },
        run / "record.json",
    )


def test_report_on_synthetic_records(tmp_path, capsys):
    from mixbench.grids.search import Settings, open_study

    settings = Settings("alpha", (), tuple(TINY_LM), "halving", 2, 2)
    study, _, space, _ = open_study(tmp_path, "syn", settings)
    dist = {"num_post": optuna.distributions.IntDistribution(0, space.num_layers)}
    study.add_trial(optuna.trial.create_trial(params={"num_post": 1}, distributions=dist, value=5.0, intermediate_values={2: 6.0}))
    study.add_trial(optuna.trial.create_trial(params={"num_post": 0}, distributions=dist, value=5.5))
    study.add_trial(
        optuna.trial.create_trial(
            params={"num_post": 2},
            distributions=dist,
            state=optuna.trial.TrialState.PRUNED,
            intermediate_values={2: 7.0},
            user_attrs={"pruned_at_step": 2},
        )
    )
    folder = tmp_path / "search" / "syn"
    for seed, (best, pre, mix) in zip((1, 2, 3), ((5.0, 6.0, 5.05), (5.1, 6.1, 5.0), (4.9, 6.2, 5.1))):
        synthetic(folder, {"placement": "mix", "num_post": 1}, "mix(post=1)", seed, best)
        synthetic(folder, {"placement": "pre"}, "pre", seed, pre)
        synthetic(folder, {"placement": "mix", "num_post": None, "alpha": 0.25}, "mix(α=0.25)", seed, mix)
    assert main(["search", "--report", "syn", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    ranked = out.split("## Ranked plans")[1].split("## Confirmation")[0]
    assert ranked.index("mix(post=1)") < ranked.index("mix(post=0)") < ranked.index("pruned at step 2")
    assert "- mix(post=1) beats pre: Δ -1.1 [" in out and "the interval excludes 0" in out
    assert "- mix(post=1) does NOT beat mix(α=0.25) with an interval excluding 0" in out
    assert (folder / "report.md").read_text() == out and (folder / "score_vs_plan.png").stat().st_size > 10_000
    assert main(["search", "--confirm", "syn", "--seeds", "3", "--dry-run", "--results-dir", str(tmp_path)]) == 0
    runs = capsys.readouterr().out.splitlines()
    assert len(runs) == 9 and {r.split("seed=")[1].split()[0] for r in runs} == {"1", "2", "3"}  # never the search seed 0
    assert sum("norm.num_post=1" in r for r in runs) == 3 and sum("norm.alpha=0.25" in r for r in runs) == 3


@pytest.mark.slow
def test_tiny_search_confirm_and_report_end_to_end(tmp_path, capsys):
    args = ["--results-dir", str(tmp_path)]
    assert main(["search", "--study", "e2e", "--space", "alpha", "--pruner", "none", "--trials", "2", *args, *TINY_LM]) == 0
    assert main(["search", "--confirm", "e2e", "--seeds", "2", *args]) == 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "search" / "e2e" / "confirm").rglob("record.json")]
    assert len(records) == 6 and {r["seed"] for r in records} == {1, 2} and {r["status"] for r in records} == {"completed"}
    assert main(["search", "--confirm", "e2e", "--seeds", "2", *args]) == 0  # finished runs are skipped, none added
    assert len(list((tmp_path / "search" / "e2e" / "confirm").rglob("record.json"))) == 6
    capsys.readouterr()
    assert main(["search", "--report", "e2e", *args]) == 0
    out = capsys.readouterr().out
    assert "### against pre" in out and "### against mix(α=0.25)" in out and out.count(" vs ") + out.count("beats") >= 2


def test_confirm_reuses_earlier_runs_of_the_same_settings_and_seed_only(tmp_path, capsys, caplog):
    args = ["--results-dir", str(tmp_path)]
    earlier = tmp_path / "earlier"
    assert main(["search", "--study", "re", "--space", "alpha", "--pruner", "none", "--trials", "1", *args, *TINY_LM]) == 0
    assert main(["run", *TINY_LM, "norm=pre", "seed=1", f"results_dir={earlier}", "compile=false"]) == 0  # same settings
    assert main(["run", *TINY_LM, "norm=pre", "seed=2", f"results_dir={earlier}", "optim.lr=0.5"]) == 0  # another lr
    (blank,) = [p for p in earlier.rglob("record.json") if "seed2-" in str(p)]  # a record without its config
    write_record({**json.loads(blank.read_text()), "config": {}, "run_id": "blank"}, earlier / "blank" / "record.json")
    capsys.readouterr()
    reuse = ["search", "--confirm", "re", "--seeds", "2", "--reuse-from", str(earlier), *args]
    assert main([*reuse, "--dry-run"]) == 0
    plan = capsys.readouterr().out.splitlines()
    assert len(plan) == 6 and [line.split(" (same")[0] for line in plan if line.startswith("# reuse")] == [
        f"# reuse {next(earlier.rglob('seed1-*'))}"
    ]
    assert "norm=pre seed=1" not in " ".join(line for line in plan if line.startswith("mixbench run"))
    assert not (tmp_path / "search" / "re" / "confirm").exists()  # a dry run copies nothing
    assert main([*reuse, "--reuse-only"]) == 0
    (copy,) = (tmp_path / "search" / "re" / "confirm").rglob("record.json")
    record = json.loads(copy.read_text())
    assert record["seed"] == 1 and record["norm"]["label"] == "pre" and record["reused_from"] == str(next(earlier.rglob("seed1-*")))
    assert (copy.parent / "config.yaml").is_file() and copy.parent.parent.name == "reused"
    assert main(reuse) == 0  # the five other runs; the copy is kept, not run again
    assert len(list((tmp_path / "search" / "re" / "confirm").rglob("record.json"))) == 6
    capsys.readouterr()
    assert main([*reuse, "--dry-run"]) == 0  # all six are in the study now: nothing to reuse or run again
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["done"] * 6
    assert main([*reuse, "--reuse-only"]) == 0
    assert len(list((tmp_path / "search" / "re" / "confirm").rglob("record.json"))) == 6  # no second copy
    capsys.readouterr()
    assert main(["search", "--report", "re", *args]) == 0
    assert "1 of 6 confirmation runs are earlier runs of the same settings and seeds, reused from" in capsys.readouterr().out
    assert main(["search", "--confirm", "re", "--reuse-from", str(tmp_path / "nowhere"), *args]) == 2
    assert main(["search", "--confirm", "re", "--reuse-only", *args]) == 2
    assert "give --reuse-from DIR" in caplog.text and "no such folder" in caplog.text


def test_a_crashed_trial_is_failed_with_its_error_named_and_the_search_goes_on(tmp_path, monkeypatch, capsys):
    import mixbench.grids.search as search_module

    def out_of_memory(*args, **kwargs):
        raise MemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(search_module, "run", out_of_memory)
    args = ["search", "--study", "oom", "--space", "alpha", "--pruner", "none", "--results-dir", str(tmp_path), *TINY_LM, "--trials", "2"]
    assert main(args) == 0  # a crashed trial is recorded failed; the other trial still runs
    trials = optuna.load_study(study_name="oom", storage=f"sqlite:///{tmp_path / 'search' / 'oom' / 'study.sqlite3'}").trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 2
    assert all(t.user_attrs["status"] == "failed (MemoryError)" for t in trials)
    assert main(["search", "--report", "oom", "--results-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("| failed (MemoryError) |") == 2


@pytest.mark.parametrize("study", ["vit_plan", "llama24_alpha"])
def test_the_committed_proxy_studies_render_their_committed_reports(tmp_path, study):
    import shutil

    committed = REPO_ROOT / "results" / "proxy" / "search" / "search" / study
    shutil.copytree(committed, tmp_path / "search" / study, ignore=shutil.ignore_patterns("*.png"))
    assert main(["search", "--report", study, "--results-dir", str(tmp_path)]) == 0
    rendered = (tmp_path / "search" / study / "report.md").read_text()
    assert rendered == (committed / "report.md").read_text()
    assert "(95% Welch, n=3 vs 3)" in rendered and (tmp_path / "search" / study / "score_vs_plan.png").is_file()


def test_a_study_can_tune_the_lr_beside_the_plan_and_confirms_each_arm_at_its_best_lr(tmp_path, capsys):
    """--lrs: each trial draws optim.lr beside its plan; --confirm runs the best plan at its trial's lr, pre and mix at the
    study's best lr for their plans (the base lr where the study never tried one)."""
    from mixbench.grids.search import LR, Settings, confirmation_runs, open_study

    assert main(["search", "--study", "x", "--space", "alpha", "--pruner", "none", "--lrs", "3e-4,1e-3", "--dry-run", *TINY_LM]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "5 plans" in lines[0] and "× 2 lr(s)" in lines[0] and len(lines) == 11 and lines[1].endswith("optim.lr=0.0003")
    assert (
        main(["search", "--study", "x", "--space", "alpha", "--pruner", "none", "--lrs", "1e-3", "--dry-run", *TINY_LM, "optim.lr=0.01"])
        == 2
    )
    settings = Settings("alpha", (), tuple(TINY_LM), "none", None, 3, (3e-4, 1e-3))
    study, _, _, _ = open_study(tmp_path, "lr", settings)
    dist = {"num_post": optuna.distributions.IntDistribution(0, 4), LR: optuna.distributions.CategoricalDistribution([3e-4, 1e-3])}
    for num_post, lr, ppl in ((0, 3e-4, 50.0), (0, 1e-3, 40.0), (2, 3e-4, 30.0), (2, 1e-3, 35.0)):  # pre best at 1e-3
        study.add_trial(optuna.trial.create_trial(params={"num_post": num_post, LR: lr}, distributions=dist, value=ppl))
    arms = {" ".join(a for a in argv if a.startswith("norm")): argv for argv in confirmation_runs(tmp_path, "lr", 2)}
    lr_of = {arm: next((a for a in argv if a.startswith(LR)), None) for arm, argv in arms.items()}
    assert lr_of == {"norm=mix norm.num_post=2": "optim.lr=0.0003", "norm=pre": "optim.lr=0.001", "norm=mix norm.alpha=0.25": None}
