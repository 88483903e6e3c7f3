"""Cluster operations: one writer per run folder, config errors before anything is written."""

import json
import logging
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.core.tasks import discover_tasks
from mixbench.training.config import compose, norm_spec

TINY_LM = [
    "task=llama_lm",
    "model=llama_debug",
    "model.vocab_size=8192",
    "data.seq_len=16",
    "trainer.val_check_interval=null",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]
SOURCES = ("path", "root", "hub")  # where a data group reads from


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_second_process_on_a_run_folder_in_use_exits_2_naming_the_holder_and_only_one_trains(tmp_path, caplog):
    """The first process (forked from the chaos harness's preloaded server: no ~10 s of imports) stands still at step 2
    until the second has been refused, so the two always meet, however fast the machine."""
    from _support.chaos_harness import Launcher

    run_dir, pause = tmp_path / "run", tmp_path / "pause"
    args = ["run", *TINY_LM, "trainer.max_steps=4", f"run_dir={run_dir}", "resume=auto"]
    first = Launcher(tmp_path / "logs").start(args, [{"kind": "pause", "moment": "step", "step": 2, "action": "pause", "path": str(pause)}])
    deadline = time.monotonic() + 120
    while not pause.exists():  # the first process holds the folder and waits at step 2
        assert first.running and time.monotonic() < deadline, first.output()[-2000:]
        time.sleep(0.1)
    assert (run_dir / ".run.holder").exists()
    assert main(args) == 2  # a requeued job meeting its still-running predecessor
    (message,) = errors(caplog)
    assert f"host {socket.gethostname()}, pid {first.process.pid}" in message and str(run_dir) in message
    assert not (run_dir / "record.json").exists()  # the second wrote nothing
    pause.unlink()  # the first goes on
    first.process.join(timeout=300)
    assert first.returncode == 0, first.output()[-2000:]
    record = json.loads((run_dir / "record.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 4
    assert not (run_dir / ".run.holder").exists()
    caplog.clear()
    assert main(args) == 0  # the lock died with its holder: the folder is free (and finished: nothing to do)
    assert not errors(caplog)


@pytest.mark.parametrize("task", sorted(discover_tasks()))
def test_every_task_without_its_data_source_exits_2_before_anything_is_written(task, tmp_path, caplog):
    try:
        cfg = compose([f"task={task}"])
    except ConfigError:  # no default data source (the RLHF stages): composing the task alone is already refused
        removed = []
    else:
        removed = [f"data.{key}=null" for key in SOURCES if key in cfg.data]
        assert removed, f"task {task}: its data group has none of {SOURCES}"
    assert main(["run", f"task={task}", *removed, f"results_dir={tmp_path / 'results'}", "trainer.enable_progress_bar=false"]) == 2
    (message,) = errors(caplog)
    assert "set data." in message and "\n" not in message, message
    assert not (tmp_path / "results").exists()


def fake_run(folder: Path, args: list[str]) -> Path:
    """A run folder whose ``model_config.json`` describes the model ``args`` compose (no weights are read before the check)."""
    cfg = compose(args)
    spec = norm_spec(cfg)
    options = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "name"}
    folder.mkdir(parents=True)
    (folder / "model_config.json").write_text(
        json.dumps(
            {
                "family": cfg.task.family,
                "model": cfg.model.name,
                "options": options,
                "norm": spec.to_dict(),
                "norm_label": spec.label(),
                "plan": spec.plan(int(cfg.model.num_layers)),
            }
        )
    )
    return folder


@pytest.mark.parametrize(
    "theirs, expected",
    [
        (["task=llama_lm", "model=llama_71m"], "does not fit this run's llama_250m: model.hidden_size=768 (weights: 512)"),
        (["task=llama_lm", "model=llama_250m", "norm=post"], "was trained with norm post"),
        (["task=vit_tiny"], "holds a vision model"),
        (None, "no such file or folder"),
    ],
)
def test_init_from_that_does_not_fit_exits_2_before_anything_is_written(theirs, expected, tmp_path, caplog):
    source = fake_run(tmp_path / "pretrained", theirs) if theirs else tmp_path / "missing"
    (tmp_path / "sft.json").write_text("[]")
    assert (
        main(
            [
                "run",
                "task=sft_commonsense",
                f"init_from={source}",
                f"data.path={tmp_path / 'sft.json'}",
                "data.tokenizer=embedded",
                f"results_dir={tmp_path / 'results'}",
            ]
        )
        == 2
    )
    (message,) = errors(caplog)
    assert expected in message, message
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["trainer.num_nodes=2", "trainer.strategy=ddp"], "set run_dir= to a folder on storage every node shares"),
        (["data.batch_size=4", "data.global_batch_size=6"], "data.global_batch_size=6 is not a multiple of data.batch_size=4"),
    ],
)
def test_batch_and_node_settings_that_cannot_run_exit_2_before_anything_is_written(args, expected, tmp_path, caplog):
    assert main(["run", *TINY_LM, *args, f"results_dir={tmp_path / 'results'}"]) == 2
    (message,) = errors(caplog)
    assert expected in message
    assert not (tmp_path / "results").exists()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster for this module's tests (skipped, saying why, where its daemons cannot run)."""
    from _support.local_slurm import SlurmUnavailable, local_slurm

    try:
        with local_slurm(tmp_path_factory.mktemp("slurm")) as env, pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", env["SLURM_CONF"])
            yield env
    except SlurmUnavailable as why:
        pytest.skip(f"no local SLURM cluster: {why}")


