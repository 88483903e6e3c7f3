"""`mixbench reproduce table2`: pretrain → SFT → eval chains (dry run, stage options, reuse of finished stages) and
`mixbench table --paper table2` next to the paper's numbers."""

import json
from pathlib import Path

import pytest
from _support.downstream import TINY, write_records
from _support.paths import REPO_ROOT

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.grids.downstream import chains, same_settings, split_overrides
from mixbench.grids.reproduce import grid


def test_table2_grid_holds_the_paper_numbers():
    spec = grid("table2")
    assert spec["kind"] == "downstream" and spec["tasks"] == ["mmlu", "boolq", "arc_easy", "piqa", "hellaswag", "openbookqa", "winogrande"]
    mix250 = next(r for r in spec["runs"] if r["task"] == "c4_llama_250m" and r["norm"] == "mix")["paper"]
    assert mix250["boolq"] == 56.12 and mix250["avg"] == 41.34
    for run in spec["runs"]:  # "Avg." is the mean of the seven tasks
        assert abs(sum(run["paper"][t] for t in spec["tasks"]) / 7 - run["paper"]["avg"]) < 0.01


def test_dry_run_lists_every_stage_with_its_dependencies(capsys, local_data, tmp_path):
    sft_data = tmp_path / "commonsense_170k.json"
    sft_data.write_text("[]")
    data = [f"pretrain:data.path={local_data.text}", "pretrain:data.tokenizer=embedded", f"sft:data.path={sft_data}"]
    assert main(["reproduce", "table2", "--dry-run", *data, "eval:limit=100"]) == 0
    out = capsys.readouterr().out
    assert (
        out.count("[pretrain] mixbench run task=c4_llama_") == 8
        and out.count("[sft]      mixbench run") == 8
        and out.count("[eval]     mixbench eval") == 8
    )
    assert "task=sft_commonsense model=llama_250m norm=mix" in out and "'init_from=<pretrain run>'" in out
    assert "--num-fewshot 5" in out and "--limit 100" in out and f"data.path={sft_data}" in out
    assert main(["reproduce", "table2", "--dry-run"]) == 2  # listed, then no data here: exit 2 (test_dry_run_plan.py)
    assert "add sft:data.path=" in capsys.readouterr().out
    assert main(["reproduce", "table2", "--dry-run", "--only", "norm=mix", *data]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("# ")] == [
        "# c4_llama_250m · mix(α=0.25) · seed 0",
        "# c4_llama_1b · mix(α=0.25) · seed 0",
    ]


def test_stage_options_and_settings_comparison():
    common, pre, sft, options = split_overrides(
        ("seed=1", "pretrain:data.path=a", "sft:data.path=b", "eval:tasks=boolq,piqa", "eval:limit=5")
    )
    assert (common, pre, sft, options) == (["seed=1"], ["data.path=a"], ["data.path=b"], {"tasks": ["boolq", "piqa"], "limit": 5})
    with pytest.raises(ConfigError, match="unknown evaluation option"):
        split_overrides(("eval:shots=5",))
    [chain] = [c for c in chains("table2", "proxy", (0,), ("model.vocab_size=8192",)) if "· pre ·" in c.label]
    assert "model.num_layers=24" in chain.sft and "scale=proxy" in chain.sft and chain.eval["num_fewshot"] == 0
    old = {"a": 1, "run_dir": "x", "b": {"c": 2}, "init_from": "p", "data": {"tokenizer": "p"}}
    assert same_settings(old, {"a": 1, "run_dir": "y", "b": {"c": 2, "new": 0}, "init_from": "q", "data": {"tokenizer": "q"}})
    assert not same_settings(old, {"a": 1, "b": {"c": 3}})


def _sft_record(root: Path, norm_label: str, seed: int, accuracy: float) -> None:
    tasks = grid("table2")["tasks"]
    metrics = {"val/loss": 1.0, **{f"eval/{t}/acc": accuracy for t in tasks}, "eval/avg/acc": accuracy}
    record = {
        "schema": "mixbench.result/1",
        "task": "sft_commonsense",
        "scale": "paper",
        "seed": seed,
        "status": "completed",
        "model": {"name": "llama_250m"},
        "norm": {"label": norm_label},
        "dataset": {"name": "commonsense_170k"},
        "metrics": metrics,
        "primary_metric": {"name": "val/loss", "higher_is_better": False, "value": 1.0},
        "downstream": {"harness": {"tasks": {t: {"acc": accuracy} for t in tasks}}},
        "started_at": f"2026-01-0{seed + 1}",
    }
    folder = root / "runs" / f"{norm_label}-{seed}"
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps(record))


