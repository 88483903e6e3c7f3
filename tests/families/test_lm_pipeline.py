"""C4-format pretraining path end to end on CPU: local shards, divergence handling, DDP, paper grids."""

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _support.paths import DATA, REPO_ROOT, SHARED_DATA
from _support.text import write_readme_shards

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.grids.reproduce import expand
from mixbench.training.callbacks import DivergenceMonitor
from mixbench.training.config import MAX_LR
from mixbench.training.strategy import accumulation_steps, val_check_batches

SHARED_TEXTMIX = SHARED_DATA / "textmix"
TINY_LM = [
    "model=llama_debug",
    "model.vocab_size=8192",
    "compile=false",
    "trainer.precision=32-true",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "trainer.enable_progress_bar=false",
    "trainer.val_check_interval=null",
    "data.num_workers=0",
]


def records(results_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results_dir.rglob("record.json"))]


@pytest.fixture
def c4_folder(tmp_path):
    folder = tmp_path / "c4" / "en"
    folder.mkdir(parents=True)
    write_readme_shards(folder)
    return folder


@pytest.mark.parametrize("mode", ["pad", "pack"])
def test_c4_task_runs_offline_on_local_shards(tmp_path, c4_folder, mode):
    args = [
        "run",
        "task=c4_llama_71m",
        "norm=mix",
        f"data.path={c4_folder}/c4-train.*.json.gz",
        "data.tokenizer=embedded",
        f"data.mode={mode}",
        "data.seq_len=32",
        "data.batch_size=2",
        "data.global_batch_size=4",
        "trainer.max_steps=2",
        "data.max_val_tokens=300",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"results_dir={tmp_path / 'results'}",
        *TINY_LM,
    ]
    assert main(args) == 0
    (rec,) = records(tmp_path / "results")
    assert rec["status"] == "completed" and rec["scale"] == "paper" and rec["steps"] == 2
    # local C4-format files are labelled by their folder, never as C4 itself
    assert rec["dataset"]["name"] == "en" and rec["dataset"]["label"].startswith("C4-format files")
    assert rec["dataset"]["mode"] == mode and "c4-validation" in rec["dataset"]["val_source"]
    assert rec["model"]["label"] == "llama_debug[vocab_size=8192]"
    assert rec["effective"]["accumulate_grad_batches"] == 2 and rec["effective"]["global_batch_size"] == 4
    assert rec["norm"]["plan"] == ["post", "pre", "pre", "pre"] and math.isfinite(rec["metrics"]["val/ppl"])


@pytest.mark.parametrize("micro_batch", [4, 2])
def test_validation_comes_every_n_optimizer_steps_with_or_without_gradient_accumulation(tmp_path, c4_folder, micro_batch):
    """``trainer.val_check_interval=2`` of a 4-step run validates after steps 2 and 4, also where each step is two
    micro-batches (Lightning's int counts micro-batches: it validated at steps 1, 2, 3 and 4)."""
    args = ["run", "task=c4_llama_71m", "norm=pre", f"data.path={c4_folder}/c4-train.*.json.gz", "data.tokenizer=embedded"]
    args += ["data.mode=pack", "data.seq_len=32", f"data.batch_size={micro_batch}", "data.global_batch_size=4"]
    args += ["trainer.max_steps=4", "data.max_val_tokens=300", f"results_dir={tmp_path / 'results'}", *TINY_LM]
    assert main([*args, "trainer.val_check_interval=2"]) == 0  # the last value of a key wins: TINY_LM's null is replaced
    (rec,) = records(tmp_path / "results")
    assert rec["effective"]["accumulate_grad_batches"] == 4 // micro_batch and rec["steps"] == 4
    assert [v["step"] for v in rec["validations"]] == [2, 4]
    assert val_check_batches(191, 2) == 382 and val_check_batches(0.25, 2) == 0.25 and val_check_batches(None, 4) is None


