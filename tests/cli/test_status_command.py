"""``mixbench status``: the state of every run under a results folder, read from files written as the runs write them
(the project's own writers: its record, config, run lock, checkpoint IO and CSV logger), while they change."""

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core import run_files
from mixbench.core.storage import atomic_write_text
from mixbench.grids.sweep_args import expand_sweep
from mixbench.results.progress import STATES, folder_progress, locked_files, read_metrics_log, run_progress, steps_per_epoch
from mixbench.results.records import write_record

BUDGET = 100


@pytest.fixture(scope="module")
def cfg():
    from mixbench.training.config import compose

    return compose(["task=llama_lm", "model=llama_tiny", f"trainer.max_steps={BUDGET}"])


def make_run(root: Path, name: str, cfg, status: str | None = None, ckpt_steps=(), log_steps=(), stop=None, **fields) -> Path:
    """A run folder as ``mixbench run`` leaves it: ``config.yaml``, the CSV log, step checkpoints and, with ``status``,
    a record (``stop``: the Preempted / Interrupted it stopped with)."""
    from mixbench.training.checkpointing import AtomicCheckpointIO
    from mixbench.training.config import norm_spec
    from mixbench.training.preemption import preemption_note
    from mixbench.training.run import new_record, save_record

    run_dir = root / "llama_lm" / "llama_tiny" / "pre" / name
    run_dir.mkdir(parents=True)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    for step in ckpt_steps:
        AtomicCheckpointIO().save_checkpoint({"global_step": step}, run_dir / "checkpoints" / f"epoch=0-step={step}.ckpt")
    write_log(run_dir, log_steps)
    if status is not None:
        from mixbench.core.tasks import get_task

        record = new_record(cfg, norm_spec(cfg), get_task(cfg.task.name), run_dir, datetime.now(timezone.utc))
        record.update(status=status, **fields)
        if stop is not None:
            record.update(error=f"{type(stop).__name__}: {stop}", **preemption_note(stop))
        save_record(record, run_dir)
    return run_dir


def write_log(run_dir: Path, steps, epoch=lambda step: 0) -> None:
    """``logs/metrics.csv`` with a training loss at each of ``steps``, written by the run's CSV logger."""
    from lightning.pytorch.loggers import CSVLogger

    if steps:
        logger = CSVLogger(save_dir=str(run_dir), name="", version="logs")
        for step in steps:
            logger.log_metrics({"train/loss": 5.0, "epoch": epoch(step)}, step=step)
        logger.save()


def finished_fields(value: float) -> dict:
    return {
        "metrics": {"val/ppl": value, "val/loss": 3.4},
        "steps": BUDGET,
        "budget": {"max_steps": BUDGET, "steps": BUDGET, "total_steps": BUDGET, "epochs": 1, "stopped_early": False},
    }


@pytest.fixture(scope="module")
def grid(tmp_path_factory, cfg):
    """One run in every state but running (kept apart: its lock is held per test)."""
    from mixbench.training.preemption import Interrupted, Preempted

    root = tmp_path_factory.mktemp("status") / "runs"
    make_run(root, "finished", cfg, "completed", **finished_fields(30.0))
    make_run(
        root, "diverged", cfg, "diverged", divergence={"step": 40, "reason": "loss is nan at step 40"}, **finished_fields(float("nan"))
    )
    stalled = {"step": None, "reason": "never learned beyond token frequencies: final val/loss 9.0 ≥ unigram entropy 6.6"}
    make_run(root, "stalled", cfg, "stalled", divergence=stalled, **finished_fields(8000.0))
    make_run(root, "failed", cfg, "failed", error="RuntimeError: CUDA error: an illegal memory access was encountered")
    make_run(root, "stopped", cfg, "failed", ckpt_steps=(60,), stop=Preempted("SIGTERM", 60, Path("x.ckpt"), False))
    make_run(root, "interrupted", cfg, "interrupted", ckpt_steps=(30,), stop=Interrupted("SIGINT", 30, Path("y.ckpt"), False))
    killed = make_run(root, "killed", cfg, ckpt_steps=(10, 20), log_steps=(9, 19))
    take_lock_and_die(killed)
    return root