SLURM_RUN = [*TINY_LM, "trainer.max_steps=16", "checkpoint.every_n_steps=2", "trainer.deterministic=true", "--launcher", "slurm"]


@pytest.fixture(scope="module")
def slurm_grid(slurm, tmp_path_factory) -> Path:
    """A two-cell grid (seed=0,1) run through ``--launcher slurm``: its results folder."""
    results = tmp_path_factory.mktemp("slurm_grid")
    summary, logger = Collect(), logging.getLogger("mixbench")
    level = logger.level
    logger.addHandler(summary)
    logger.setLevel(logging.INFO)
    try:
        assert main(["run", "-m", *SLURM_RUN, "seed=0,1", f"results_dir={results}"]) == 0
    finally:
        logger.removeHandler(summary)
        logger.setLevel(level)
    (results / "summary.log").write_text("\n".join(summary.messages))
    return results


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("record.json"))]


def test_slurm_launcher_runs_each_cell_as_a_job_names_the_jobs_and_resume_skips_finished_cells(slurm, slurm_grid, caplog):
    found = records(slurm_grid)
    assert sorted((r["seed"], r["status"], r["steps"]) for r in found) == [(0, "completed", 16), (1, "completed", 16)]
    jobs = {p.name.split("_")[0] for p in (slurm_grid / "slurm").glob("*_submission.sh")}
    written = {job: (slurm_grid / "slurm" / f"{job}_0_log.err").read_text() for job in jobs}
    assert len(jobs) == 2 and all(sum(f"record written to {r['run_dir']}" in log for r in found) == 1 for log in written.values())
    summary = [m for m in (slurm_grid / "summary.log").read_text().splitlines() if m.startswith("SLURM job ")]
    assert sorted(m.split()[2].rstrip(":") for m in summary) == sorted(jobs)  # the grid's summary names each job
    caplog.set_level(logging.INFO, logger="mixbench")
    assert main(["run", "-m", *SLURM_RUN, "seed=0,1", f"results_dir={slurm_grid}", "--resume"]) == 0
    messages = [r.getMessage() for r in caplog.records]
    assert sum("already finished (completed): not submitted" in m for m in messages) == 2
    assert {p.name.split("_")[0] for p in (slurm_grid / "slurm").glob("*_submission.sh")} == jobs  # nothing new submitted
    assert len(records(slurm_grid)) == 2


