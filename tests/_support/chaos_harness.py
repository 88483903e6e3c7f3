"""Chaos over a whole grid: tiny CPU runs of both families (LLaMA and ViT, three placements, two seeds each) run
through ``mixbench run -m ... --resume`` (``resume=auto``, a checkpoint every 2 steps), one grid process per family,
relaunched until the grid is complete while faults strike at seeded random moments:

* SIGKILL and SIGTERM during a training step, a validation or a checkpoint write (:mod:`faults`);
* the newest checkpoint of an unfinished run truncated (with its twin ``last.ckpt``);
* a finished record corrupted (``mixbench table`` and ``mixbench reclassify`` must name it and go on);
* the disk filled once (the results folder is a tmpfs where root can mount one, and each grid's runs folder a tmpfs
  of its own inside it: the grid that fills its disk is the only one to write there, so the other grid's writes can
  neither meet that full disk nor give space back on it — a checkpoint write of the other grid that meets ENOSPC
  removes its temporary file, and the megabytes it frees let the filled grid's next checkpoint through; else ENOSPC
  injected into a checkpoint write);
* a second writer (``mixbench run --config RUN/config.yaml run_dir=RUN resume=auto``) started on a run folder while
  its grid trains in it (the grid process waits at a step meanwhile).

Then every record must equal the undisturbed grid's (run beside it, into another folder) exactly, ``mixbench table``
must show the same table, and every process must have ended with exit 0, 2 or 75 and one line saying why (none for
0), never a traceback — or by the SIGKILL it was sent.

Processes are forked from a server that has imported mixbench, Lightning and torch already (multiprocessing's
forkserver): a start costs a fraction of a second instead of the ~10 s of those imports on a small machine; each is
still a process of its own (pid, file locks, signals).

``python tests/_support/chaos_harness.py --faults 200`` runs it from the command line and prints its summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script: the test suite's folder on sys.path, as pytest's ``pythonpath`` puts it, in place
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # of this one's (whose cuda.py would hide torch's ``cuda``)

from _support.faults import TmpfsUnavailable, run_command, tmpfs  # noqa: E402 (after the script's sys.path)
from mixbench.core.errors import RESUMABLE_EXIT  # noqa: E402
from mixbench.results.records import load_records
from mixbench.training.checkpointing import checkpoint_problem, checkpoint_step
from mixbench.training.run import FINISHED

CELLS = ["norm=pre,post,mix", "seed=0,1"]
RUNS_PER_GRID = 3 * 2
FAMILIES = {  # task → its grid's own settings (each grid: 3 placements × 2 seeds)
    "llama_lm": ["model=llama_debug", "model.vocab_size=8192", "data.seq_len=16", "data.batch_size=4"],
    "vit_tiny": ["model.num_layers=2", "model.hidden_size=32", "model.num_heads=2", "data.batch_size=8"],
}
SIGNALS = ("SIGKILL", "SIGTERM")  # planned two kills for each SIGTERM
MOMENT_KINDS = ("step", "validation", "write")
LANE_FAULTS = (*SIGNALS, "full disk", "second writer")  # faults of a grid process, at a moment of its training
DISK_MB = 640  # the tmpfs results folder, and each grid's runs folder (a tmpfs inside it): every checkpoint of a grid fits
# what the process server imports once (by name: its sys.path is the interpreter's own, without tests/)
PRELOAD = ["mixbench.cli.app", "mixbench.training.run", "mixbench.grids.runner", "mixbench.families.lm", "mixbench.families.vision"]


def validation_every(steps: int) -> int:
    """Steps between validations: two in a short run, every 6 steps in a long one."""
    return max(1, min(steps // 2, 6))


def grid(task: str, steps: int, results: Path) -> list[str]:
    """``mixbench`` arguments of one family's grid into ``results``: ``steps`` steps, :func:`validation_every`."""
    return [
        "run",
        "-m",
        f"task={task}",
        *FAMILIES[task],
        *CELLS,
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={validation_every(steps)}",
        "trainer.limit_val_batches=1",
        "checkpoint.every_n_steps=2",
        "checkpoint.keep_last=2",
        "trainer.deterministic=true",
        "trainer.enable_progress_bar=false",
        "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
        f"results_dir={results}",
        "--resume",
    ]


