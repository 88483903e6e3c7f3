"""``--launcher slurm``: every run of a grid (``mixbench reproduce``, ``mixbench run -m``) as one SLURM job, submitted
through submitit.

A job runs ``mixbench run ARGS run_dir=<its folder> resume=auto`` in the submitit worker process, on
``trainer.num_nodes`` × ``trainer.devices`` tasks (``srun``) that Lightning's SLURM environment makes the ranks of one
run.  The job asks for ``--signal=USR1@<slurm.signal_delay_s>``: before the time limit the run checkpoints, requeues
its job and exits (:mod:`mixbench.training.preemption`); the requeued job continues from that checkpoint.  Settings: the
``slurm:`` group (``configs/defaults.yaml``).  With ``--resume`` a run whose record is finished is not submitted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..core.errors import USER_ERRORS, ConfigError, one_line
from ..core.logs import configure_logging
from ..core.project import project_folder, select_project
from ..training.config import compose, norm_spec
from ..training.preemption import PREEMPTED_EXIT
from ..training.run import finished_record, run_and_report, run_directory

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """One configuration of a grid: its arguments, run folder and record (None if the run left none)."""

    argv: list[str]
    run_dir: Path | None
    record: dict | None
    error: str | None = None
    job: str | None = None  # the SLURM job id (--launcher slurm)

    @property
    def status(self) -> str:
        return self.record["status"] if self.record else "failed"

    @property
    def command(self) -> str:
        return "mixbench run " + " ".join(shlex.quote(a) for a in self.argv)


def slurm_parameters(cfg: DictConfig) -> dict:
    """submitit's ``update_parameters`` keywords for the run ``cfg``: its ``slurm:`` settings, one task per device."""
    slurm = OmegaConf.to_container(cfg.slurm, resolve=True)
    devices = cfg.trainer.devices
    if not isinstance(devices, int) or devices < 1:
        raise ConfigError(
            f"--launcher slurm needs trainer.devices as a number of devices per node, got {devices!r} (one SLURM task per device)"
        )
    parameters = {
        "slurm_partition": slurm["partition"],
        "slurm_account": slurm["account"],
        "timeout_min": slurm["time_min"],
        "nodes": int(cfg.trainer.num_nodes),
        "tasks_per_node": devices,
        "gpus_per_node": slurm["gpus_per_node"],
        "cpus_per_task": slurm["cpus_per_task"],
        "mem_gb": slurm["mem_gb"],
        "name": f"mixbench-{cfg.task.name}",
        "slurm_additional_parameters": {"signal": f"USR1@{slurm['signal_delay_s']}", **(slurm["sbatch"] or {})},
    }
    return {k: v for k, v in parameters.items() if v is not None}


def project_arguments() -> list[str]:
    """``["--project", P]`` naming this process's project folder (``--project``, or the working directory), for a
    ``mixbench`` command in another process (a grid's run, a SLURM job) to know its tasks and placements; else []."""
    project = project_folder()
    return ["--project", str(project)] if project is not None else []


def run_job(argv: list[str], project: str | None) -> int:
    """The body of a SLURM job (every task of it runs this): ``mixbench [--project P] run ARGV`` in this process.  A
    run stopped to be resumed (exit 75) in a job that is being requeued (by the run itself on SIGUSR1, or by SLURM:
    ``scontrol requeue``, a preemption) ends its process without a result, so that submitit waits for the next start
    rather than reading a result of this attempt; in a job that is not (``scancel --signal=TERM``, a full disk) it
    returns 75 as its result, and the grid reports the run as stopped."""
    configure_logging()
    try:
        select_project(project)
        code = run_and_report(compose(argv), ["mixbench", *project_arguments(), "run", *argv])
    except USER_ERRORS as err:
        log.error("%s", one_line(err))
        code = 2
    if code == PREEMPTED_EXIT and slurm_job_state() != "RUNNING":
        logging.shutdown()
        os._exit(code)
    return code


def slurm_job_state() -> str | None:
    """This SLURM job's state (``scontrol show job``): RUNNING, or e.g. COMPLETING while it is being requeued; None if
    it cannot be read."""
    job = os.environ.get("SLURM_JOB_ID")
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True) if job else None
    found = re.search(r"JobState=(\S+)", shown.stdout) if shown is not None and shown.returncode == 0 else None
    return found.group(1) if found else None


def submit_many(argvs: list[list[str]], configs: list[DictConfig], resume: bool) -> list[Outcome]:
    """Submit one SLURM job per configuration (not the finished ones with ``resume``), wait for all, return outcomes."""
    import shutil

    try:
        import submitit
    except ImportError:
        raise ConfigError("--launcher slurm needs submitit: pip install 'mixbench[cluster]'") from None

    parameters = [slurm_parameters(cfg) for cfg in configs]  # every job's settings checked before any is submitted
    if shutil.which("sbatch") is None:
        raise ConfigError("--launcher slurm needs SLURM's sbatch on PATH: run it on a login node of the cluster")
    project = project_folder()  # the job's process selects it: its working directory may be another
    outcomes, jobs = [], []
    for i, (argv, cfg) in enumerate(zip(argvs, configs)):
        run_dir = run_directory(cfg, norm_spec(cfg).label())
        if resume and (done := finished_record(run_dir)) is not None:
            log.info("[%d/%d] %s already finished (%s): not submitted", i + 1, len(argvs), run_dir, done["status"])
            outcomes.append(Outcome(argv, run_dir, done))
            continue
        folder = cfg.slurm.folder or str(Path(cfg.results_dir) / "slurm")
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**parameters[i])
        try:
            job = executor.submit(run_job, [*argv, f"run_dir={run_dir}", "resume=auto"], project and str(project))  # requeued: continues
        except Exception as err:  # sbatch refused: a bad partition, account or flag
            raise ConfigError(f"sbatch refused the job of run {i + 1} ({' '.join(argv)}): {err}; check the slurm.* settings") from None
        log.info("[%d/%d] SLURM job %s: mixbench run %s  → %s", i + 1, len(argvs), job.job_id, " ".join(argv), run_dir)
        outcome = Outcome(argv, run_dir, None, job=str(job.job_id))
        outcomes.append(outcome)
        jobs.append((outcome, job))
    for outcome, job in jobs:
        try:
            code = job.result()
        except Exception as err:  # the job failed or was cancelled: its log says why
            last = str(err).strip().splitlines()[-1:] or [type(err).__name__]  # submitit's message ends with the job's error
            code, outcome.error = None, f"SLURM job {job.job_id} failed: {last[0]}; see {job.paths.stderr}"
        try:
            outcome.record = json.loads((outcome.run_dir / "record.json").read_text())
        except (OSError, ValueError):
            outcome.error = outcome.error or f"SLURM job {job.job_id} exited with {code} without a record; see {job.paths.stderr}"
    return outcomes
