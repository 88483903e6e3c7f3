"""``mixbench reproduce … --dry-run`` plans (mixbench/grids/dry_run.py): the run lines alone on stdout, then on stderr the
total, the GPU time per card from earlier records and the streamed datasets; exit 2 naming the data that is not here."""

import json
import logging
import re
from pathlib import Path

import pytest
from _support.paths import REPO_ROOT

from mixbench.cli.app import main
from mixbench.grids import dry_run
from mixbench.results.records import SCHEMA, write_record
from mixbench.training.config import compose

LLAMA_71M = ["--only", "task=c4_llama_71m", "--only", "norm=pre"]  # 3 runs of the ladder's first rung
VIT_TINY = ["--only", "task=in1k_vit_tiny", "--only", "norm=pre"]


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def test_the_ladder_without_data_lists_its_runs_then_exits_2_naming_what_is_missing(tmp_path, capsys, logs):
    assert main(["reproduce", "ladder", "--dry-run", *LLAMA_71M, f"results_dir={tmp_path}"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all(line.startswith("mixbench run task=c4_llama_71m") for line in out)  # stdout: the plan only
    assert "ladder: 3 run(s) planned" in logs.text
    assert "dataset allenai/c4 (en) would come from the Hugging Face hub, off here" in logs.text and "[3 run(s)]" in logs.text
    logs.clear()
    assert main(["reproduce", "ladder", "--dry-run", *VIT_TINY, f"results_dir={tmp_path}"]) == 2
    assert "set data.path to a CIFAR-10 .npz" in logs.text


def test_a_placeholder_path_from_the_docs_fails_the_dry_run_and_table4_names_data_root(tmp_path, logs):
    placeholder = "/data/c4/en/c4-train.*.json.gz"
    assert main(["reproduce", "ladder", "--dry-run", *LLAMA_71M, f"llama:data.path={placeholder}", f"results_dir={tmp_path}"]) == 2
    assert f"no files match data path {placeholder!r}" in logs.text
    logs.clear()
    assert main(["reproduce", "table4", "--dry-run", f"results_dir={tmp_path}"]) == 2
    assert "set data.root to the dataset folder" in logs.text and "[4 run(s)]" in logs.text


def test_with_its_data_the_ladder_ends_with_the_total_and_an_estimate_from_the_committed_records(
    tmp_path, capsys, logs, local_data, monkeypatch
):
    monkeypatch.chdir(REPO_ROOT)  # results/proxy: the committed records, where the ladder's runs were timed
    argv = ["reproduce", "ladder", "--dry-run", *LLAMA_71M, f"llama:data.path={local_data.text}", f"results_dir={tmp_path}"]
    assert main([*argv, "llama:data.tokenizer=embedded", "llama:model.vocab_size=8192"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert "ladder: 3 run(s) planned" in logs.text
    assert re.search(r"estimated GPU time on NVIDIA H200: \d+\.\d h for 3 of 3 run\(s\)", logs.text)
    assert "0 run(s) have none" in logs.text


def record(folder: Path, card: str, wall: float, steps: int, world: int = 1) -> None:
    """A finished GPU record of task=vit_tiny, as its dry-run key and time need it."""
    cfg = compose(["task=vit_tiny"])
    config = {k: cfg[k] for k in ("task", "scale", "choices", "data", "model", "trainer")}
    config = json.loads(json.dumps({k: dict(v) if hasattr(v, "keys") else v for k, v in config.items()}, default=str))
    write_record(
        {
            "schema": SCHEMA,
            "task": "vit_tiny",
            "model": {"name": "vit_tiny"},
            "norm": {"label": "pre"},
            "seed": 0,
            "status": "completed",
            "metrics": {},
            "primary_metric": {"name": "val/acc", "higher_is_better": True},
            "dataset": {},
            "scale": cfg.scale,
            "config": config,
            "hardware": {"gpus": [card]},
            "wall_time_s": wall,
            "budget": {"total_steps": steps},
            "effective": {"world_size": world},
        },
        folder / f"{card}-{wall}-{world}" / "record.json",
    )


def test_the_estimate_is_each_runs_steps_times_the_median_gpu_seconds_a_step_of_its_records(tmp_path):
    record(tmp_path, "H100", wall=100, steps=50)  # 2 s a step
    record(tmp_path, "H100", wall=100, steps=50, world=2)  # 4 GPU-s a step
    record(tmp_path, "H100", wall=300, steps=50)  # 6 s a step
    record(tmp_path, "H200", wall=50, steps=50)  # 1 s a step
    planned = [compose(["task=vit_tiny", "trainer.max_steps=360", "trainer.max_epochs=null"]), compose(["task=llama_lm"])]
    hours, unknown, used = dry_run.gpu_estimate(planned, [tmp_path])
    assert hours == {"H100": (pytest.approx(4 * 360 / 3600), 1), "H200": (pytest.approx(360 / 3600), 1)}
    assert unknown == 1 and used == 4  # llama_lm has no record


def test_what_comes_from_the_hub_is_named_and_passes_while_the_hub_is_on(tmp_path, logs, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)  # t5-base not cached here
    for variable in dry_run.OFFLINE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert main(["reproduce", "ladder", "--dry-run", *LLAMA_71M, f"results_dir={tmp_path}"]) == 0
    assert "3 run(s) fetch dataset allenai/c4 (en) from the Hugging Face hub" in logs.text
    assert "3 run(s) fetch tokenizer t5-base from the Hugging Face hub" in logs.text


def test_local_shards_with_a_hub_tokenizer_fail_while_the_hub_is_off(tmp_path, logs, local_data, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)
    argv = ["reproduce", "ladder", "--dry-run", *LLAMA_71M, f"llama:data.path={local_data.text}", f"results_dir={tmp_path}"]
    assert main(argv) == 2
    assert "tokenizer t5-base would come from the Hugging Face hub, off here" in logs.records[-1].getMessage()
    assert "dataset" not in logs.records[-1].getMessage()


def test_a_chains_missing_stage_data_fails_its_dry_run_and_placeholders_do_not(tmp_path, logs, local_data):
    args = ["reproduce", "table3", "--scale", "proxy", "--dry-run", "--only", "norm=mix", f"pretrain:data.path={local_data.text}"]
    assert main([*args, f"results_dir={tmp_path}"]) == 2  # sft, rm and rl without data
    assert "set data.path" in logs.text and "<" not in logs.records[-1].getMessage()  # <rm run> is a later run, not missing
