"""``profiler.kind``: a run writes Lightning's profiler report into its folder; bad settings get one error naming the fix."""

import json

import pytest
from _support.runs import TINY_VIT

from mixbench.cli import main
from mixbench.core.errors import ConfigError
from mixbench.results.records import load_records
from mixbench.training.config import compose
from mixbench.training.profiling import check_profiler, make_profiler

TINY = [*TINY_VIT, "save_weights=false", "trainer.max_steps=5"]


def run_folder(results_dir):
    record = min(results_dir.rglob("record.json"))  # the first run's folder (its name starts seed0-)
    assert json.loads(record.read_text())["status"] == "completed"  # the learning check is off (TINY_VIT): never stalled
    return record.parent


def test_simple_profiler_reports_each_lightning_action_per_step(tmp_path):
    assert main(["run", "task=vit_tiny", "profiler.kind=simple", f"results_dir={tmp_path}", *TINY]) == 0
    report = (run_folder(tmp_path) / "fit-profile.txt").read_text()
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("|  ")}
    assert "run_training_batch" in rows and "[_TrainingEpochLoop].train_dataloader_next" in rows
    assert rows["run_training_batch"].split("|")[3].strip() == "5"  # one call a training step
    # profiling is not part of what a run is: beside an unprofiled seed it shares its table column
    assert main(["run", "task=vit_tiny", "seed=1", f"results_dir={tmp_path}", *TINY]) == 0
    records, _ = load_records(tmp_path)
    assert len(records) == 2 and {r["_recipe"] for r in records} == {""}


def test_pytorch_profiler_records_the_chosen_steps_only(tmp_path):
    args = ["profiler.kind=pytorch", "profiler.skip_steps=1", "profiler.active_steps=2"]
    assert main(["run", "task=vit_tiny", *args, f"results_dir={tmp_path}", *TINY]) == 0
    report = (run_folder(tmp_path) / "fit-profile.txt").read_text()
    step_rows = [line for line in report.splitlines() if line.strip().startswith("ProfilerStep*")]
    assert len(step_rows) == 2 and step_rows[0].split()[-1] == "2"  # 2 active steps after 1 skipped + 1 warm-up, in each table
    assert "aten::" in report
    host_table = report.split("records by self host time")[1]  # the second table: self host time, largest first
    self_cpu = [row.split()[2] for row in host_table.splitlines() if row.strip().startswith("aten::")]
    assert len(self_cpu) > 3 and self_cpu == sorted(self_cpu, key=_microseconds, reverse=True)
    assert not (run_folder(tmp_path) / "validate-profile.txt").exists()  # the evaluation after fit is not profiled


def test_pytorch_profiler_trace_is_a_timeline_of_the_recorded_steps(tmp_path):
    args = ["profiler.kind=pytorch", "profiler.skip_steps=1", "profiler.active_steps=2", "profiler.trace=true"]
    assert main(["run", "task=vit_tiny", *args, f"results_dir={tmp_path}", *TINY]) == 0
    (trace,) = run_folder(tmp_path).glob("fit-profile*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]  # the 2 recorded steps, after 1 skipped and 1 warm-up
    assert any(e.get("name", "").startswith("aten::") and e.get("dur", 0) > 0 for e in events)


def _microseconds(cell: str) -> float:
    """A torch.profiler table time cell ('12.3ms', '456.000us', '1.2s') in µs."""
    for unit, scale in (("us", 1), ("ms", 1e3), ("s", 1e6)):
        if cell.endswith(unit):
            return float(cell[: -len(unit)]) * scale
    raise ValueError(cell)


def test_no_profiler_by_default_and_no_report(tmp_path):
    assert make_profiler(compose(["task=vit_tiny"]).profiler, tmp_path, on_gpu=False) is None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("profiler.kind=advanced", "not one of simple, pytorch"),
        ("profiler.active_steps=0", "active_steps >= 1"),
        ("trainer.num_nodes=2", "profile a one-node run"),
        ("profiler.kind=simple profiler.trace=true", "set profiler.kind=pytorch"),
    ],
)
def test_bad_profiler_settings_name_the_fix(setting, message):
    cfg = compose(["task=vit_tiny", "profiler.kind=pytorch", *setting.split()])
    with pytest.raises(ConfigError, match=message):
        check_profiler(cfg.profiler, int(cfg.trainer.num_nodes))


def test_a_bad_profiler_setting_stops_the_run_before_it_writes_anything(tmp_path, caplog):
    assert main(["run", "task=vit_tiny", "profiler.kind=nsys", f"results_dir={tmp_path}", *TINY]) != 0
    assert "profiler.kind='nsys' is not one of simple, pytorch" in caplog.text
    assert not list(tmp_path.rglob("*"))