def take_lock_and_die(run_dir: Path) -> None:
    """A child process takes ``run_dir``'s lock and dies without releasing it (as ``kill -9`` leaves a run): its holder
    file stays, naming a pid that no longer lives."""
    code = "import os, sys; from mixbench.training.run_lock import RunLock; RunLock(sys.argv[1]).__enter__(); os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code, str(run_dir)]).returncode == 9
    assert (run_dir / run_files.HOLDER_FILE).is_file()


def by_name(progress) -> dict:
    return {run.run_dir.name: run for run in progress.runs}


def test_every_state_from_the_files_the_runs_write(grid):
    runs = by_name(folder_progress(grid))
    assert {name: run.state for name, run in runs.items()} == {
        "finished": "finished",
        "diverged": "diverged",
        "stalled": "stalled",
        "failed": "failed",
        "stopped": "stopped",
        "interrupted": "interrupted",
        "killed": "stopped",  # its lock's process is gone: not running
    }
    assert run_progress(grid / "llama_lm" / "llama_tiny" / "pre" / "killed", None).state == "stopped"  # its holder's pid: dead
    assert (runs["finished"].step, runs["finished"].total) == (BUDGET, BUDGET)
    assert (runs["stopped"].step, runs["stopped"].total) == (60, BUDGET)
    assert "preempted by SIGTERM at step 60" in runs["stopped"].note
    assert (runs["interrupted"].step, runs["interrupted"].note) == (30, "Ctrl-C at step 30; resume=auto continues it")
    assert runs["killed"].step == 20 and "no record" in runs["killed"].note and "step 20" in runs["killed"].note
    assert "illegal memory access" in runs["failed"].note
    assert runs["stalled"].note.startswith("never learned")


def test_a_live_lock_is_a_running_run_with_its_rate_and_eta(grid, cfg, tmp_path):
    from mixbench.training.run_lock import RunLock

    run_dir = make_run(tmp_path, "running", cfg, ckpt_steps=(20, 40), log_steps=(9, 19, 29, 39, 49, 59))
    with RunLock(run_dir):
        since = datetime.fromisoformat(json.loads((run_dir / run_files.HOLDER_FILE).read_text())["since"]).timestamp()
        checkpoints = run_dir / "checkpoints"
        os.utime(checkpoints / "epoch=0-step=20.ckpt", (since - 50, since - 50))  # the attempt before: where this one began
        os.utime(checkpoints / "epoch=0-step=40.ckpt", (since + 10, since + 10))
        os.utime(run_dir / run_files.METRICS_FILE, (since + 30, since + 30))  # step 59 logged 20 s after step 40
        run = run_progress(run_dir, locked_files(), now=since + 35)  # this host's lock table shows the lock
        assert (run.state, run.step, run.total) == ("running", 59, BUDGET)
        assert run.rate == pytest.approx((59 - 40) / 20)
        assert run.eta_s == pytest.approx((BUDGET - 59) / run.rate - 5)
        assert run_progress(run_dir, None, now=since + 35).state == "running"  # without a lock table: the holder's pid
    assert run_progress(run_dir).state == "stopped"  # released


