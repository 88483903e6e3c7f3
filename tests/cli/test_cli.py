"""End to end: ``mixbench run`` with a tiny budget on the embedded data, then ``mixbench table``."""

import shutil
from pathlib import Path

import pytest
from _support.runs import TINY_VIT, records

from mixbench.cli.app import main


def test_vit_run_then_table(tiny_vit_results, capsys):
    """Pre-LN and Mix-LN (α=0.5) for 3 steps each (the session's ``tiny_vit_results``, _support/shared_runs.py: read only)."""
    recs = records(tiny_vit_results)
    assert [r["status"] for r in recs] == ["completed", "completed"]
    mix = next(r for r in recs if r["norm"]["placement"] == "mix")
    assert mix["norm"]["plan"] == ["post", "pre"]
    assert mix["dataset"]["name"] == "cifar10_embedded" and "CIFAR-10" in mix["dataset"]["label"]
    assert 0.0 <= mix["metrics"]["val/top1"] <= 100.0 and mix["steps"] == 3
    for key in ("config", "versions", "git", "hardware", "wall_time_s", "seed"):
        assert key in mix
    assert mix["versions"]["torch"] and mix["config"]["norm"]["alpha"] == 0.5
    run_dir = Path(mix["run_dir"])
    assert (run_dir / "config.yaml").is_file() and (run_dir / "model.safetensors").is_file() and (run_dir / "model_config.json").is_file()
    capsys.readouterr()
    assert main(["table", "--results-dir", str(tiny_vit_results), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "mix(α=0.5)" in out and "| pre |" in out and "cifar10_embedded" in out


def test_llama_run_records_perplexity(tmp_path):
    args = [
        "run",
        "task=llama_lm",
        "model=llama_debug",
        "model.vocab_size=8192",
        "norm=mix",
        "trainer.max_steps=2",
        "trainer.val_check_interval=null",
        "trainer.limit_val_batches=2",
        "data.seq_len=32",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        f"results_dir={tmp_path}",
    ]  # 2 steps learn nothing: not the point here
    assert main(args) == 0
    (rec,) = records(tmp_path)
    assert rec["status"] == "completed" and rec["norm"]["plan"] == ["post", "pre", "pre", "pre"]
    assert rec["metrics"]["val/ppl"] == pytest.approx(2.718281828 ** rec["metrics"]["val/loss"], rel=1e-4)
    assert rec["primary_metric"] == {"name": "val/ppl", "higher_is_better": False, "value": rec["metrics"]["val/ppl"]}
    assert rec["time_parts"]["before_run_s"] > 0  # the command line's run says how long its process took to reach it


def test_vocab_mismatch_fails_with_the_fix(tmp_path, caplog):
    assert main(["run", "task=llama_lm", "model=llama_debug", f"results_dir={tmp_path}"]) == 2
    assert "set model.vocab_size=8192" in caplog.text
    (rec,) = records(tmp_path)
    assert rec["status"] == "failed" and "vocab_size" in rec["error"]


def test_bad_input_never_touches_earlier_results(tmp_path, caplog, tiny_vit_results):
    shutil.copytree(tiny_vit_results, tmp_path, dirs_exist_ok=True)  # two finished runs (_support/shared_runs.py)
    assert len(records(tmp_path)) == 2
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".yaml")}
    assert main(["run", "task=vit_tiny", "norm=mix", "norm.alpha=2", f"results_dir={tmp_path}"]) == 2
    assert "norm.alpha must be in [0, 1]" in caplog.text
    assert main(["run", "task=vit_tiny", "data.loader=nope", f"results_dir={tmp_path}", *TINY_VIT]) == 2
    assert "unknown data loader 'nope'" in caplog.text
    after = {p: p.read_bytes() for p in before}
    assert after == before


def test_print_config_and_list(capsys, monkeypatch):
    assert main(["run", "task=vit_small", "norm=mix", "--print-config"]) == 0
    assert "placement: mix" in capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "vit_small" in out and "llama_1b" in out and "deepnorm" in out
    assert max(map(len, out.splitlines())) <= 80 and "…" not in out  # 80 columns, no name cut
    assert " sft_commonsense " in out and " cifar10_embedded " in out and " val/final_reward ↑" in out


def test_search_without_optuna_is_one_clear_error(tmp_path, caplog, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    assert main(["search", "--study", "s", "--results-dir", str(tmp_path), "task=llama_lm", "model=llama_debug"]) == 2
    assert 'pip install -e ".[search]"' in caplog.text and not (tmp_path / "search").exists()


def test_admin_run_profiles_its_init_on_a_real_batch(tmp_path):
    """norm=admin: Admin's profiling pass runs before training and its ω per sub-layer is in the record."""
    assert main(["run", "task=vit_tiny", "norm=admin", "save_weights=false", f"results_dir={tmp_path}", *TINY_VIT]) == 0
    (rec,) = records(tmp_path)
    omegas = rec["norm"]["admin_omegas"]
    assert len(omegas) == 4 and omegas[0] == 1.0 and all(w > 0 for w in omegas)
    assert omegas[1:] != pytest.approx([2**0.5, 3**0.5, 2.0], rel=0.05)  # not the fixed schedule
    assert rec["norm"]["label"] == "admin" and rec["config"]["norm"]["admin_init"] == "profile"


@pytest.mark.parametrize(
    "options, meant",
    [
        (["--max-steps", "20"], "trainer.max_steps=20"),
        (["--lr=3e-3"], "optim.lr=3e-3"),
        (["--num-layers", "2"], "model.num_layers=2"),  # a key of the composed config (the model's), not of defaults.yaml
        (["--task", "vit_tiny"], "task=vit_tiny"),
    ],
)
def test_an_option_that_names_a_setting_suggests_key_value(options, meant, tmp_path, caplog):
    assert main(["run", "task=vit_tiny", *options, f"results_dir={tmp_path}"]) == 2
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"did you mean {meant}?" in line and "\n" not in line
    assert not any(tmp_path.iterdir())


def test_an_option_that_names_no_setting_is_argparse_s_error(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "task=vit_tiny", "--frobnicate", "3"])
    assert stop.value.code == 2 and "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_the_program_ignores_a_late_ctrl_c_once_a_command_was_interrupted(monkeypatch):
    """``mixbench`` (``entry``) exits with ``main``'s status; after an interrupted command (130) a Ctrl-C that lands
    while the process exits is ignored (no traceback from the finalizers), and only then."""
    import signal

    from mixbench.cli import app

    before = signal.getsignal(signal.SIGINT)
    try:
        for status, handler in ((0, before), (130, signal.SIG_IGN)):
            monkeypatch.setattr(app, "main", lambda status=status: status)
            with pytest.raises(SystemExit) as stop:
                app.entry()
            assert stop.value.code == status and signal.getsignal(signal.SIGINT) == handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_run_prints_nothing_on_stdout_its_bar_has_the_run_eta_and_no_lightning_deprecation(tmp_path, capsys, caplog):
    """stdout carries only data: Lightning's progress bar and model summary go to stderr (the summary through the log,
    without its FLOPs column, which counts 0); Lightning's LeafSpec deprecation notice is not shown."""
    import logging
    import warnings

    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["run", "task=vit_tiny", f"results_dir={tmp_path}", *TINY_VIT, "trainer.enable_progress_bar=true"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "Epoch 0" in err and "run ETA=" in err
    summary = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("model summary:"))
    assert "VisionTransformer" in summary and "FLOPs" not in summary and "FLOPs" not in err
    assert not [w for w in caught if "LeafSpec" in str(w.message)]
