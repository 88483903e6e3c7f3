"""Run the lines of a plan (one ``mixbench run ...`` command a line, as ``mixbench reproduce ... --dry-run`` prints
them) over the machine's GPUs: ``--jobs`` runs at a time on each GPU, each pinned to its GPU
(``CUDA_VISIBLE_DEVICES``) and to its own share of the CPU cores (``taskset``), taken from one queue in plan order.

``--deadline S`` stops what still runs S seconds after the start: SIGTERM to each run, which checkpoints at its next
step boundary and exits 75, then, after ``--grace`` seconds, SIGKILL to what is left of its process group.  A device
call with a hard time limit can then still pack what finished; runs started with ``resume=auto`` continue from their
checkpoints next time.  Prints one line per run (start, end, exit status, seconds) and a summary.

    python3 bench/grids/grid_lanes.py plan.txt --gpus 4 --jobs 3 --deadline 540 --logs .grid/logs
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("grid_lanes")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan", help="file with one `mixbench run ...` command a line")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs to use (0..N-1)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time on each GPU")
    parser.add_argument("--deadline", type=float, default=0, help="stop every run still going after this many seconds (0: none)")
    parser.add_argument("--grace", type=float, default=30, help="seconds a stopped run has to checkpoint before it is killed")
    parser.add_argument("--logs", default="grid_logs", help="folder for each run's console")
    parser.add_argument("--python", default=sys.executable, help="python that runs `-m mixbench.cli` (default: this one)")
    return parser.parse_args(argv)


def plan_commands(text: str, python: str) -> list[list[str]]:
    """The plan's lines as argv lists, ``mixbench`` replaced by ``python -m mixbench.cli`` (blank lines and # comments skipped)."""
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        argv = shlex.split(line)
        if argv[0] != "mixbench":
            raise ValueError(f"not a mixbench command: {line}")
        commands.append([python, "-m", "mixbench.cli", *argv[1:]])
    return commands


def core_sets(gpus: int, jobs: int) -> list[list[int]]:
    """One disjoint set of CPU cores per lane (gpu-major), from the cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    lanes = gpus * jobs
    per = max(1, len(cores) // lanes)
    return [cores[(i * per) % len(cores) : (i * per) % len(cores) + per] for i in range(lanes)]


def gpu_devices(gpus: int) -> list[str]:
    """The device of each of the ``gpus`` lanes' GPUs: the first ``gpus`` of this process's ``CUDA_VISIBLE_DEVICES``
    where it is set (a grid on GPUs 2-3 of a machine: ``CUDA_VISIBLE_DEVICES=2,3 ... --gpus 2``), else 0..gpus-1."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and len(visible) < gpus:
        raise SystemExit(f"--gpus {gpus} but CUDA_VISIBLE_DEVICES lists {len(visible)} device(s): {','.join(visible)}")
    return visible[:gpus] if visible else [str(i) for i in range(gpus)]


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    queue = plan_commands(Path(args.plan).read_text(), args.python)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    cores = core_sets(args.gpus, args.jobs)
    devices = gpu_devices(args.gpus)
    free = list(range(args.gpus * args.jobs))  # lane i: GPU i // jobs
    running: dict[int, tuple[subprocess.Popen, int, float]] = {}  # lane → (process, plan index, start)
    results: list[tuple[int, int | None, float]] = []
    start, index, stopped = time.monotonic(), 0, False
    while (queue[index:] and not stopped) or running:  # after the deadline: until the stopped runs have ended
        if args.deadline and not stopped and time.monotonic() - start > args.deadline:
            stopped = True
            log.info("deadline of %.0f s reached: stopping %d run(s), %d not started", args.deadline, len(running), len(queue) - index)
            for proc, _, _ in running.values():  # the run itself: it checkpoints at the step boundary and exits 75
                proc.send_signal(signal.SIGTERM)  # (its whole group would kill the data workers under it first)
            grace_end = time.monotonic() + args.grace
            while time.monotonic() < grace_end and any(proc.poll() is None for proc, _, _ in running.values()):
                time.sleep(1)
            for proc, _, _ in running.values():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # what is left of each run: workers, compile pools
                except ProcessLookupError:
                    pass
        while free and index < len(queue) and not stopped:
            lane = free.pop(0)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": devices[lane // args.jobs]}
            command = ["taskset", "-c", ",".join(map(str, cores[lane])), *queue[index]]
            with open(logs / f"run{index:03d}.log", "w") as console:
                proc = subprocess.Popen(command, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
            running[lane] = (proc, index, time.monotonic())
            log.info("start run%03d on GPU %s: %s", index, devices[lane // args.jobs], shlex.join(queue[index][3:]))
            index += 1
        for lane, (proc, i, t0) in list(running.items()):
            if proc.poll() is not None:
                results.append((i, proc.returncode, time.monotonic() - t0))
                log.info("end   run%03d exit %s after %.0f s", i, proc.returncode, time.monotonic() - t0)
                del running[lane]
                free.append(lane)
        time.sleep(1)
    failed = [i for i, code, _ in results if code != 0]
    log.info(
        "%d run(s) ended (%d non-zero), %d not started, %.0f s", len(results), len(failed), len(queue) - index, time.monotonic() - start
    )
    return 1 if failed or index < len(queue) else 0


if __name__ == "__main__":
    sys.exit(main())