def test_the_cli_prints_each_state_and_the_totals_and_writes_nothing(grid, cfg, capsys, monkeypatch):
    from mixbench.training.run_lock import RunLock

    monkeypatch.setenv("COLUMNS", "250")
    running = make_run(grid.parent / "more", "running", cfg)
    with RunLock(running):
        write_log(running, (9, 19))  # logged by this attempt
        before = snapshot(grid.parent)
        assert main(["status", str(grid.parent)]) == 0
        assert snapshot(grid.parent) == before
    out = capsys.readouterr().out
    heading = out.splitlines()[0]
    assert "8 runs: 1 running · 2 stopped · 1 interrupted · 1 failed · 1 diverged · 1 stalled · 1 finished" in heading
    assert f"running: {BUDGET - 19} steps left" in heading
    for state in ("running", "stopped", "interrupted", "failed", "diverged", "stalled", "finished"):
        assert f" {state} " in out
    assert f"19/{BUDGET}" in out


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with its size and time (what status must leave as it was)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_attempt_that_left_no_record_is_stopped(tmp_path, cfg):
    from mixbench.training.preemption import Preempted

    run_dir = make_run(tmp_path, "again", cfg, "failed", ckpt_steps=(60,), stop=Preempted("SIGTERM", 60, Path("x.ckpt"), False))
    assert run_progress(run_dir).note.startswith("preempted by SIGTERM at step 60")
    later = (run_dir / "record.json").stat().st_mtime + 30
    os.utime(run_dir / "config.yaml", (later, later))  # resume=auto began again, then was killed before any record
    run = run_progress(run_dir)
    assert run.state == "stopped" and run.note.startswith("its last attempt left no record")
    finished = make_run(tmp_path, "done", cfg, "completed", **finished_fields(30.0))
    os.utime(finished / "config.yaml", (later, later))  # e.g. a checkout that wrote the files in another order
    assert run_progress(finished).state == "finished"


def test_a_remote_holder_counts_while_its_files_change(tmp_path, cfg):
    run_dir = make_run(tmp_path, "remote", cfg, log_steps=(9,))
    holder = {"host": "node17-" + socket.gethostname(), "pid": 1, "since": "2026-01-01T00:00:00+00:00"}
    (run_dir / run_files.HOLDER_FILE).write_text(json.dumps(holder) + "\n")  # as RunLock writes it, on node17
    (run_dir / run_files.LOCK_FILE).touch()
    run = run_progress(run_dir)
    assert (run.state, run.note) == ("running", f"on {holder['host']}")
    assert run_progress(run_dir, now=time.time() + 2 * 3600).state == "stopped"


def test_a_grid_run_before_it_takes_its_lock_is_starting(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / run_files.CONSOLE_FILE).write_text("")  # grids/runner.py, --jobs N: the folder and its log come first
    assert run_progress(run_dir).state == "starting"
    later = run_progress(run_dir, now=time.time() + 600)
    assert later.state == "stopped" and "never took the lock" in later.note


def test_an_epoch_budget_in_steps_from_the_logged_epochs(tmp_path, cfg):
    run_dir = make_run(tmp_path, "epochs", OmegaConf.merge(cfg, {"trainer": {"max_steps": -1, "max_epochs": 4}}))
    write_log(run_dir, range(9, 150, 10), epoch=lambda step: step // 50)  # 50 steps an epoch, logged every 10
    log = read_metrics_log(run_dir)
    assert log.epochs == {0: (9, 49), 1: (59, 99), 2: (109, 149)}
    per_epoch, exact = steps_per_epoch(log.epochs)
    assert 50 <= per_epoch <= 54 and not exact
    run = run_progress(run_dir)
    assert (run.total, run.exact_total) == (per_epoch * 4, False)
    assert steps_per_epoch({0: (9, 29)}) is None  # still in the first epoch: unknown
    assert steps_per_epoch({0: (9, 29), 1: (30, 30)}) == (30, True)  # the final validation's row pins it


def test_a_line_being_appended_is_not_read(tmp_path):
    run_dir = tmp_path / "r"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / run_files.METRICS_FILE).write_text("epoch,step,train/loss\n0,9,5.0\n0,19,4.9\n0,2")  # "0,29,..." mid-write
    assert read_metrics_log(run_dir).step == 19
    (run_dir / run_files.METRICS_FILE).write_text("epoch,step\n0,9\n0,19\n1,2")  # "1,29" mid-write: a whole row's width
    assert read_metrics_log(run_dir).epochs == {0: (9, 19)}
    (run_dir / run_files.METRICS_FILE).write_text("epoch,step,train/l")  # a header being rewritten
    assert read_metrics_log(run_dir) is None


