"""Test helper: a one-node SLURM cluster (Debian's slurmctld, slurmd and munged) in a scratch folder, on free ports,
for as long as a ``with local_slurm(folder) as env:`` block runs; ``env`` is the environment for its client commands
(``SLURM_CONF``).  :class:`SlurmUnavailable` says why it cannot start (missing programs, a daemon that will not run)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sacct")


class SlurmUnavailable(RuntimeError):
    """The local SLURM cluster cannot start here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: Path, host: str, cpus: int, socket_path: Path) -> str:
    return f"""ClusterName=mixbenchtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={socket_path},cred_expire=5
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _wait(check, seconds: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = " | ".join(line for log in logs if log.exists() for line in log.read_text().splitlines()[-3:])
    raise SlurmUnavailable(f"{what} did not come up within {seconds:.0f} s ({tail or 'no log'})")


def _steps_alive(folder: Path, host: str) -> bool:
    """Whether a job step of this cluster still runs (its slurmstepd keeps a socket ``<host>_<job>.<step>`` in the spool
    folder, a batch job also a ``job<id>`` folder)."""
    return any((folder / "spool").glob("job*")) or any((folder / "spool").glob(f"{host}_*"))


@contextlib.contextmanager
def local_slurm(folder: Path):
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        raise SlurmUnavailable(f"not installed: {', '.join(missing)} (Debian: apt-get install slurmctld slurmd munge slurm-client)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the local SLURM daemons need root")
    folder = Path(folder)
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key, sock = folder / "munge" / "munge.key", folder / "munge" / "munge.socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, host, os.cpu_count() or 1, sock))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []
    try:
        daemons.append(
            subprocess.Popen(
                [
                    "munged",
                    "-F",
                    "--force",
                    f"--key-file={key}",
                    f"--socket={sock}",
                    f"--pid-file={folder / 'munge' / 'munged.pid'}",
                    f"--log-file={folder / 'munge' / 'munged.log'}",
                    f"--seed-file={folder / 'munge' / 'munged.seed'}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        _wait(sock.exists, 20, "munged", [folder / "munge" / "munged.log"])
        daemons.append(
            subprocess.Popen(
                ["slurmctld", "-D", "-i", "-f", str(conf)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        daemons.append(
            subprocess.Popen(
                ["slurmd", "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

        def node_idle() -> bool:
            if any(d.poll() is not None for d in daemons):
                raise SlurmUnavailable(
                    "a SLURM daemon exited: "
                    + " | ".join(
                        line
                        for log in ("slurmctld.log", "slurmd.log")
                        if (folder / log).exists()
                        for line in (folder / log).read_text().splitlines()[-3:]
                    )
                )
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")

        _wait(node_idle, 60, "the SLURM node", [folder / "slurmctld.log", folder / "slurmd.log"])
        yield env
        # jobs end after their result is written: stopping slurmd before their steps finish would orphan them
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip() or _steps_alive(folder, host)
        ):
            time.sleep(0.5)
    finally:
        for daemon in reversed(daemons):
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
                try:
                    daemon.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)