TEXTMIX = {
    "sample": (DATA / "textmix", "00000-of-00001"),  # public-domain documents of it (tests/_support/data/NOTICE.md)
    "shared": (SHARED_TEXTMIX, "00006-of-00009"),
}


@pytest.mark.parametrize(
    "corpus",
    ["sample", pytest.param("shared", marks=pytest.mark.skipif(not SHARED_TEXTMIX.is_dir(), reason="needs ../shared/data/textmix"))],
)
def test_c4_task_on_the_textmix_corpus(tmp_path, corpus):
    folder, shard = TEXTMIX[corpus]
    args = [
        "run",
        "task=c4_llama_130m",
        f"data.path={folder}/pkgtext-train.{shard}.json.gz",
        f"data.val_path={folder}/pkgtext-validation.*.json.gz",
        "data.tokenizer=embedded",
        "data.mode=pack",
        "data.seq_len=64",
        "data.batch_size=4",
        "data.global_batch_size=8",
        "trainer.max_steps=3",
        "data.max_val_tokens=2000",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"results_dir={tmp_path / 'results'}",
        *TINY_LM,
    ]
    assert main(args) == 0
    (rec,) = records(tmp_path / "results")
    assert rec["status"] == "completed" and rec["dataset"]["num_val_target_tokens"] <= 2000


def test_gradient_accumulation_reaches_the_global_batch():
    assert accumulation_steps(512, 128, 1) == 4
    assert accumulation_steps(512, 64, 4) == 2
    with pytest.raises(ConfigError, match="not a multiple"):
        accumulation_steps(512, 96, 1)


class FakeTrainer(SimpleNamespace):
    def __init__(self, accumulate_grad_batches: int = 1):
        super().__init__(
            global_step=0,
            should_stop=False,
            callback_metrics={},
            accumulate_grad_batches=accumulate_grad_batches,
            strategy=SimpleNamespace(reduce_boolean_decision=lambda flag, all=False: flag),
        )


def feed(monitor, trainer, losses):
    for loss in losses:
        trainer.global_step += 1
        monitor.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, 0)
        if trainer.should_stop:
            return trainer.global_step
    return None


def test_divergence_monitor_catches_nan_and_blowups_but_not_noise():
    monitor, trainer = DivergenceMonitor(blowup_nats=1.0, check_every_n_steps=5, patience=2), FakeTrainer()
    assert feed(monitor, trainer, [9.0 - 0.01 * i + (0.3 if i % 2 else -0.3) for i in range(200)]) is None
    assert feed(monitor, trainer, [float("nan")] * 5) == 205 and "non-finite" in monitor.reason
    monitor, trainer = DivergenceMonitor(blowup_nats=1.0, check_every_n_steps=5, patience=2), FakeTrainer()
    stopped = feed(monitor, trainer, [6.0] * 50 + [7.3] * 50)
    assert stopped == 60 and monitor.diverged_at_step == 60 and "nats above its best" in monitor.reason


def test_divergence_monitor_judges_the_real_loss_under_gradient_accumulation():
    """Lightning hands callbacks loss / accumulate_grad_batches: the monitor must undo that (history and thresholds)."""
    monitor, trainer = DivergenceMonitor(blowup_nats=1.0, check_every_n_steps=5, patience=2), FakeTrainer(accumulate_grad_batches=4)
    stopped = feed(monitor, trainer, [6.0 / 4] * 50 + [7.3 / 4] * 50)
    assert stopped == 60 and monitor.history[0][1] == pytest.approx(6.0)


def test_an_lr_out_of_the_sane_range_is_one_line_and_exit_2_before_any_run_folder(tmp_path, caplog):
    for lr in ("1e9", "10.5", "0", "-1e-3"):
        assert main(["run", "task=llama_lm", f"optim.lr={lr}", "trainer.max_steps=1", *TINY_LM, f"results_dir={tmp_path}"]) == 2
        assert caplog.records[-1].getMessage().startswith("optim.lr must be ")
    assert "(0, 10], got 1e+09" in caplog.records[0].getMessage() and not any(tmp_path.iterdir())