def test_runs_written_while_status_reads_never_crash_it(tmp_path, cfg):
    """A writer appends half lines, rewrites the log's header, replaces the record, writes a holder file in pieces, and
    makes and removes whole run folders while status reads the folder again and again."""
    from mixbench.cli.status import view

    root = tmp_path / "runs"
    run_dir = make_run(root, "busy", cfg, "failed", log_steps=(9,), error="RuntimeError: x")
    record = json.loads((run_dir / "record.json").read_text())
    stop, errors = threading.Event(), []

    def write():
        i = 0
        while not stop.is_set():
            i += 1
            with open(run_dir / run_files.METRICS_FILE, "a") as f:
                f.write(f"0,,,{i}")
                f.flush()
                f.write(",4.0\n")
            if i % 7 == 0:
                (run_dir / run_files.METRICS_FILE).write_text("epoch,step,train/loss,val/loss\n")
            write_record({**record, "status": ("completed", "failed", "interrupted")[i % 3]}, run_dir / "record.json")
            with open(run_dir / run_files.HOLDER_FILE, "w") as f:
                f.write('{"host": "')
                f.flush()
                f.write(f'{socket.gethostname()}", "pid": {os.getpid()}, "since": "2026-01-01T00:00:00"}}\n')
            other = root / f"other{i % 3}"
            if other.exists():
                shutil.rmtree(other, ignore_errors=True)
            else:
                (other / "checkpoints").mkdir(parents=True, exist_ok=True)
                (other / "checkpoints" / f"epoch=0-step={i}.ckpt").write_bytes(b"x")
                (other / "config.yaml").write_text("trainer:\n  max_steps: 10\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline, reads, seen = time.time() + 2.0, 0, {}
        while time.time() < deadline:
            try:
                progress = folder_progress(root, seen)
                view(progress)
                assert {run.state for run in progress.runs} <= set(STATES)
                reads += 1
            except Exception as err:  # noqa: BLE001  (the test's point: nothing may escape)
                errors.append(err)
                break
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    assert reads > 5


def test_watch_refreshes_until_ctrl_c_and_exits_0(grid, capsys, monkeypatch):
    import mixbench.cli.status as status

    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(status.time, "sleep", sleep)
    assert main(["status", str(grid), "--watch", "0.5"]) == 0
    assert sleeps == [0.5, 0.5] and capsys.readouterr().out.count("7 runs:") == 2
    assert main(["status", str(grid), "--watch", "0"]) == 2
    from rich.console import Console

    terminal = Console(file=io.StringIO(), force_terminal=True, width=250)  # in place, through rich's Live
    sleeps.clear()
    assert status.watch(grid, 0.5, terminal) == 0 and len(sleeps) == 2
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.file.getvalue())  # without the terminal's escapes
    assert "7 runs: 2 stopped · 1 interrupted" in shown


def test_ctrl_c_stops_a_real_watch_with_status_0(grid):
    watcher = subprocess.Popen(
        [sys.executable, "-m", "mixbench.cli", "status", str(grid), "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"},
    )
    assert "7 runs:" in watcher.stdout.readline()
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0 and "Traceback" not in err


