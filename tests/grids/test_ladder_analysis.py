"""``mixbench reproduce ladder --analyze``: Pre-LN and Mix-LN again at each size's best lr, weights kept, analysed side by
side — on a one-rung ladder of the debug LLaMA (a few CPU steps)."""

import json
from pathlib import Path

import pytest

from mixbench.cli.app import main
from mixbench.grids import ladder, ladder_analysis
from mixbench.grids.ladder_analysis import analysis_plan, reproduce_ladder_analysis

TINY = [
    "model=llama_debug",
    "model.vocab_size=8192",
    "data.seq_len=32",
    "trainer.precision=32-true",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "trainer.max_steps=3",
    "trainer.val_check_interval=null",
    "trainer.limit_val_batches=2",
    "trainer.enable_progress_bar=false",
]
SPEC = {
    "kind": "ladder",
    "analysis": {"family": "lm", "placements": ["pre", "mix"], "seed": 0, "tokens": 2000, "limit_val_batches": 1},
    "families": [{"name": "lm", "placements": {"pre": None, "mix": None}, "overrides": TINY, "rungs": [{"task": "llama_lm", "lr": 1e-3}]}],
}


@pytest.fixture
def tiny_ladder(monkeypatch):
    spec = lambda name, root=None: json.loads(json.dumps(SPEC))  # noqa: E731 — a fresh copy each call, as grid() gives
    monkeypatch.setattr(ladder, "grid", spec)
    monkeypatch.setattr(ladder_analysis, "grid", spec)


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("record.json"))]


def test_analyze_reruns_each_placement_at_its_best_lr_and_measures_them_side_by_side(tmp_path, token_cache, tiny_ladder):
    extras = (f"data.cache_dir={token_cache}", f"results_dir={tmp_path}")
    planned, skipped = analysis_plan("tiny", extras)
    assert planned == [] and skipped == ["llama_lm: no best lr yet for pre, mix (no finished run, or it failed at every lr); not analysed"]
    for norm, lr in [("pre", 1e-3), ("pre", 1e-2), ("mix", 3e-3)]:  # the ladder's own seed-0 sweep runs
        assert main(["run", "task=llama_lm", f"norm={norm}", *TINY, f"optim.lr={lr}", "seed=0", *extras]) == 0
    swept = records(tmp_path)
    pre = {r["config"]["optim"]["lr"]: r["primary_metric"]["value"] for r in swept if r["norm"]["placement"] == "pre"}
    assert len(pre) == 2 and len(set(pre.values())) == 2

    (rung,), skipped = analysis_plan("tiny", extras)
    assert skipped == [] and rung.out_dir == tmp_path / "analysis" / "llama_lm"
    pre_argv, mix_argv = rung.argvs
    assert f"optim.lr={min(pre, key=pre.get):g}" in pre_argv and "optim.lr=0.003" in mix_argv  # the lower val/ppl
    reruns = tmp_path.with_name(f"{tmp_path.name}_analysis")  # beside the ladder's folder: no table counts them as seeds
    assert all(a[-2:] == ("save_weights=true", f"results_dir={reruns}") and "seed=0" in a for a in rung.argvs)

    outcomes = reproduce_ladder_analysis("tiny", extras, dry_run=False, jobs=1, only=(), launcher="local")
    assert [o.status for o in outcomes] == ["completed", "completed"]
    assert records(tmp_path) == swept  # the ladder's folder holds its own records only; the reruns are beside it
    assert all((o.run_dir / "model.safetensors").is_file() and o.run_dir.is_relative_to(reruns) for o in outcomes)
    angular = json.loads((rung.out_dir / "angular.json").read_text())
    prune = json.loads((rung.out_dir / "prune.json").read_text())
    assert [p["name"] for p in angular] == ["pre", "mix(α=0.25)"] == [p["name"] for p in prune]
    assert all(p["tokens"] >= 2000 and len(p["distance"]) == 4 for p in angular)
    assert all(len(p["delta"]) == 4 and p["metric"] == "val/ppl" for p in prune)
    assert (rung.out_dir / "angular.png").stat().st_size > 0 and (rung.out_dir / "prune.png").stat().st_size > 0

    again = reproduce_ladder_analysis("tiny", extras, dry_run=False, jobs=1, only=(), launcher="local")
    assert [o.run_dir for o in again] == [o.run_dir for o in outcomes]  # finished reruns are analysed, not trained again


@pytest.mark.parametrize("name", ["table1", "table2", "table3"])  # a plain grid, the SFT + eval chains, the RLHF chains
def test_analyze_belongs_to_ladder_grids(caplog, name):
    assert main(["reproduce", name, "--analyze", "--dry-run"]) == 2
    assert "--analyze belongs to ladder grids" in caplog.text


def test_the_committed_ladder_analyses_pre_and_mix_of_its_llama_sizes(tmp_path, capsys):
    assert main(["reproduce", "ladder", "--analyze", "--dry-run", f"results_dir={tmp_path}"]) == 0  # no records: nothing to rerun
    assert capsys.readouterr().out == ""
    spec = ladder_analysis.analysis_spec("ladder")
    assert spec["family"] == "llama" and spec["placements"] == ["pre", "mix"] and spec["analyses"] == ["angular", "prune"]
