"""``final_validation``: ``always`` validates again after fit; ``reuse_fit`` takes fit's last validation where it was at
the final step (the same weights), and validates again where it was not."""

import json

import pytest
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.training.config import check_ranges
from mixbench.training.run import reusable_fit_validation

TINY = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "trainer.max_steps=4",
    "trainer.limit_val_batches=2",
    "data.seq_len=32",
    "data.num_workers=0",
    "compile=false",
    "trainer.precision=32-true",
    "save_weights=false",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # 4 steps cannot learn: the record's metrics are what this test is about
]


def run_record(tmp_path, name, *extra) -> dict:
    results = tmp_path / name
    assert main(["run", *TINY, f"results_dir={results}", *extra]) == 0
    (path,) = results.rglob("record.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("final_validation")
    return {
        setting: run_record(tmp, setting, "trainer.val_check_interval=2", f"final_validation={setting}")
        for setting in ("always", "reuse_fit")
    }


def test_reuse_fit_takes_the_last_validation_of_fit_and_equals_a_final_validate(both):
    always, reused = both["always"], both["reuse_fit"]
    assert reused["final_validation"] == {"reused_fit_validation_at_step": 4} and "final_validation" not in always
    assert [v["step"] for v in reused["validations"]] == [2, 4]
    assert reused["metrics"] == reused["validations"][-1]["metrics"]
    assert set(reused["metrics"]) == set(always["metrics"]) == {"val/loss", "val/ppl"}
    for key, value in always["metrics"].items():  # the same seed and weights: the final validate gives what fit's gave
        assert reused["metrics"][key] == pytest.approx(value, rel=1e-6)
    assert reused["time_parts"]["final_validation_s"] < always["time_parts"]["final_validation_s"]
    assert reused["status"] == always["status"] == "completed"


def test_reuse_fit_validates_again_where_fit_did_not_end_on_a_validation(tmp_path):
    record = run_record(tmp_path, "odd", "trainer.val_check_interval=3", "final_validation=reuse_fit")
    assert [v["step"] for v in record["validations"]] == [3]
    assert "final_validation" not in record and record["metrics"]["val/loss"] != record["validations"][-1]["metrics"]["val/loss"]


@pytest.mark.parametrize(
    "setting, validations, step, expected",
    [
        ("reuse_fit", [{"step": 2, "metrics": {"val/loss": 1.0}}], 2, {"val/loss": 1.0}),
        ("reuse_fit", [{"step": 2, "metrics": {"val/loss": 1.0}}], 3, None),
        ("reuse_fit", [], 3, None),
        ("always", [{"step": 2, "metrics": {"val/loss": 1.0}}], 2, None),
    ],
)
def test_which_validation_is_reused(setting, validations, step, expected):
    cfg = OmegaConf.create({"final_validation": setting})
    assert reusable_fit_validation(cfg, validations, step) == expected


def test_an_unknown_setting_names_the_valid_ones():
    cfg = OmegaConf.create({"logger": "csv", "resume": None, "final_validation": "sometimes"})
    with pytest.raises(ConfigError, match="final_validation must be one of always, reuse_fit, got 'sometimes'"):
        check_ranges(cfg)


def test_how_a_run_compiles_and_validates_does_not_tell_runs_apart(both):
    """A grid planned with ``compile.scope=blocks final_validation=reuse_fit`` counts the runs made before with the
    whole model compiled and a second validation: the same training (their resume and planning match them)."""
    from mixbench.training.config import compose
    from mixbench.training.run import run_defaults, same_run_settings

    theirs = both["always"]["config"]
    cfg = compose([*TINY, "trainer.val_check_interval=2", "compile.scope=blocks", "final_validation=reuse_fit"])
    cfg.results_dir = theirs["results_dir"]
    assert same_run_settings(theirs, cfg, run_defaults(cfg))
    cfg.optim.lr = cfg.optim.lr * 2  # a setting that changes what is computed still does
    assert not same_run_settings(theirs, cfg, run_defaults(cfg))