def test_status_of_no_runs_yet_and_of_a_missing_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no results/runs here yet
    assert main(["status"]) == 0
    assert "no runs" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "a_file").write_text("")
    assert main(["status", str(tmp_path / "a_file")]) == 2

    def ctrl_c(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("mixbench.cli.status.time.sleep", ctrl_c)
    assert main(["status", str(tmp_path / "soon"), "--watch", "1"]) == 0  # --watch waits for a grid about to start
    assert "no runs" in capsys.readouterr().out


def test_the_file_names_are_the_writers(tmp_path):
    """``core/run_files.py`` names what training writes; status reads by these names."""
    from mixbench.training import checkpointing, run_lock
    from mixbench.training.loggers import build_loggers

    assert (run_lock.LOCK_FILE, run_lock.HOLDER_FILE) == (run_files.LOCK_FILE, run_files.HOLDER_FILE)
    assert checkpointing.CHECKPOINT_DIR == run_files.CHECKPOINT_DIR
    assert run_files.CHECKPOINT_STEP.search("epoch=3-step=1200.ckpt").group(1) == "1200"
    (csv_logger,) = build_loggers("csv", {}, tmp_path, "x")
    assert Path(csv_logger.experiment.metrics_file_path) == tmp_path / run_files.METRICS_FILE


def grid_manifest_of(results: Path, cfg, seeds, jobs: int = 2):
    """The manifest run_many writes for a grid of ``cfg`` at ``seeds`` into ``results``, before any run started."""
    from mixbench.grids.manifest import GridManifest

    argvs = [["task=llama_lm", "model=llama_tiny", f"seed={seed}", f"results_dir={results}"] for seed in seeds]
    configs = [OmegaConf.merge(cfg, {"seed": seed, "results_dir": str(results)}) for seed in seeds]
    manifest = GridManifest(argvs, configs, jobs)
    manifest._write()
    return manifest


def test_a_grid_s_runs_without_a_folder_are_planned_and_in_the_folder_s_eta(tmp_path, cfg, capsys, monkeypatch):
    from dataclasses import replace

    from mixbench.cli.status import summary
    from mixbench.results.progress import RunProgress

    runs = tmp_path / "results" / "runs"
    manifest = grid_manifest_of(tmp_path / "results", cfg, range(5))
    progress = folder_progress(runs)
    assert progress.counts() == {"planned": 5} and progress.eta_s() is None
    assert "planned: 5 runs, time unknown" in summary(progress)
    # three runs ended: two ran their budget (10 and 20 min), one diverged early (its time says nothing of a run's)
    for i, (status, wall) in enumerate([("completed", 600.0), ("stalled", 1200.0), ("diverged", 5.0)]):
        run_dir = make_run(runs, f"seed{i}-x", cfg, status, wall_time_s=wall, **finished_fields(30.0))
        manifest.started(i, run_dir)
        manifest.ended(i, run_dir, json.loads((run_dir / "record.json").read_text()))
    progress = folder_progress(runs)
    assert progress.counts() == {"planned": 2, "diverged": 1, "stalled": 1, "finished": 1}
    assert progress.eta_s() == 900.0  # the 2 left, side by side: one round of the median run
    assert replace(progress, runs=[*progress.runs, RunProgress(runs / "r", "running", 10, 100, eta_s=120.0)]).eta_s() == 1020.0
    heading = summary(progress)
    assert "5 runs: 2 planned · 1 diverged" in heading and "planned: 2 runs, about 15m (1 round of 2 at a time, 15m each" in heading
    assert "all done in 15m" in heading
    assert folder_progress(runs / "llama_lm").counts()["planned"] == 2  # the manifest of a folder above
    assert folder_progress(tmp_path / "results").counts()["planned"] == 2  # ... and below
    assert "planned" not in folder_progress(runs / "llama_lm" / "llama_tiny" / "pre" / "seed0-x").counts()  # not a run's
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["status", str(runs)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " planned " in line and not line.startswith(str(runs))]
    assert [row.split()[:2] for row in rows] == [["llama_lm/llama_tiny/pre/…", "planned"]] * 2
    assert "seed=3" in rows[0] and "seed=4" in rows[1]
    manifest.close(keep=True)  # the grid ended (a resumable stop, Ctrl-C): its planned runs will not start
    progress = folder_progress(runs)
    assert progress.counts()["planned (grid stopped)"] == 2 and not progress.plans and progress.eta_s() is None
    assert summary(progress).endswith("; nothing running")


def test_a_grid_whose_process_is_gone_has_stopped_and_a_later_grid_takes_its_runs_over(tmp_path, cfg):
    results = tmp_path / "results"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    first = grid_manifest_of(results, cfg, range(3))
    first.data["pid"] = gone.pid  # its process ended without a word (kill -9)
    first._write()
    assert folder_progress(results / "runs").counts() == {"planned (grid stopped)": 3}
    later = grid_manifest_of(results, cfg, (1, 2))  # the same command again, for the runs not done
    assert later.paths != first.paths
    assert folder_progress(results / "runs").counts() == {"planned": 2, "planned (grid stopped)": 1}


def test_a_running_grid_s_manifest_counts_the_runs_it_has_not_started(tmp_path, monkeypatch):
    """``run -m --jobs 2`` of four runs: while the first two run, status counts the other two as planned; when the grid
    has ended its manifest holds every run's folder, status and time."""
    import mixbench.grids.runner as runner

    started, seen, both = [], [], threading.Barrier(2)

    class Process:  # a run process that writes its record and exits
        def __init__(self, command, **kwargs):
            self.run_dir, self.first = Path(next(a for a in command if a.startswith("run_dir="))[8:]), len(started) < 2
            started.append(self)

        def wait(self):
            if self.first:
                both.wait(60)
                seen.append(folder_progress(tmp_path / "runs").counts())
                both.wait(60)
            (self.run_dir / "record.json").write_text(json.dumps({"status": "completed", "wall_time_s": 60.0}))
            return 0

    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    argvs = expand_sweep(["task=llama_lm", "model=llama_tiny", "trainer.max_steps=2", "seed=0,1,2,3", f"results_dir={tmp_path}"])
    runner.run_many(argvs, jobs=2)
    assert seen == [{"starting": 2, "planned": 2}] * 2
    (manifest,) = [json.loads(p.read_text()) for p in (tmp_path / "runs" / run_files.GRIDS_DIR).glob("*.json")]
    assert [(r["state"], r["status"], r["wall_time_s"], r["argv"]) for r in manifest["runs"]] == [
        ("ended", "completed", 60.0, argv) for argv in argvs
    ]
    assert sorted(r["run_dir"] for r in manifest["runs"]) == sorted(str(p.run_dir.resolve()) for p in started)
    assert manifest["ended_at"] and manifest["jobs"] == 2
    assert "planned" not in folder_progress(tmp_path / "runs").counts()


def test_a_run_that_stops_a_grid_in_this_process_ends_in_its_manifest(tmp_path, monkeypatch):
    """``run -m`` one run at a time: a Ctrl-C inside run 1 stops it and the grid; the manifest says run 0 completed,
    run 1 interrupted (not still running), run 2 never started."""
    import mixbench.grids.runner as runner
    from mixbench.grids.launchers import Outcome
    from mixbench.training.preemption import Interrupted

    def in_process(i, total, argv, cfg):
        if i == 1:
            raise Interrupted("SIGINT", 3, None, False)
        return Outcome(argv, None, {"status": "completed", "wall_time_s": 5.0})

    monkeypatch.setattr(runner, "_in_process", in_process)
    monkeypatch.setattr(runner, "preflight", lambda cfg: None)
    argvs = expand_sweep(["task=llama_lm", "model=llama_tiny", "seed=0,1,2", f"results_dir={tmp_path}"])
    with pytest.raises(Interrupted):
        runner.run_many(argvs, jobs=1)
    (manifest,) = [json.loads(p.read_text()) for p in (tmp_path / "runs" / run_files.GRIDS_DIR).glob("*.json")]
    assert [(r["state"], r.get("status")) for r in manifest["runs"]] == [
        ("ended", "completed"),
        ("ended", "interrupted"),
        ("planned", None),
    ]
    assert manifest["ended_at"]