@pytest.mark.slow  # the local cluster stays in the default suite through the launcher test above (its grid is this test's reference)
def test_slurm_pre_timeout_signal_checkpoints_requeues_and_the_job_continues_exactly(slurm, slurm_grid, tmp_path):
    results = tmp_path / "results"
    with open(tmp_path / "launcher.log", "w") as output:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "mixbench.cli", "run", "-m", *SLURM_RUN, "seed=0", f"results_dir={results}"],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        while not list(results.rglob("epoch=0-step=2.ckpt")):  # training is under way
            assert launcher.poll() is None and time.monotonic() < deadline, (tmp_path / "launcher.log").read_text()[-2000:]
            time.sleep(0.1)
        (script,) = (results / "slurm").glob("*_submission.sh")
        job = script.name.split("_")[0]
        subprocess.run(["scancel", "--signal=USR1", job], check=True)  # what sbatch --signal=USR1@90 sends before the limit
        code = launcher.wait(timeout=240)  # the requeued job starts after cred_expire
    finally:
        launcher.kill()
    assert code == 0, (tmp_path / "launcher.log").read_text()[-2000:]
    log = "".join(p.read_text() for p in (results / "slurm").glob(f"{job}_*_log.err"))
    assert "preempted by SIGUSR1" in log and "the SLURM job was requeued" in log and "resume=auto: continuing from" in log
    (resumed,) = records(results)
    (uninterrupted,) = [r for r in records(slurm_grid) if r["seed"] == 0]
    assert resumed["status"] == "completed" and resumed["steps"] == 16
    assert resumed["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly


def training_jobs(launcher_log: Path, hit: dict[str, float]) -> list[str]:
    """The grid's running SLURM jobs whose run is training in an attempt started after the job was last hit (``hit``:
    job → time): its process holds the run folder (``.run.holder``, written once Python and submitit have set their
    signal handlers) and has written a checkpoint since.  A job hit while Python starts dies of the signal without a
    result, and submitit, without the cluster's accounting (sacct), would wait for it forever.  The launcher's log names
    each job's run folder."""
    running = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True).stdout.split()
    training = []
    for job, folder in re.findall(r"SLURM job (\d+): mixbench run .* → (\S+)", launcher_log.read_text()):
        holder = Path(folder) / ".run.holder"
        try:
            since = holder.stat().st_mtime
        except OSError:  # no process holds the folder
            continue
        newest = max((p.stat().st_mtime for p in Path(folder).glob("checkpoints/*.ckpt")), default=0.0)
        if job in running and since > hit.get(job, 0.0) and newest > since:
            training.append(job)
    return sorted(training)


HITS = (["scontrol", "requeue"], ["scancel", "--signal=TERM"])


