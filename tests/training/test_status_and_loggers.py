"""Statuses that mean what they say, re-classifying old records, experiment loggers and training curves."""

import json
import logging

import pytest
from _support.runs import LM_FOUR_STEPS

from mixbench.cli.app import main
from mixbench.results.records import write_record
from mixbench.training.status import classify, loss_gain

TINY_LM = [
    *LM_FOUR_STEPS,
    "trainer.log_every_n_steps=1",
]
FLAT = [(i, 5.0) for i in range(12)]
FALLING = [(i, 5.0 - 0.1 * i) for i in range(12)]


def test_classify():
    assert classify("loss blew up", 3.0, None, FALLING) == ("diverged", "loss blew up")
    assert classify(None, float("nan"), None, FALLING)[0] == "diverged"
    assert classify(None, 3.0, None, FLAT) == ("completed", None)
    assert classify(None, 3.0, "never learned", FLAT)[0] == "stalled"
    status, reason = classify(None, 3.0, "never learned", FALLING)  # never beat chance: stalled, never completed
    assert status == "stalled" and reason.startswith("never learned; ") and "still falling" in reason
    assert "stopped improving" in classify(None, 3.0, "never learned", FLAT)[1]
    assert classify(None, 3.0, "never learned", FLAT[:5])[1].endswith("too short to judge its progress")
    assert loss_gain(FALLING) == pytest.approx(0.3) and loss_gain(FLAT[:7]) is None


def test_reclassify_turns_old_never_learned_records_into_stalled_and_leaves_a_corrupt_one_untouched(tmp_path, caplog):
    base = {
        "schema": "mixbench.result/1",
        "task": "llama_lm",
        "model": {"name": "llama_tiny"},
        "seed": 0,
        "scale": "embedded",
        "dataset": {"name": "text"},
        "norm": {"label": "pre"},
        "metrics": {"val/ppl": 300.0},
        "primary_metric": {"name": "val/ppl", "higher_is_better": False, "value": 300.0},
        "status": "diverged",
        "divergence": {"step": None, "reason": "never learned beyond token frequencies: final val/loss 5.7 ≥ unigram entropy 5.6"},
    }
    for name, history in (("flat", FLAT), ("falling", FALLING)):
        write_record({**base, "run_dir": str(tmp_path / name), "train_loss_history": history}, tmp_path / name / "record.json")
    write_record(
        {**base, "run_dir": str(tmp_path / "nan"), "divergence": {"reason": "non-finite training loss (nan)"}},
        tmp_path / "nan" / "record.json",
    )
    corrupt = tmp_path / "corrupt" / "record.json"  # cut short: named, skipped and left as it is
    corrupt.parent.mkdir()
    corrupt.write_text(json.dumps({**base, "run_dir": str(corrupt.parent)})[:150])
    assert main(["reclassify", "--results-dir", str(tmp_path), "--dry-run"]) == 0
    assert json.loads((tmp_path / "flat" / "record.json").read_text())["status"] == "diverged"  # dry run wrote nothing
    caplog.clear()
    before = corrupt.read_bytes()
    assert main(["reclassify", "--results-dir", str(tmp_path)]) == 0
    assert corrupt.read_bytes() == before
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"left unreadable record untouched: {corrupt}: not readable JSON") and "\n" not in warning
    status = {name: json.loads((tmp_path / name / "record.json").read_text())["status"] for name in ("flat", "falling", "nan")}
    assert status == {"flat": "stalled", "falling": "stalled", "nan": "diverged"}
    falling = json.loads((tmp_path / "falling" / "record.json").read_text())
    assert falling["reclassified"][0]["from"] == "diverged" and "still falling" in falling["divergence"]["reason"]


VIT_RECORD = {
    "schema": "mixbench.result/1",
    "task": "in1k_vit_tiny",
    "family": "vision",
    "seed": 7,
    "scale": "proxy",
    "model": {"name": "vit_tiny", "options": {"num_classes": 10}},
    "dataset": {"name": "cifar10"},
    "norm": {"label": "sandwich"},
    "primary_metric": {"name": "val/top1", "higher_is_better": True},
    "status": "completed",
    "train_loss_history": FLAT,
}