def test_a_diverged_run_is_recorded_and_tabled_as_diverged(tmp_path, capsys, token_cache):
    args = [
        "run",
        "task=llama_lm",
        "norm=post",
        f"optim.lr={MAX_LR}",  # the highest lr accepted
        "optim.warmup_steps=0",
        "trainer.max_steps=30",
        "divergence.check_every_n_steps=2",
        "divergence.patience=1",
        "data.seq_len=32",
        "trainer.limit_val_batches=2",
        f"data.cache_dir={token_cache}",
        f"results_dir={tmp_path}",
        *TINY_LM,
    ]
    assert main(args) == 0
    (rec,) = records(tmp_path)
    assert rec["status"] == "diverged" and rec["divergence"]["step"] is not None and rec["steps"] < 30
    capsys.readouterr()
    main(["table", "--results-dir", str(tmp_path), "--format", "md"])
    assert "diverged" in capsys.readouterr().out


@pytest.mark.slow  # default: test_cluster's two torchrun nodes (ranks = one process, same buckets) and test_images's Lightning-launched DDP
def test_ddp_two_processes_match_one_process_with_the_same_global_batch(tmp_path, token_cache):
    common = [
        "task=llama_lm",
        "norm=mix",
        "data.seq_len=16",
        "data.global_batch_size=4",
        "trainer.max_steps=3",
        "trainer.accelerator=cpu",
        "trainer.limit_val_batches=4",
        "data.eval_batch_size=4",
        "save_weights=false",
        f"data.cache_dir={token_cache}",
        *TINY_LM,
    ]
    assert main(["run", *common, "data.batch_size=4", "trainer.devices=1", f"results_dir={tmp_path / 'one'}"]) == 0
    # the real launch path: Lightning re-runs this command line for rank 1 (gloo on CPU)
    cmd = [
        sys.executable,
        "-m",
        "mixbench.cli",
        "run",
        *common,
        "data.batch_size=2",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        "ddp.bucket_cap_mb=1",
        "ddp.gradient_as_bucket_view=true",  # several buckets, gradients viewing them
        f"results_dir={tmp_path / 'two'}",
    ]
    subprocess.run(cmd, check=True, cwd=REPO_ROOT, capture_output=True, timeout=300)
    (one,), (two,) = records(tmp_path / "one"), records(tmp_path / "two")  # one run folder and record, written by rank 0
    assert one["steps"] == two["steps"] == 3 and two["effective"]["world_size"] == 2 and two["effective"]["global_batch_size"] == 4
    assert two["metrics"]["val/loss"] == pytest.approx(one["metrics"]["val/loss"], rel=1e-4)