@pytest.mark.slow
def test_a_slurm_grid_hit_by_scancel_term_and_scontrol_requeue_at_random_completes_exactly(slurm, slurm_grid, tmp_path):
    """The chaos of ``chaos_harness.py`` through the local cluster: at seeded random moments of their training the
    grid's jobs get ``scancel --signal=TERM`` (the run checkpoints, its job ends with 75, the grid names it and exits 1,
    and the grid relaunched with --resume submits it again) or ``scontrol requeue`` (the job starts again and resumes);
    the grid completes with the undisturbed jobs' records exactly, and no launcher or job log holds a traceback."""
    rng, results, hits, hit = random.Random(0), tmp_path / "results", Counter(), {}
    sweep = [sys.executable, "-m", "mixbench.cli", "run", "-m", *SLURM_RUN, "seed=0,1", f"results_dir={results}", "--resume"]
    for attempt in range(8):
        log = tmp_path / f"launcher-{attempt}.log"
        with open(log, "w") as output:
            launcher = subprocess.Popen(sweep, stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 900
            while launcher.poll() is None:
                assert time.monotonic() < deadline, f"the grid did not end within 900 s: {log}"
                jobs = training_jobs(log, hit)
                if sum(hits.values()) < 6 and jobs and rng.random() < 0.5:
                    job, how = rng.choice(jobs), HITS[sum(hits.values()) % len(HITS)]  # the two kinds in turn
                    if subprocess.run([*how, job], capture_output=True).returncode == 0:
                        hits[how[0]], hit[job] = hits[how[0]] + 1, time.time()
                time.sleep(0.5)
        finally:
            launcher.kill()
        text = log.read_text()
        assert launcher.returncode in (0, 1) and "Traceback" not in text, text[-3000:]
        stops = [line for line in text.splitlines() if line.startswith("ERROR ")]
        assert all("preempted by SIGTERM" in line for line in stops), stops  # runs stopped, none crashed
        if launcher.returncode == 0:
            break
    logging.getLogger(__name__).warning(
        "SLURM chaos: %d scancel --signal=TERM, %d scontrol requeue; %d launches", hits["scancel"], hits["scontrol"], attempt + 1
    )
    assert hits["scancel"] >= 1 and hits["scontrol"] >= 1
    assert not [p for p in (results / "slurm").glob("*_log.*") if "Traceback" in p.read_text()]
    resumed = {r["seed"]: r for r in records(results)}
    assert sorted(resumed) == [0, 1] and all(r["status"] == "completed" for r in resumed.values())
    for uninterrupted in records(slurm_grid):
        assert resumed[uninterrupted["seed"]]["metrics"]["val/loss"] == uninterrupted["metrics"]["val/loss"]  # exactly


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MULTI = [
    *TINY_LM,
    "trainer.max_steps=4",
    "trainer.accelerator=cpu",
    "trainer.deterministic=true",
    "data.batch_size=4",
    "data.global_batch_size=8",
    "save_weights=true",
]


def test_two_nodes_under_torchrun_train_like_one_process_with_the_same_global_batch(tmp_path):
    """Two "nodes" (two torchrun agents, one gloo process each, num_nodes=2) against one process that accumulates two
    micro-batches: the same 8 sequences per step (rank r takes r, r+2, ... of the order), the same validation
    sequences (2 batches of one process = 1 batch per rank).  The ranks' gradients travel in several small DDP buckets
    that they view (ddp.bucket_cap_mb=1, ddp.gradient_as_bucket_view=true)."""
    import torch
    from safetensors.torch import load_file

    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["run", *MULTI, "trainer.limit_val_batches=2", f"run_dir={one}"]) == 0
    port = free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={rank}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "-m",
                "mixbench.cli",
                "run",
                *MULTI,
                "trainer.num_nodes=2",
                "trainer.devices=1",
                "trainer.strategy=ddp",
                "ddp.bucket_cap_mb=1",
                "ddp.gradient_as_bucket_view=true",  # several buckets, gradients viewing them
                f"run_dir={two}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [o[-1500:] for o in outputs]
    single, double = (json.loads((d / "record.json").read_text()) for d in (one, two))
    assert double["effective"]["world_size"] == 2 and double["effective"]["accumulate_grad_batches"] == 1
    assert single["effective"]["accumulate_grad_batches"] == 2
    assert single["effective"]["global_batch_size"] == double["effective"]["global_batch_size"] == 8
    # the same computation, summed in another order (all-reduce of two means vs accumulation): equal to float rounding
    assert double["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-6, abs=0)
    weights = [load_file(str(d / "model.safetensors")) for d in (one, two)]
    # Adam divides each update by √v: where a gradient is near zero, its float rounding (the two sums run in another
    # order) moves the weight by more than the gradient's own rounding — up to 1.6e-6 on torch 2.14.1's CPU kernels
    # (weights ≈ 0.1); a rank that trained on other data would be off by the order of the lr (1e-3)
    assert all(torch.allclose(weights[0][k], weights[1][k], rtol=1e-5, atol=5e-6) for k in weights[0])


def test_without_slurm_programs_the_local_cluster_says_what_is_missing(tmp_path, monkeypatch):
    from _support.local_slurm import SlurmUnavailable, local_slurm

    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    with pytest.raises(SlurmUnavailable, match="not installed: munged, slurmctld, slurmd"):
        with local_slurm(tmp_path / "slurm"):
            pass


@pytest.mark.slow
def test_srun_ranks_under_lightnings_slurm_environment_train_like_one_process(slurm, tmp_path):
    """A job of 2 tasks (``srun``, one per device, gloo): Lightning's SLURM environment makes them the ranks of one run;
    rank 0 alone writes the record, which matches one process accumulating the same global batch."""
    assert main(["run", *MULTI, "trainer.limit_val_batches=2", f"run_dir={tmp_path / 'one'}"]) == 0
    assert (
        main(
            ["run", "-m", *MULTI, "trainer.devices=2", "trainer.strategy=ddp", f"results_dir={tmp_path / 'results'}", "--launcher", "slurm"]
        )
        == 0
    )
    (double,) = records(tmp_path / "results")
    single = json.loads((tmp_path / "one" / "record.json").read_text())
    assert double["effective"]["world_size"] == 2 and double["effective"]["global_batch_size"] == 8
    (log,) = (tmp_path / "results" / "slurm").glob("*_0_log.err")
    assert "SLURM auto-requeueing enabled" in log.read_text()  # Lightning's SLURMEnvironment set up the ranks
    assert double["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-6, abs=0)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", *TINY_LM, "--launcher", "slurm"], "--launcher belong to sweeps (-m)"),
        (["run", "-m", *TINY_LM, "seed=0,1", "--launcher", "slurm", "--jobs", "2"], "--jobs is for the local launcher"),
        (["run", "-m", *TINY_LM, "seed=0,1", "trainer.devices=-1", "--launcher", "slurm"], "needs trainer.devices as a number"),
        (["run", "-m", *TINY_LM, "seed=0,1", "--launcher", "slurm"], "needs SLURM's sbatch on PATH"),
        (["reproduce", "table2", "--scale", "proxy", "--launcher", "slurm"], "run with the local launcher only"),
        (["run", "-m", "task=sft_commonsense", "seed=0,1", "--launcher", "slurm"], "set data.path"),  # every cell checked first
    ],
)
def test_slurm_launcher_input_errors_exit_2_before_anything_is_submitted_or_written(args, expected, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no sbatch here
    assert main([*args, f"results_dir={tmp_path / 'results'}"]) == 2
    (message,) = errors(caplog)
    assert expected in message, message
    assert not (tmp_path / "results").exists()