@pytest.mark.parametrize(
    "metrics, stalled",
    [
        ({"val/top1": 18.90, "val/loss": 2.3005}, True),  # the collapsed grid runs of issue #19: loss at ln 10, top-1 above chance
        ({"val/top1": 10.60, "val/loss": 2.10}, True),  # top-1 within a point of chance
        ({"val/top1": 35.10, "val/loss": 1.805}, False),  # DyT: learned, if slowly
        ({"val/top1": 49.60, "val/loss": 1.456}, False),
    ],
)
@pytest.mark.parametrize(
    "model",
    [
        VIT_RECORD["model"],
        # num_classes taken from the data (the option is null): the class count is in the model's label (issue #33)
        {
            "name": "vit_tiny",
            "options": {"num_classes": None},
            "label": "vit_tiny[drop_path_rate=0.1,img_size=32,num_classes=10,patch_size=4]",
        },
    ],
    ids=["option", "label"],
)
def test_reclassify_lists_vit_runs_that_ended_at_chance_as_stalled(tmp_path, capsys, metrics, stalled, model):
    write_record({**VIT_RECORD, "model": model, "metrics": metrics, "run_dir": str(tmp_path / "r")}, tmp_path / "r" / "record.json")
    assert main(["reclassify", "--results-dir", str(tmp_path), "--dry-run"]) == 0
    assert ("completed -> stalled" in capsys.readouterr().out) == stalled
    assert json.loads((tmp_path / "r" / "record.json").read_text())["status"] == "completed"  # a dry run writes nothing


def test_tensorboard_logger_next_to_csv_and_curves_figure(tmp_path):
    pytest.importorskip("tensorboard")
    for norm in ("pre", "mix"):
        assert main(["run", *TINY_LM, f"norm={norm}", "logger=csv,tensorboard", f"results_dir={tmp_path}"]) == 0
    runs = sorted(p.parent for p in tmp_path.rglob("record.json"))
    for run in runs:
        assert (run / "logs" / "metrics.csv").is_file() and list((run / "tensorboard").glob("events.out.tfevents.*"))
        record = json.loads((run / "record.json").read_text())  # validations inside fit, at their budget fractions
        assert [(v["step"], v["fraction"]) for v in record["validations"]] == [(2, 0.5), (4, 1.0)]
        assert record["validations"][-1]["metrics"]["val/loss"] == pytest.approx(record["metrics"]["val/loss"], rel=1e-4)
    assert main(["table", "--results-dir", str(tmp_path), "--at", "0.5,1.0", "--format", "csv"]) == 0
    out = tmp_path / "curves.png"
    assert main(["plot", "curves", "--compare", *map(str, runs), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_unknown_or_missing_logger_is_a_clear_error(tmp_path, caplog, monkeypatch):
    assert main(["run", *TINY_LM, "logger=csv,tensorbored", "--print-config"]) == 2
    assert "unknown logger(s) ['tensorbored']" in caplog.text
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    assert main(["run", *TINY_LM, "logger=mlflow", f"results_dir={tmp_path}"]) == 2
    assert "pip install mlflow" in caplog.text


def test_a_vit_run_that_never_beat_chance_is_recorded_stalled(tmp_path):
    from _support.runs import TINY_VIT

    args = [a for a in TINY_VIT if not a.startswith("divergence.")]  # the learning check on, as by default
    assert main(["run", "task=vit_tiny", "optim.lr=1e-12", "save_weights=false", f"results_dir={tmp_path}", *args]) == 0
    (path,) = tmp_path.rglob("record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "stalled" and record["divergence"]["reason"].startswith("never beat chance")
    assert record["learning_floor"] == pytest.approx({"val/loss": 2.302585, "val/top1": 10.0})