def test_reproduce_dry_run_and_proxy_grid(capsys, local_data):
    assert main(["reproduce", "table1", "--dry-run", f"data.path={local_data.text}", "data.tokenizer=embedded"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 16 and lines[0].startswith("mixbench run task=c4_llama_71m norm=post")
    proxy = expand("table1", scale="proxy", seeds=(0, 1))
    assert len(proxy) == 4 * 2 * 2  # 4 placements × 12/24 blocks × 2 seeds
    assert {a for argv in proxy for a in argv if a.startswith("model.num_layers")} == {"model.num_layers=12", "model.num_layers=24"}
    assert len(expand("table5")) == 7 and len(expand("table6")) == 5
    table4 = expand("table4", scale="proxy", seeds=(0, 1, 2))
    assert len(table4) == 2 * 2 * 3 and all("data=cifar10_proxy" in argv for argv in table4)


def test_paper_comparison_table(tmp_path, capsys):
    from mixbench.results.records import SCHEMA, write_record

    rec = {
        "schema": SCHEMA,
        "task": "c4_llama_71m",
        "model": {"name": "llama_71m"},
        "norm": {"label": "mix(α=0.25)"},
        "seed": 0,
        "status": "completed",
        "metrics": {"val/ppl": 33.5},
        "scale": "paper",
        "dataset": {"name": "c4"},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": 33.5},
    }
    write_record(rec, tmp_path / "a" / "record.json")
    assert main(["table", "--results-dir", str(tmp_path), "--paper", "table1"]) == 0
    out = capsys.readouterr().out
    assert "33.50 (n=1) / 33.12 (+0.38)" in out and "not run / 35.18" in out


def test_throughput_window_restarts_after_validation(monkeypatch):
    from mixbench.training import callbacks

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock.now)
    logged = []
    module = SimpleNamespace(log_dict=lambda metrics, **kw: logged.append((trainer.global_step, metrics["perf/items_per_sec"])))
    trainer = SimpleNamespace(global_step=0, world_size=1, strategy=SimpleNamespace(root_device=torch.device("cpu")))
    monitor = callbacks.ThroughputMonitor(lambda batch: 100, flops_per_item=None, every_n_steps=4)
    monitor.on_train_start(trainer, module)

    def steps(first, last):  # one second and 100 items per step
        for step in range(first, last + 1):
            trainer.global_step, clock.now = step, float(step)
            monitor.on_train_batch_end(trainer, module, None, None, 0)

    steps(1, 7)  # window 1 (t0 at step 1) logs at step 4, a multiple of every_n_steps; a new one counts steps 5-7 ...
    monitor.on_validation_start(trainer, module)  # ... when validation interrupts it
    steps(8, 12)  # window 2: t0 at step 8, counts steps 9-12, logs at step 12
    assert logged == [(4, 100.0), (12, 100.0)]


def test_resumed_run_continues_where_it_stopped(tmp_path, token_cache):
    common = [
        "task=llama_lm",
        "norm=mix",
        "data.seq_len=16",
        "data.batch_size=4",
        "trainer.max_steps=6",
        "trainer.limit_val_batches=4",
        "save_weights=false",
        f"data.cache_dir={token_cache}",
        *TINY_LM,
    ]
    assert main(["run", *common, "checkpoint.every_n_steps=3", "checkpoint.keep_last=null", f"results_dir={tmp_path / 'full'}"]) == 0
    (full,) = records(tmp_path / "full")
    (ckpt,) = Path(full["run_dir"]).glob("checkpoints/*step=3.ckpt")
    assert (
        main(
            [
                "run",
                *common,
                f"resume_from={ckpt}",
                "checkpoint.every_n_steps=3",
                "checkpoint.keep_last=null",
                f"results_dir={tmp_path / 'resumed'}",
            ]
        )
        == 0
    )
    (resumed,) = records(tmp_path / "resumed")
    assert resumed["steps"] == 6
    # same weights, optimizer state, schedule *and* data position: the same model at step 6
    assert resumed["metrics"]["val/loss"] == full["metrics"]["val/loss"]  # exactly
    positions = [
        torch.load(next(Path(r["run_dir"]).glob("checkpoints/*step=6.ckpt")), weights_only=False)["TextDataModule"] for r in (full, resumed)
    ]
    assert positions[0] == positions[1] == {"epoch": 0, "consumed": 24, "seed": 0}


def test_reproduce_runs_a_proxy_grid_two_at_a_time(tmp_path):
    """--jobs 2: the table4 proxy grid's Mix-LN runs (both ViTs; the grid's runs are listed in the test above) as two
    concurrent `mixbench run` subprocesses, every record written and counted."""
    from mixbench.results.records import load_records

    tiny = [
        "data.path=embedded",
        "data.num_workers=0",
        "data.batch_size=16",
        "data.eval_batch_size=200",
        "compile=false",
        "model.num_layers=2",
        "model.hidden_size=32",
        "model.num_heads=2",
        "trainer.max_epochs=1",
        "trainer.max_steps=2",
        "trainer.check_val_every_n_epoch=1",
        "trainer.enable_progress_bar=false",
        "trainer.precision=32-true",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        f"results_dir={tmp_path}",
    ]
    assert main(["reproduce", "table4", "--scale", "proxy", "--jobs", "2", "--only", "norm=mix", *tiny]) == 0
    records, problems = load_records(tmp_path)
    assert not problems and len(records) == 2 and {r["status"] for r in records} == {"completed"}
    assert {(r["task"], r["norm"]["label"]) for r in records} == {("in1k_vit_tiny", "mix(α=0.25)"), ("in1k_vit_small", "mix(α=0.25)")}
    assert all(r["scale"] == "proxy" and (Path(r["_path"]).parent / "console.log").is_file() for r in records)


def test_final_validation_is_checked_against_the_last_validation_in_fit():
    from mixbench.training.run import check_final_validation

    record = {"metrics": {"val/top1": 61.75}}
    check_final_validation(record, {"step": 3100, "val/top1": 66.4}, "val/top1", 3100)
    assert "differs" in record["warnings"][0]
    same = {"metrics": {"val/top1": 66.4}}
    check_final_validation(same, {"step": 3100, "val/top1": 66.4}, "val/top1", 3100)
    earlier = {"metrics": {"val/top1": 61.75}}
    check_final_validation(earlier, {"step": 3000, "val/top1": 66.4}, "val/top1", 3100)  # other weights: no check
    assert "warnings" not in same and "warnings" not in earlier


def test_a_run_that_never_learns_is_stalled_whether_or_not_it_stopped_improving(tmp_path, token_cache):
    """A tiny lr keeps the initial model: its loss (≈ ln V) stays above the validation tokens' unigram entropy and the
    training loss does not improve → stalled.  The same run cut after 2 steps never beat chance either: stalled too
    (a run that never beat chance is never completed), its reason saying it was too short to judge its progress."""
    common = [
        "run",
        "task=llama_lm",
        "norm=pre",
        "optim.lr=1e-9",
        "data.seq_len=32",
        "trainer.limit_val_batches=2",
        "divergence.check_every_n_steps=1",
        f"data.cache_dir={token_cache}",
        *TINY_LM,
        "divergence.unigram_floor=true",
    ]
    assert main([*common, "trainer.max_steps=16", f"results_dir={tmp_path / 'long'}"]) == 0
    (rec,) = records(tmp_path / "long")
    assert rec["status"] == "stalled" and "never learned beyond token frequencies" in rec["divergence"]["reason"]
    assert "stopped improving" in rec["divergence"]["reason"]
    assert main([*common, "trainer.max_steps=2", f"results_dir={tmp_path / 'short'}"]) == 0
    (rec,) = records(tmp_path / "short")
    assert rec["status"] == "stalled" and rec["divergence"]["reason"].endswith("too short to judge its progress")
    assert rec["budget"]["max_steps"] == 2 and rec["learning_floor"]["val/loss"] > 0


def test_unigram_entropy_of_the_validation_tokens(tmp_path, token_cache):
    import numpy as np

    from mixbench.training.builders import build_datamodule
    from mixbench.training.config import compose

    dm = build_datamodule(compose(["task=llama_lm", "data.seq_len=32", "data.max_val_tokens=4096", f"data.cache_dir={token_cache}"]))
    dm.setup("fit")
    labels = np.concatenate([dm.val_set[i]["labels"].numpy() for i in range(len(dm.val_set))])
    p = np.bincount(labels[labels >= 0]) / (labels >= 0).sum()
    p = p[p > 0]
    assert abs(dm.unigram_entropy() - float(-(p * np.log(p)).sum())) < 1e-9
    assert 0 < dm.unigram_entropy() < np.log(dm.vocab_size)