def cell_count() -> int:
    return len(FAMILIES) * RUNS_PER_GRID


@dataclass
class Launch:
    """One process: its ``mixbench`` arguments, the faults it carries, its log."""

    argv: list[str]
    faults: list[dict]
    log: Path
    process: multiprocessing.Process

    def fired(self) -> list[dict]:
        return [fault for fault in self.faults if Path(fault["fired"]).exists()]

    def killed(self) -> bool:
        """Whether it died of the SIGKILL it carried."""
        return self.process.exitcode == -signal.SIGKILL and any(f["action"] == "SIGKILL" for f in self.fired())

    @property
    def running(self) -> bool:
        return self.process.exitcode is None

    @property
    def returncode(self) -> int | None:
        """The exit status (``-N``: died of signal N), as :class:`subprocess.Popen`'s."""
        return self.process.exitcode

    def output(self) -> str:
        """What the process wrote (stdout and stderr)."""
        return self.log.read_text(errors="replace")


class Launcher:
    """Starts ``mixbench`` processes forked from a server with mixbench imported (see the module docstring)."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOAD)
        self.started = 0

    def start(self, argv: list[str], faults: list[dict] = (), threads: int = 1) -> Launch:
        """``mixbench ARGV`` in a new process on ``threads`` torch threads, with ``faults`` (see :func:`run_command`)."""
        self.started += 1
        log = self.logs / f"{self.started:04d}.log"
        faults = [{**fault, "fired": str(log.with_suffix(f".fired{i}"))} for i, fault in enumerate(faults)]
        process = self.context.Process(target=run_command, args=(argv, faults, str(log), threads))
        process.start()
        return Launch(argv, faults, log, process)

    def run(self, argv: list[str], faults: list[dict] = (), threads: int = 1, timeout: float | None = None) -> Launch:
        """:meth:`start`, then wait for the process to end (killed, and the test failed, after ``timeout`` seconds)."""
        launch = self.start(argv, faults, threads)
        launch.process.join(timeout)
        if launch.running:
            launch.process.kill()
            launch.process.join()
            raise AssertionError(f"mixbench {' '.join(argv[:3])} ... did not end within {timeout} s: {launch.log}")
        return launch


def stop_lines(text: str) -> list[str]:
    """The lines of a process's log that say why it stopped: errors, and a preemption's warning."""
    return [line for line in text.splitlines() if line.startswith("ERROR ") or " preempted by " in line]


def stop_problems(launch: Launch, expected: tuple[int, ...] = (0, 2, RESUMABLE_EXIT)) -> list[str]:
    """What is wrong with how ``launch`` ended: an exit status outside ``expected`` (a SIGKILL only if it was its
    fault), a traceback, or not exactly one line saying why it stopped (none after exit 0)."""
    code, text = launch.process.exitcode, launch.log.read_text(errors="replace")
    problems = [f"{launch.log}: a traceback"] if "Traceback" in text else []
    if launch.killed():
        return problems
    if code not in expected:
        problems.append(f"{launch.log}: exit status {code}")
    lines = stop_lines(text)
    if len(lines) != (0 if code == 0 else 1):
        problems.append(f"{launch.log}: exit {code} with {len(lines)} stop lines: {lines[:3]}")
    return problems


def plan(faults: int, rng: random.Random) -> list[str]:
    """The faults to inject, in seeded random order: a tenth each second writers and truncations, a fiftieth corrupt
    records (at least one of each), one full disk, and signals for the rest, about two SIGKILLs for each SIGTERM.  The
    kinds are fixed here, not drawn as the grid goes (what it meets first depends on timing), and the first fault of
    every kind but SIGKILL goes somewhere in the first third (the first five slots, for a plan shorter than 15): the grid
    may complete before the last faults come, and each kind must have fired."""
    others = {"second writer": max(1, faults // 10), "truncation": max(1, faults // 10), "corrupt record": max(1, faults // 50)}
    kinds = [kind for kind, n in others.items() for _ in range(n - 1)]
    signals = max(0, faults - 2 - len(others) - len(kinds))  # besides the one SIGTERM placed early
    kinds += [("SIGKILL", "SIGKILL", "SIGTERM")[i % 3] for i in range(signals)]
    rng.shuffle(kinds)
    firsts = [*others, "full disk", "SIGTERM"]
    rng.shuffle(firsts)
    slots = sorted(rng.sample(range(max(len(firsts), faults // 3)), len(firsts)))
    for slot, kind in zip(slots, firsts):  # in ascending order: each lands at its slot of the final list
        kinds.insert(slot, kind)
    return kinds


@dataclass
class Lane:
    """One family's grid and its current process."""

    task: str
    argv: list[str]
    launch: Launch | None = None
    done: bool = False


