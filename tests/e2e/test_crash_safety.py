"""Crash-safe runs: SIGKILL at several moments, `resume=auto`, and the uninterrupted run's result exactly."""

import csv
import json
import logging
import signal
from pathlib import Path

import pytest
import torch
from _support.chaos_harness import Launch, Launcher
from _support.crash import COMMON, record
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.training.checkpointing import newest_checkpoint
from mixbench.training.preemption import INTERRUPTED_EXIT, PREEMPTED_EXIT


@pytest.fixture(scope="module")
def launcher(tmp_path_factory) -> Launcher:
    """Processes forked from a server that has imported mixbench, Lightning and torch (``chaos_harness.Launcher``): a
    killed run costs its steps, not the ~10 s of imports of a fresh interpreter on a small machine."""
    return Launcher(tmp_path_factory.mktemp("processes"))


def kill_harness(launcher: Launcher, moment: str, step: int, *args: str) -> Launch:
    """``mixbench run ARGS`` in a process of its own that gets SIGKILL at MOMENT of optimizer step STEP (``MOMENT:SIGNAL``,
    e.g. ``step:SIGTERM``: that signal), as ``kill_harness.py`` does; on this process's torch threads, as the runs it is
    compared with.  Its exit status is ``.returncode``, its output ``.output()``."""
    moment, _, signame = moment.partition(":")
    fault = {"kind": "signal", "moment": moment, "step": step, "action": signame or "SIGKILL"}
    return launcher.run(["run", *args], [fault], threads=torch.get_num_threads(), timeout=300)


def interrupt(launcher: Launcher, moment: str, step: int, run_dir: Path, *args: str) -> Launch:
    """``mixbench run COMMON ARGS run_dir=RUN_DIR`` through :func:`kill_harness`."""
    return kill_harness(launcher, moment, step, *COMMON, *args, f"run_dir={run_dir}")


@pytest.mark.parametrize("moment, step", [("step", 5), ("validation", 4), ("write", 6)])
def test_kill_then_resume_gives_the_uninterrupted_result_exactly(tmp_path, uninterrupted, launcher, moment, step):
    run_dir = tmp_path / "run"
    killed = interrupt(launcher, moment, step, run_dir)
    assert killed.returncode == -signal.SIGKILL, killed.output()[-2000:]
    assert not (run_dir / "record.json").exists()
    if moment == "write":  # the interrupted write left only a temporary file, never a .ckpt a resume could pick
        assert list((run_dir / "checkpoints").glob("*.tmp-*")) and not list((run_dir / "checkpoints").glob("*step=6.ckpt"))
    assert newest_checkpoint(run_dir).name == "epoch=0-step=4.ckpt"
    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 8
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt"))
    assert kept == ["epoch=0-step=6.ckpt", "epoch=0-step=8.ckpt", "last.ckpt"]  # keep_last=2 (+ last.ckpt)


def test_resume_auto_finds_the_unfinished_folder_of_the_same_config_and_skips_finished_runs(tmp_path, uninterrupted):
    results = tmp_path / "results"
    args = [*COMMON, f"results_dir={results}", "trainer.max_steps=2"]
    assert main(["run", *args, "resume=auto"]) == 0
    (first,) = results.rglob("record.json")
    assert main(["run", *args, f"run_dir={first.parent}"]) == 2  # finished: refused without resume=auto
    assert main(["run", *args, f"run_dir={first.parent}", "resume=auto"]) == 0  # finished: nothing to do
    assert len(list(results.rglob("record.json"))) == 1
    first.unlink()  # an unfinished run of the same config is continued in its folder
    assert main(["run", *args, "resume=auto"]) == 0
    assert [p.parent for p in results.rglob("record.json")] == [first.parent]
    moved = tmp_path / "moved"  # a results folder moved (e.g. committed under results/proxy/) still resumes
    results.rename(moved)
    assert main(["run", *[a for a in args if not a.startswith("results_dir=")], f"results_dir={moved}", "resume=auto"]) == 0
    assert len(list(moved.rglob("record.json"))) == 1