def test_table_paper_table2_puts_ours_next_to_the_paper(tmp_path, capsys):
    _sft_record(tmp_path, "mix(α=0.25)", 0, 0.40)
    _sft_record(tmp_path, "mix(α=0.25)", 1, 0.42)
    capsys.readouterr()
    assert main(["table", "--paper", "table2", "--results-dir", str(tmp_path), "--format", "md"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| llama_250m · mix(α=0.25)"))
    assert "41.00 ± 1.41 (n=2) / 56.12 (-15.12)" in row and "/ 41.34" in row
    assert "| llama_1b · pre | not run / 26.54" in out


@pytest.mark.slow
def test_reproduce_table2_proxy_chains_run_and_are_reused(tmp_path, capsys):
    """The whole proxy grid at toy size on the CPU (4 chains × pretrain, SFT, eval), then again: nothing re-runs."""
    data = write_records(tmp_path / "sft.json")
    args = [
        "reproduce",
        "table2",
        "--scale",
        "proxy",
        f"results_dir={tmp_path / 'results'}",
        *TINY[1:],
        "model.num_layers=2",
        "data.tokenizer=embedded",
        "model.vocab_size=8192",
        "trainer.precision=32-true",
        "compile=false",
        "pretrain:data.path=embedded",
        "pretrain:trainer.max_steps=2",
        "pretrain:data.batch_size=4",
        "pretrain:data.global_batch_size=4",
        "pretrain:trainer.val_check_interval=2",
        "pretrain:data.max_val_tokens=2000",
        f"sft:data.path={data}",
        "sft:data.val_size=4",
        "sft:trainer.max_steps=2",
        "eval:data=embedded",
        "eval:limit=3",
        "eval:tasks=arc_easy,winogrande",
    ]
    assert main(args) == 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("record.json")]
    sft = [r for r in records if r["task"] == "sft_commonsense"]
    assert len(records) == 8 and len(sft) == 4 and all("eval/arc_easy/acc" in r["metrics"] for r in sft)
    capsys.readouterr()
    assert main([*args[:4], "--dry-run", *args[4:]]) == 0
    assert capsys.readouterr().out.count("# reuse") == 8
    assert main(args) == 0
    assert len(list((tmp_path / "results").rglob("record.json"))) == 8


def test_floors_are_chance_and_majority_of_the_evaluated_items(tmp_path):
    from mixbench.evaluation.report import task_floors

    docs = [{"question": f"q{i}", "passage": "", "label": int(i < 3)} for i in range(4)]  # 3 of 4 gold answers are "yes"
    (tmp_path / "boolq.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    arc = [
        {"id": str(i), "question": "q", "answerKey": key, "choices": {"text": list("abcde"[:n]), "label": list("ABCDE"[:n])}}
        for i, (key, n) in enumerate([("A", 4), ("B", 5), ("A", 4), ("C", 4)])
    ]
    (tmp_path / "arc_easy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in arc))
    boolq, arc_easy = task_floors("boolq", [str(tmp_path)]), task_floors("arc_easy", [str(tmp_path)])
    assert (boolq["n"], boolq["chance"], boolq["majority"], boolq["majority_answer"]) == (4, 50.0, 75.0, "1")
    assert arc_easy["chance"] == pytest.approx(100 * (3 / 4 + 1 / 5) / 4) and arc_easy["majority"] == 50.0


def test_seeds_report_counts_divergence_and_gives_welch_intervals():
    from mixbench.evaluation.report import seeds_report
    from mixbench.results.stats import welch_interval

    def rec(acc, status="completed"):
        return {"status": status, "metrics": {"eval/piqa/acc": acc, "eval/piqa/acc_stderr": 0.01}}

    groups = {"pre": [rec(0.50), rec(0.52), rec(0.51)], "mix": [rec(0.55), rec(0.56), rec(0.57, "diverged")]}
    floors = {"piqa": {"n": 100, "chance": 50.0, "majority": 53.0, "majority_answer": "0"}}
    text = seeds_report(groups, ["piqa"], floors, "pre")
    iv = welch_interval([55.0, 56.0, 57.0], [50.0, 52.0, 51.0])
    assert "| mix | 3 (1 diverged) | 56.00 ± 1.00 ▲ (se 1.00) |" in text and "| pre | 3 (0 diverged) | 51.00 ± 1.00 ▽" in text
    assert f"| mix | +5.00 [{iv.low:+.2f}, {iv.high:+.2f}]\\* |" in text and "about 0.1 would exclude 0" in text


def test_committed_proxy_table2_renders_with_its_pretraining_runs(capsys):
    """The committed proxy records moved from the device's results folder: each SFT record still finds its pretraining
    run (by folder name), and the report counts Post-LN's diverged fine-tuning runs."""
    from mixbench.grids.downstream import main as downstream_main

    root = REPO_ROOT / "results" / "proxy" / "table2"
    assert downstream_main(["--results-dir", str(root), "--scale", "proxy", "--data", "embedded"]) == 0
    out = capsys.readouterr().out
    assert "32.02 (completed); 31.93 (completed); 31.35 (completed)" in out and "| post | 3 (3 diverged) |" in out