@dataclass
class Report:
    """The faults that fired, by kind; the records equal to the undisturbed grid's; what went wrong."""

    faults: Counter = field(default_factory=Counter)
    exact: int = 0
    total: int = 0
    launches: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def injected(self) -> int:
        return sum(self.faults.values())

    def summary(self) -> str:
        names = ("SIGKILL", "SIGTERM", "truncation", "full disk", "corrupt record", "second writer")
        counts = ", ".join(f"{self.faults[n]} {n}{'s' if self.faults[n] != 1 else ''}" for n in names)
        return f"{counts}; {self.exact}/{self.total} records exact ({self.launches} processes, {self.seconds:.0f} s)"


class Chaos:
    """The harness: ``Chaos(folder, faults, seed, steps).run()`` returns a :class:`Report`."""

    def __init__(self, folder: Path, faults: int, seed: int = 0, steps: int = 6):
        self.folder, self.steps = Path(folder), steps
        self.rng = random.Random(seed)
        self.queue = plan(faults, self.rng)
        self.results, self.reference = self.folder / "results", self.folder / "reference"
        self.launcher = Launcher(self.folder / "logs")
        self.report = Report()
        self.real_disk = False

    # ------------------------------------------------------------------ the grid, relaunched until complete

    def run(self) -> Report:
        t0 = time.monotonic()
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(tmpfs(self.results, DISK_MB))
                for task in FAMILIES:  # a disk of its own for each grid: only its process fills it, or frees space on it
                    stack.enter_context(tmpfs(self.disk(task), DISK_MB))
                self.real_disk = True
            except TmpfsUnavailable:
                self.results.mkdir(parents=True, exist_ok=True)
            references = [self.launcher.start(grid(task, self.steps, self.reference)) for task in FAMILIES]
            lanes = [Lane(task, grid(task, self.steps, self.results)) for task in FAMILIES]
            limit = 4 * len(self.queue) + 20
            while not all(lane.done for lane in lanes) and self.launcher.started < limit:
                for lane in lanes:
                    self.step(lane)
                time.sleep(0.05)
            for launch in references:
                launch.process.join()
                self.report.problems += stop_problems(launch, expected=(0,))
            if self.launcher.started >= limit:
                self.report.problems.append(f"the grid was not complete after {limit} processes")
            self.verify()
        self.report.launches, self.report.seconds = self.launcher.started, time.monotonic() - t0
        return self.report

    def step(self, lane: Lane) -> None:
        """Look after one grid process: serve its pause, or, once it ended, check it and start the next."""
        launch = lane.launch
        if launch is not None and launch.running:
            for fault in launch.faults:
                if fault["action"] == "pause" and Path(fault["path"]).exists():
                    self.second_writer(launch, Path(fault["path"]))
            return
        if lane.done:
            return
        if launch is not None:
            self.ended(lane, launch)
            if lane.done:
                return
        lane.launch = self.launcher.start(lane.argv, self.next_faults(lane))

    def ended(self, lane: Lane, launch: Launch) -> None:
        """Check how ``launch`` ended, count the faults it survived, put back those it ended before."""
        self.report.problems += stop_problems(launch)
        fired = launch.fired()
        for fault in fired:
            if fault["kind"] in SIGNALS:
                self.report.faults[fault["kind"]] += 1
            elif fault["kind"] == "full disk":
                self.report.faults["full disk"] += 1
                if fault["path"] is not None:
                    (Path(fault["path"]) / "ballast").unlink(missing_ok=True)  # space freed once the process stopped
                if launch.process.exitcode != RESUMABLE_EXIT or "no space left" not in launch.log.read_text():
                    self.report.problems.append(f"{launch.log}: the full disk did not stop it with exit {RESUMABLE_EXIT}")
        self.queue[:0] = [fault["kind"] for fault in launch.faults if fault not in fired]
        lane.done = launch.process.exitcode == 0 and len(self.finished(lane.task)) == RUNS_PER_GRID

    # ------------------------------------------------------------------ faults

    def next_faults(self, lane: Lane) -> list[dict]:
        """Apply the queue's faults between processes (truncations, corrupt records) that apply to ``lane`` now, and
        return the faults of its next process: second writers (the process goes on after them) up to one that stops
        it (a signal, a full disk); none when the queue is empty."""
        deferred, faults = [], []
        while self.queue and not (faults and faults[-1]["kind"] != "second writer"):
            kind = self.queue.pop(0)
            if kind in LANE_FAULTS:
                faults.append(self.lane_fault(kind, lane))
            elif not (self.truncate(lane) if kind == "truncation" else self.corrupt(lane)):
                deferred.append(kind)  # nothing to apply it to yet
        self.queue[:0] = deferred
        return faults

    def lane_fault(self, kind: str, lane: Lane) -> dict:
        """A fault at the n-th moment of its kind in the next process, n drawn so that the faults left spread over the
        steps left (a process may die before it trains a step)."""
        steps_left = (RUNS_PER_GRID - len(self.finished(lane.task))) * self.steps
        faults_left = sum(k in LANE_FAULTS for k in self.queue) / len(FAMILIES) + 1
        span = max(1, min(2 * self.steps, round(steps_left / faults_left)))
        if kind in SIGNALS:
            moment, action, path = self.rng.choice(MOMENT_KINDS), kind, None
        elif kind == "full disk":
            # a fill at a step: the next write on that disk is the run's next checkpoint (every 2 steps, the last step
            # among them: the runs' steps are even), bigger than the FILL_LEAVE bytes it leaves, and only this process
            # writes to (or frees space on) its grid's own disk until it stops
            moment, action, path = ("step", "fill", str(self.disk(lane.task))) if self.real_disk else ("write", "no_space", None)
        else:
            moment, action, path = "step", "pause", str(self.folder / f"pause-{self.launcher.started + 1}-{len(self.queue)}")
        per_step = {"step": 1, "validation": 1 / validation_every(self.steps), "write": 1}[moment]  # a checkpoint: 2 writes
        return {"kind": kind, "moment": moment, "nth": self.rng.randint(1, max(1, round(span * per_step))), "action": action, "path": path}

    def second_writer(self, launch: Launch, marker: Path) -> None:
        """While ``launch`` waits at a step (until ``marker`` is gone), start ``mixbench run`` on the run folder it
        holds: exit 2, naming it."""
        pid = launch.process.pid
        held = [p.parent for p in self.results.rglob(".run.holder") if json.loads(p.read_text()).get("pid") == pid]
        second = self.launcher.run(["run", "--config", str(held[0] / "config.yaml"), f"run_dir={held[0]}", "resume=auto"])
        problems = stop_problems(second, expected=(2,))
        if not problems and f"pid {pid}" not in stop_lines(second.log.read_text())[0]:
            problems.append(f"{second.log}: the second writer's line does not name pid {pid}")
        self.report.problems += problems
        self.report.faults["second writer"] += 1
        marker.unlink()

    def truncate(self, lane: Lane) -> bool:
        """Truncate the newest checkpoint (and ``last.ckpt`` of the same step) of an unfinished run of ``lane`` that
        has an older intact one; False if none has."""
        for folder in self.unfinished(lane.task):
            stepped = sorted((checkpoint_step(p), p) for p in (folder / "checkpoints").glob("*step=*.ckpt"))
            if len(stepped) < 2 or checkpoint_problem(stepped[-2][1]) is not None:
                continue
            (step, newest), last = stepped[-1], folder / "checkpoints" / "last.ckpt"
            twin = last.exists() and checkpoint_problem(last) is None and checkpoint_step(last) == step
            for path in [newest, last] if twin else [newest]:
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
            self.report.faults["truncation"] += 1
            return True
        return False

    def corrupt(self, lane: Lane) -> bool:
        """Cut a finished record of ``lane`` short; ``mixbench table`` and ``mixbench reclassify`` must name it and
        finish; the grid's next process runs it again (from its last checkpoint).  False if none is finished."""
        finished = self.finished(lane.task)
        if not finished:
            return False
        path = self.rng.choice(finished)
        path.write_bytes(path.read_bytes()[:200])
        self.report.faults["corrupt record"] += 1
        for argv in (
            ["table", "--results-dir", str(self.results), "--format", "csv"],
            ["reclassify", "--results-dir", str(self.results), "--dry-run"],
        ):
            reader = self.launcher.run(argv)
            said = [line for line in reader.log.read_text().splitlines() if line.startswith("WARNING ") and str(path) in line]
            if reader.process.exitcode != 0 or not said:
                self.report.problems.append(f"{reader.log}: {argv[0]} did not name the corrupt record {path} and finish")
        return True

    # ------------------------------------------------------------------ the grid's state and the final check

    def disk(self, task: str) -> Path:
        """The folder ``task``'s grid puts its runs in (``<results>/runs/<task>``): a tmpfs of its own, where one is mounted."""
        return self.results / "runs" / task

    def runs(self, task: str) -> list[Path]:
        return sorted(p.parent for p in self.disk(task).glob("*/*/*/config.yaml"))

    def finished(self, task: str) -> list[Path]:
        """The readable finished records of ``task``'s grid."""
        found = []
        for folder in self.runs(task):
            try:
                status = json.loads((folder / "record.json").read_text()).get("status")
            except (OSError, ValueError):
                continue
            if status in FINISHED:
                found.append(folder / "record.json")
        return found

    def unfinished(self, task: str) -> list[Path]:
        done = {p.parent for p in self.finished(task)}
        return [folder for folder in self.runs(task) if folder not in done]

    def verify(self) -> None:
        """Every cell once, readable, completed, with the undisturbed run's validation loss exactly; the same table."""
        ours, problems = load_records(self.results)
        theirs, _ = load_records(self.reference)
        self.report.problems += [f"unreadable record at the end: {p}" for p in problems]

        def key(record):
            return record["task"], record["norm"]["label"], record["seed"]

        counts = Counter(key(r) for r in ours)
        self.report.problems += [f"{k}: {n} records" for k, n in counts.items() if n != 1]
        reference = {key(r): r for r in theirs}
        self.report.total = len(reference)
        if len(reference) != cell_count():
            self.report.problems.append(f"the undisturbed grid has {len(reference)} records, not {cell_count()}")
        for record in ours:
            if record["status"] != "completed":
                self.report.problems.append(f"{record['_path']}: {record['status']}")
            elif key(record) in reference and record["metrics"]["val/loss"] == reference[key(record)]["metrics"]["val/loss"]:
                self.report.exact += 1
        tables = [self.table(folder) for folder in (self.results, self.reference)]
        if tables[0] != tables[1]:
            self.report.problems.append(f"mixbench table differs from the undisturbed grid's:\n{tables[0]}\n---\n{tables[1]}")

    def table(self, folder: Path) -> str:
        out = self.folder / f"{folder.name}-table.csv"
        launch = self.launcher.run(["table", "--results-dir", str(folder), "--format", "csv", "--out", str(out)])
        self.report.problems += stop_problems(launch, expected=(0,))
        return re.sub(r"\s+$", "", out.read_text()) if out.exists() else ""


def main() -> int:
    parser = argparse.ArgumentParser(description="chaos over a grid of tiny runs; prints the faults injected and survived")
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps of each run")
    parser.add_argument("--folder", type=Path, help="where the grids, logs and tables go (default: a new temporary folder)")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="chaos-"))
    report = Chaos(folder, args.faults, args.seed, args.steps).run()
    for problem in report.problems:
        print("problem:", problem)
    print(report.summary())
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
