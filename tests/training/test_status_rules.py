"""The status classification at its edges, where mutation testing (bench/mutation) found statuses — the k/n stalled and
diverged of every table — could change without a test noticing: loss_gain's window, the trend's boundary, unfinished
records kept as they are, the floor stored with a record, and `reclassify` going through every record."""

import json

import pytest
from _support.records import lm_run

from mixbench.results.records import write_record
from mixbench.training.status import classify, loss_gain, reclassify, reclassify_records


def test_loss_gain_needs_eight_points_and_compares_the_last_two_quarters():
    assert loss_gain([(i, 5.0) for i in range(7)]) is None and loss_gain([(i, 5.0) for i in range(8)]) == 0.0
    nine = [(i, loss) for i, loss in enumerate([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])]  # quarter = 2
    assert loss_gain(nine) == pytest.approx((4.0 + 3.0) / 2 - (2.0 + 1.0) / 2)  # points 5-6 against 7-8


def test_classify_at_its_boundaries():
    assert classify(None, float("nan"), None, []) == ("diverged", "non-finite final metric")
    exactly = [(i, 2.0) for i in range(4)] + [(4, 1.5), (5, 1.5), (6, 1.0), (7, 1.0)]  # gain exactly 0.5
    status, reason = classify(None, 3.0, "never learned", exactly, min_gain=0.5)
    assert status == "stalled" and reason.endswith("still falling when the budget ended (+0.5000 nats over the last quarter)")


@pytest.mark.parametrize("status, divergence", [("failed", {"reason": "preempted"}), ("interrupted", None), ("pruned", {})])
def test_an_unfinished_record_keeps_its_status_and_reason(status, divergence):
    record = {**lm_run("pre", float("nan"), float("nan"), 1e-3, status=status), "divergence": divergence}
    assert reclassify(record) == (status, (divergence or {}).get("reason"))


def test_the_floor_stored_with_a_record_is_the_one_its_learning_check_uses():
    """A record without a reason to derive a floor from: only its stored learning_floor says it never beat chance."""
    record = {**lm_run("pre", 245.0, 5.5, 1e-3), "learning_floor": {"val/loss": 5.0}, "train_loss_history": []}
    assert reclassify(record)[0] == "stalled"  # 5.5 ≥ 5.0: never beat its floor
    assert reclassify({**record, "learning_floor": {"val/loss": 6.0}})[0] == "completed"


def test_reclassify_goes_through_every_record_and_writes_what_changed(tmp_path):
    flat = [[i, 6.0] for i in range(12)]
    records = {
        "a": {**lm_run("pre", 245.0, 5.5, 1e-3), "learning_floor": {"val/loss": 6.0}},  # completed, stays so
        "b": {**lm_run("pre", 245.0, 5.5, 1e-3, seed=1), "learning_floor": {"val/loss": 5.0}, "divergence": {"step": 7}},
        "c": {**lm_run("pre", 245.0, 5.5, 1e-3, seed=2), "learning_floor": {"val/loss": 5.0}},
    }
    for name, r in records.items():
        write_record({**r, "run_dir": str(tmp_path / name), "train_loss_history": flat}, tmp_path / name / "record.json")
    changes, problems = reclassify_records(tmp_path, dry_run=True)
    assert sorted((path.split("/")[-2], old, new) for path, old, new in changes) == [
        ("b", "completed", "stalled"),
        ("c", "completed", "stalled"),
    ]
    assert not problems and json.loads((tmp_path / "b" / "record.json").read_text())["status"] == "completed"  # dry run
    assert len(reclassify_records(tmp_path)[0]) == 2
    for name in ("b", "c"):
        written = json.loads((tmp_path / name / "record.json").read_text())
        reason = written["divergence"]["reason"]
        assert written["status"] == "stalled" and reason.startswith("never learned beyond token frequencies: final val/loss 5.500")
        assert written["reclassified"] == [{"from": "completed", "to": "stalled", "reason": reason}]
    assert json.loads((tmp_path / "b" / "record.json").read_text())["divergence"]["step"] == 7  # kept beside the reason


def test_the_trend_comes_from_the_runs_metrics_log_where_the_record_has_no_history(tmp_path):
    (tmp_path / "logs").mkdir()
    rows = "".join(f"{step},{6.0 - 0.1 * step}\n" for step in range(12))  # still falling
    (tmp_path / "logs" / "metrics.csv").write_text("step,train/loss\n" + rows)
    record = {**lm_run("pre", 245.0, 5.5, 1e-3), "learning_floor": {"val/loss": 5.0}, "run_dir": str(tmp_path)}
    assert "still falling" in reclassify(record)[1]


def test_reclassify_rewrites_a_record_that_changes_in_either_direction(tmp_path):
    """Stalled → completed drops its divergence entry; completed with a non-finite metric → diverged gets one; a
    record diverged only for a non-finite metric that is finite now is judged again; a log without train/loss judges
    without a trend."""
    stalled = {**lm_run("pre", 245.0, 5.5, 1e-3), "status": "stalled", "learning_floor": {"val/loss": 6.0}, "divergence": {"reason": "x"}}
    nan = {**lm_run("pre", float("nan"), float("nan"), 1e-3, seed=1), "learning_floor": {"val/loss": 6.0}}
    for name, r in (("stalled", stalled), ("nan", nan)):
        write_record({**r, "run_dir": str(tmp_path / name), "train_loss_history": [[0, 6.0]]}, tmp_path / name / "record.json")
    assert len(reclassify_records(tmp_path)[0]) == 2
    now = {name: json.loads((tmp_path / name / "record.json").read_text()) for name in ("stalled", "nan")}
    assert now["stalled"]["status"] == "completed" and "divergence" not in now["stalled"] and "warnings" not in now["stalled"]
    assert now["nan"]["status"] == "diverged" and now["nan"]["divergence"] == {"reason": "non-finite final metric"}
    finite_now = {**stalled, "status": "diverged", "divergence": {"reason": "non-finite final metric"}, "train_loss_history": []}
    assert reclassify(finite_now) == ("completed", None)
    (tmp_path / "log" / "logs").mkdir(parents=True)
    (tmp_path / "log" / "logs" / "metrics.csv").write_text("step,val/loss\n10,5.5\n")
    no_trend = {**lm_run("pre", 245.0, 5.5, 1e-3), "learning_floor": {"val/loss": 5.0}, "run_dir": str(tmp_path / "log")}
    assert reclassify(no_trend)[1].endswith("too short to judge its progress")