def test_resume_auto_matches_runs_made_before_a_setting_was_added_while_it_keeps_its_default(tmp_path, uninterrupted):
    results = tmp_path / "results"
    args = [*COMMON, f"results_dir={results}", "trainer.max_steps=2"]
    assert main(["run", *args, "resume=auto"]) == 0
    (first,) = results.rglob("record.json")
    saved = first.parent / "config.yaml"  # as an older mixbench wrote it: without a section added since (rlhf)
    older = OmegaConf.load(saved)
    del older["rlhf"]
    saved.write_text(OmegaConf.to_yaml(older))
    assert main(["run", *args, "resume=auto"]) == 0  # today's default of the new section: the same run, nothing to do
    assert len(list(results.rglob("record.json"))) == 1
    assert main(["run", *args, "rlhf.kl_ctl=0.3", "resume=auto"]) == 0  # not the default: another run
    assert len(list(results.rglob("record.json"))) == 2
    assert main(["run", *args, "trainer.max_steps=3", "resume=auto"]) == 0  # a setting both have, changed: another run
    assert len(list(results.rglob("record.json"))) == 3


def test_damaged_newest_checkpoints_are_skipped_and_the_newest_intact_one_resumes_exactly(tmp_path, uninterrupted, launcher, caplog):
    run_dir = tmp_path / "run"
    assert interrupt(launcher, "step", 7, run_dir).returncode == -signal.SIGKILL
    folder = run_dir / "checkpoints"
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt", "last.ckpt"]
    for name in ("epoch=0-step=6.ckpt", "last.ckpt"):  # a truncated copy, a bad disk: the newest two
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: len(data) // 3])
    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping damaged checkpoint")]
    assert len(skipped) == 2 and all("\n" not in m for m in skipped)
    assert {Path(m.split()[3]).name for m in skipped} == {"epoch=0-step=6.ckpt", "last.ckpt"}
    assert record(run_dir)["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly, from step 4


def test_every_checkpoint_damaged_is_exit_2_naming_them_and_nothing_is_overwritten(tmp_path, caplog):
    run_dir = tmp_path / "run"
    assert main(["run", *COMMON, "trainer.max_steps=4", f"run_dir={run_dir}"]) == 0
    (run_dir / "record.json").unlink()  # as if it had been killed after its last checkpoint
    folder = run_dir / "checkpoints"
    for path in folder.glob("*.ckpt"):
        path.write_bytes(path.read_bytes()[:100])
    files = lambda: {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and not p.name.startswith(".run.")}  # noqa: E731
    before = files()
    caplog.clear()
    assert main(["run", *COMMON, "trainer.max_steps=4", f"run_dir={run_dir}", "resume=auto"]) == 2  # its own config
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "epoch=0-step=4.ckpt" in message and "last.ckpt" in message and "resume_from=" in message and "Traceback" not in message
    assert files() == before  # the lock's files (.run.*) aside


@pytest.mark.parametrize(
    "signame, extra", [("SIGTERM", []), pytest.param("SIGUSR1", ["data.global_batch_size=8"], marks=pytest.mark.slow)]
)  # 2 micro-batches a step
def test_preemption_signal_mid_step_checkpoints_that_step_exits_preempted_and_resumes_exactly(
    tmp_path, uninterrupted, launcher, signame, extra
):
    if extra:
        assert main(["run", *COMMON, *extra, f"run_dir={tmp_path / 'full'}"]) == 0
        uninterrupted = record(tmp_path / "full")
        assert uninterrupted["effective"]["accumulate_grad_batches"] == 2
    run_dir = tmp_path / "run"
    stopped = interrupt(launcher, f"step:{signame}", 4, run_dir, *extra)  # between forward and backward of (each micro-batch of) step 4 → 5
    assert stopped.returncode == PREEMPTED_EXIT, stopped.output()[-2000:]
    assert f"preempted by {signame} at step 5" in stopped.output()  # the step in flight finished, then its checkpoint
    note = record(run_dir)["preempted"]
    assert note == {"signal": signame, "step": 5, "checkpoint": str(run_dir / "checkpoints" / "epoch=0-step=5.ckpt"), "requeued": False}
    assert record(run_dir)["status"] == "failed"  # not finished: resume=auto continues it
    assert newest_checkpoint(run_dir).name == "epoch=0-step=5.ckpt"  # not a checkpoint.every_n_steps=2 step
    assert main(["run", *COMMON, *extra, f"run_dir={run_dir}", "resume=auto"]) == 0
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 8 and "preempted" not in resumed
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly


def test_ctrl_c_checkpoints_the_step_exits_130_records_interrupted_and_resumes_exactly(tmp_path, uninterrupted, launcher, recwarn):
    """SIGINT is a stop like SIGTERM's: the step in flight finishes and is checkpointed, one line says so, exit 130,
    status ``interrupted``.  A second Ctrl-C half-way through writing that checkpoint is logged and ignored: the
    checkpoint is written whole and the resume is exact — without Lightning's "dataloader is not resumable" warning
    (the data module restores its position, and the result is exact)."""
    run_dir = tmp_path / "run"
    faults = [
        {"kind": "signal", "moment": "step", "step": 4, "action": "SIGINT"},
        {"kind": "signal", "moment": "write", "step": 5, "action": "SIGINT"},
    ]
    stopped = launcher.run(["run", *COMMON, f"run_dir={run_dir}"], faults, threads=torch.get_num_threads(), timeout=300)
    assert stopped.returncode == INTERRUPTED_EXIT, stopped.output()[-2000:]
    assert len(stopped.fired()) == 2
    out = stopped.output()
    assert "interrupted (Ctrl-C) by SIGINT at step 5" in out and "Ctrl-C again: ignored" in out and "Traceback" not in out
    done = record(run_dir)
    assert done["status"] == "interrupted" and "preempted" not in done
    assert done["interrupted"] == {
        "signal": "SIGINT",
        "step": 5,
        "checkpoint": str(run_dir / "checkpoints" / "epoch=0-step=5.ckpt"),
        "requeued": False,
    }
    assert newest_checkpoint(run_dir).name == "epoch=0-step=5.ckpt"
    assert main(["run", *COMMON, f"run_dir={run_dir}", "resume=auto"]) == 0
    resumed = record(run_dir)
    assert resumed["status"] == "completed" and resumed["steps"] == 8 and "interrupted" not in resumed
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly
    assert not [w for w in recwarn if "not resumable" in str(w.message)]


def test_the_not_resumable_warning_is_silenced_only_where_the_data_module_resumes_exactly():
    import warnings

    from mixbench.data.samplers import ResumableOrder
    from mixbench.training.callbacks import ExactResumeNotice

    class Exact(ResumableOrder):  # the text data: no exact_resume entry
        def describe(self):
            return {"name": "exact"}

    class Inexact(ResumableOrder):  # as DALI's pipeline describes itself
        def describe(self):
            return {"name": "dali", "exact_resume": False}

    message = "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable. ..."
    for datamodule, silenced in ((Exact(), True), (Inexact(), False), (object(), False)):
        notice, trainer = ExactResumeNotice(), type("Trainer", (), {"datamodule": datamodule})()
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            notice.on_train_start(trainer, None)
            warnings.warn(message, UserWarning, stacklevel=1)
            notice.on_train_end(trainer, None)
            warnings.warn(message, UserWarning, stacklevel=1)  # after the fit: not silenced
        assert len(shown) == (1 if silenced else 2), type(datamodule).__name__


def test_ctrl_c_from_a_terminal_reaches_the_data_workers_too_and_the_run_still_stops_at_a_checkpoint(tmp_path):
    """A terminal sends Ctrl-C to the whole process group: the run's DataLoader workers get it as well (they ignore
    it; the run stops them), and a Ctrl-C pressed again while the run stops changes nothing.  (One that comes after the
    run has stopped, as the process exits, ends it by SIGINT itself, which a shell reports as 130 too.)"""
    import os
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    args = [*COMMON, "trainer.max_steps=100000", "trainer.val_check_interval=1000", "data.num_workers=2", "trainer.log_every_n_steps=1"]
    with open(tmp_path / "console.log", "w") as console:
        process = subprocess.Popen(
            [sys.executable, "-m", "mixbench.cli", "run", *args, f"run_dir={run_dir}"],
            start_new_session=True,
            stdout=console,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        logged = list(run_dir.rglob("metrics.csv"))
        if logged and len(logged[0].read_text().splitlines()) > 5:  # training, the workers running
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
    time.sleep(0.1)
    os.killpg(process.pid, signal.SIGINT)  # and again, while the step ends and its checkpoint is written
    assert process.wait(120) in (INTERRUPTED_EXIT, -signal.SIGINT), (tmp_path / "console.log").read_text()[-2000:]
    output = (tmp_path / "console.log").read_text()
    assert "Traceback" not in output and "DataLoader worker" not in output
    done = record(run_dir)
    assert done["status"] == "interrupted" and Path(done["interrupted"]["checkpoint"]) == newest_checkpoint(run_dir)


FINAL_VALIDATION = [*COMMON, "trainer.max_steps=2", "trainer.limit_val_batches=1"]  # a run whose last step is step 2


def stop_in_the_final_validation(run_dir: Path, launcher: Launcher, signame: str, exit_status: int, stopped_as: str) -> dict:
    """A :data:`FINAL_VALIDATION` run killed after its last checkpoint (its record removed: ``resume=auto`` only
    validates), resumed and sent ``signame`` in its final validation: it exits with ``exit_status`` where it is, saying
    ``<stopped_as> by <signame> at step 2: no new checkpoint`` without a traceback.  Returns its record."""
    assert main(["run", *FINAL_VALIDATION, f"run_dir={run_dir}"]) == 0
    (run_dir / "record.json").unlink()
    stopped = kill_harness(launcher, f"validation:{signame}", 2, *FINAL_VALIDATION, f"run_dir={run_dir}", "resume=auto")
    assert stopped.returncode == exit_status, stopped.output()[-2000:]
    assert f"{stopped_as} by {signame} at step 2: no new checkpoint" in stopped.output() and "Traceback" not in stopped.output()
    return record(run_dir)


def finishes_on_resume(run_dir: Path) -> bool:
    """Whether ``resume=auto`` finishes the :data:`FINAL_VALIDATION` run in ``run_dir`` (exit 0, ``completed``)."""
    return main(["run", *FINAL_VALIDATION, f"run_dir={run_dir}", "resume=auto"]) == 0 and record(run_dir)["status"] == "completed"


def test_ctrl_c_outside_training_stops_at_once_with_exit_130_and_the_run_finishes_on_resume(tmp_path, launcher):
    """In the final validation (after fit) there is no step to finish: the run stops where it is, without a new
    checkpoint, rather than Lightning's ``exit(1)`` recorded as ``failed: SystemExit: 1``."""
    stopped = stop_in_the_final_validation(tmp_path / "run", launcher, "SIGINT", INTERRUPTED_EXIT, "interrupted (Ctrl-C)")
    assert stopped["status"] == "interrupted"
    assert finishes_on_resume(tmp_path / "run")


def test_a_sweep_signalled_in_its_last_validation_stops_at_exit_75_and_resumes_exactly(tmp_path, uninterrupted, launcher):
    """``mixbench run -m`` trains in its main thread, where the preemption handlers can be set (a worker thread cannot:
    a SIGTERM killed the sweep outright), and a signal after the last step (in the last validation inside fit) still
    stops the run at that step's checkpoint rather than being dropped while the sweep goes on."""
    sweep = ["-m", *COMMON, "seed=0", f"results_dir={tmp_path}"]
    stopped = kill_harness(launcher, "validation:SIGTERM", 8, *sweep)
    assert stopped.returncode == PREEMPTED_EXIT, stopped.output()[-2000:]
    assert "preempted by SIGTERM at step 8" in stopped.output() and "Traceback" not in stopped.output()
    assert main(["run", *sweep, "--resume"]) == 0
    (resumed,) = [json.loads(p.read_text()) for p in tmp_path.rglob("record.json")]
    assert resumed["status"] == "completed" and resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]


def test_a_sigterm_in_the_final_validation_stops_with_exit_75_and_the_run_finishes_on_resume(tmp_path, launcher):
    """Outside fit, Lightning's own handler notes a SIGTERM and stops only between validation batches: a one-batch
    final validation ran on and the run (and a sweep after it) went on as if no signal had come."""
    stopped = stop_in_the_final_validation(tmp_path / "run", launcher, "SIGTERM", PREEMPTED_EXIT, "preempted")
    assert stopped["status"] == "failed" and stopped["preempted"]["signal"] == "SIGTERM"
    assert finishes_on_resume(tmp_path / "run")


def test_a_run_resumed_mid_epoch_keeps_every_later_epoch_whole(tmp_path, launcher):
    """A text run of several epochs, killed in its first epoch and resumed, gives the uninterrupted run's validations
    (same steps, same epochs) and result exactly: the resumed loader keeps the whole epoch's length."""
    import gzip

    words = "the quick brown fox jumps over a lazy dog while seven wise owls watch the quiet river run".split()
    corpus = tmp_path / "tiny-train.00000-of-00001.json.gz"
    with gzip.open(corpus, "wt") as f:
        for i in range(10):  # ~80 packed windows of 16 tokens: 20 batches of 4 an epoch
            text = " ".join(words[(i * 7 + k) % len(words)] for k in range(60))
            f.write(json.dumps({"text": text, "url": f"doc{i}", "timestamp": "2026"}) + "\n")
    with gzip.open(tmp_path / "tiny-validation.00000-of-00001.json.gz", "wt") as f:
        f.write(json.dumps({"text": " ".join(words * 3), "url": "val", "timestamp": "2026"}) + "\n")
    args = [
        *COMMON,
        f"data.path={tmp_path}/tiny-train.*.json.gz",
        "data.tokenizer=embedded",
        "trainer.max_steps=40",
        "trainer.val_check_interval=null",
        "trainer.check_val_every_n_epoch=1",
        "trainer.limit_val_batches=2",
    ]
    assert main(["run", *args, f"run_dir={tmp_path / 'whole'}"]) == 0
    done = interrupt(launcher, "step", 3, tmp_path / "cut", *args[len(COMMON) :])
    assert done.returncode == -signal.SIGKILL, done.output()[-2000:]
    assert main(["run", *args, f"run_dir={tmp_path / 'cut'}", "resume=auto"]) == 0

    def validations(run_dir):
        with open(run_dir / "logs" / "metrics.csv") as f:
            return [(row["epoch"], row["step"]) for row in csv.DictReader(f) if row.get("val/loss")]

    whole, cut = record(tmp_path / "whole"), record(tmp_path / "cut")
    assert record(tmp_path / "whole")["dataset"]["num_train_sequences"] // 4 >= 10  # several epochs in 40 steps
    assert validations(tmp_path / "cut") == validations(tmp_path / "whole")
    assert cut["metrics"]["val/loss"] == whole["metrics"]["val/loss"]


def test_one_rank_stops_at_the_signals_step_several_agree_every_n_steps():
    """One rank decides alone, at once; several ask the strategy (a GPU sync) only every ``agree_every_n_steps``."""
    import types

    from mixbench.training.preemption import PreemptionCheckpoint

    asked = []

    def decision(flag, all=True):
        asked.append((flag, all))
        return flag

    trainer = types.SimpleNamespace(world_size=1, global_step=3, strategy=types.SimpleNamespace(reduce_boolean_decision=decision))
    callback = PreemptionCheckpoint(Path("unused"), agree_every_n_steps=10)
    assert callback.stop_now(trainer) is False
    callback.received = signal.SIGTERM
    assert callback.stop_now(trainer) is True and asked == []
    trainer.world_size = 2
    stops = {step: callback.stop_now(types.SimpleNamespace(**{**vars(trainer), "global_step": step})) for step in range(11, 21)}
    assert stops == {step: step == 20 for step in range(11, 21)}
    assert asked == [(True, False)]  # once (at step 20), for any rank's signal (all=False)
    with pytest.raises(ValueError, match="agree_every_n_steps"):
        PreemptionCheckpoint(Path("unused"), agree_every_n_steps=0)


def test_lightnings_per_batch_sigterm_broadcast_is_switched_off_under_several_ranks(tmp_path, monkeypatch):
    """Lightning (>= 2.6) broadcasts a SIGTERM flag from the GPU before every DDP batch and reads it back: a host wait per
    step.  The callback replaces that flag's only setter (the SIGTERM handler) during training and switches the
    broadcast off.  If this fails because Lightning renamed or dropped ``_broadcast_sigterm_tensor``, check whether
    its per-batch sync is gone and update ``silence_sigterm_broadcast``."""
    import lightning as L
    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from mixbench.training.preemption import silence_sigterm_broadcast

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, default_root_dir=tmp_path)
    loop = trainer.fit_loop.epoch_loop
    assert callable(getattr(type(loop), "_broadcast_sigterm_tensor", None)), "Lightning no longer has the broadcast"
    broadcasts = []
    monkeypatch.setattr(torch.distributed, "broadcast", lambda tensor, src: broadcasts.append(tensor))
    trainer._signal_connector.received_sigterm = True  # what makes Lightning's broadcast raise SIGTERMException
    with pytest.raises(SIGTERMException):  # Lightning's own: it broadcasts (and would read the flag back)
        loop._broadcast_sigterm_tensor()
    assert len(broadcasts) == 1
    silence_sigterm_broadcast(trainer)
    loop._broadcast_sigterm_tensor()
    assert len(broadcasts) == 1
