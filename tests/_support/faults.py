"""Test helper: faults injected into a ``mixbench run`` process at chosen moments of its training, and full disks.

* :func:`inject` runs an action (:func:`send`: a signal to this process, :func:`pause`, :func:`fill_disk`,
  :func:`no_space`) at a moment of training — ``step`` (between forward and backward), ``validation`` (after a
  validation batch) or ``write`` (half-way through writing a checkpoint) — of the optimizer steps a predicate picks
  (:func:`nth`: the n-th such moment of the process, across the runs of a grid).
* :func:`tmpfs` mounts a small RAM file system (root only) where a run can really fill its disk;
  :func:`fill_disk` leaves only a few bytes free on it; :func:`full_disk_at` makes every write to files of one name
  fail with ENOSPC (the same error, without root).
* :func:`run_command` is the body of a process the chaos harness starts (and the tests that fork a ``mixbench``
  process from its preloaded server): ``mixbench ARGV`` with faults described as dicts (:func:`fault_action`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

import mixbench.core.storage as storage
import mixbench.training.checkpointing as checkpointing
import mixbench.training.run as train
from mixbench.cli.app import main

MOMENTS = ("step", "validation", "write")


def send(signame: str) -> Callable[[], None]:
    """An action: send this process the signal ``signame`` (e.g. ``SIGKILL``, ``SIGTERM``)."""
    return lambda: os.kill(os.getpid(), getattr(signal, signame))


def no_space() -> None:
    """An action: fail with ENOSPC, as a write to a full disk does (at ``write``: half-way through the checkpoint)."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def pause(marker: Path) -> Callable[[], None]:
    """An action: create ``marker`` and wait (training stands still, the run folder stays locked) until it is removed."""

    def wait() -> None:
        marker.write_text(str(os.getpid()))
        while marker.exists():
            time.sleep(0.05)

    return wait


def nth(n: int) -> Callable[[int], bool]:
    """A predicate true on its ``n``-th call only (1-based): the n-th moment of a kind in this process."""
    calls = 0

    def counted(step: int) -> bool:
        nonlocal calls
        calls += 1
        return calls == n

    return counted


class _AtMoment(Callback):
    def __init__(self, moment: str, when: Callable[[int], bool], action: Callable[[], None]):
        self.moment, self.when, self.action = moment, when, action

    def on_before_backward(self, trainer, pl_module, loss):
        if self.moment == "step" and self.when(trainer.global_step):
            self.action()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self.moment == "validation" and self.when(trainer.global_step):
            self.action()


def _act_half_way_through_writes(when: Callable[[int], bool], action: Callable[[], None]) -> None:
    real_write = checkpointing._write

    def write(checkpoint, file):
        if not when(checkpoint["global_step"]):
            return real_write(checkpoint, file)
        buffer = io.BytesIO()
        real_write(checkpoint, buffer)
        data = buffer.getvalue()
        file.write(data[: len(data) // 2])
        file.flush()
        action()  # a SIGKILL ends the process here, half of the checkpoint written
        file.write(data[len(data) // 2 :])

    checkpointing._write = write


def inject(moment: str, when: Callable[[int], bool], action: Callable[[], None]) -> None:
    """From now on, in this process, run ``action()`` at every ``moment`` (one of :data:`MOMENTS`) of an optimizer step
    ``s`` with ``when(s)``; for ``write``, ``s`` is the step of the checkpoint being written."""
    if moment not in MOMENTS:
        raise ValueError(f"moment must be one of {MOMENTS}, got {moment!r}")
    if moment == "write":
        _act_half_way_through_writes(when, action)
        return
    build_trainer = train.build_trainer
    train.build_trainer = lambda cfg, run_dir, callbacks, block_class=None, **kwargs: build_trainer(
        cfg, run_dir, [*callbacks, _AtMoment(moment, when, action)], block_class, **kwargs
    )


class TmpfsUnavailable(RuntimeError):
    """A tmpfs cannot be mounted here (not root, or no mount permission); the message says why."""


@contextlib.contextmanager
def tmpfs(folder: Path, size_mb: int) -> Iterator[Path]:
    """``folder`` as a fresh tmpfs of ``size_mb`` MiB while the block runs (raises :class:`TmpfsUnavailable`)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        raise TmpfsUnavailable("mounting a tmpfs needs root and mount(8)")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode:
        raise TmpfsUnavailable(f"mount -t tmpfs failed: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill_disk(folder: Path, leave: int) -> Callable[[], None]:
    """An action: fill the file system of ``folder`` with ``<folder>/ballast`` until about ``leave`` bytes are free
    (remove the ballast to free the space again)."""

    def fill() -> None:
        ballast = folder / "ballast"
        with open(ballast, "ab") as f:
            while (free := shutil.disk_usage(folder).free) > leave:
                f.write(b"\0" * min(free - leave, 1 << 20))
                f.flush()

    return fill


class _FillingFile(io.FileIO):
    """A file whose writes fail with ENOSPC once it holds ``room`` bytes."""

    room = 0

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


@contextlib.contextmanager
def full_disk_at(name: str, room: int = 100) -> Iterator[None]:
    """While the block runs, the atomic writes of files called ``name`` (:mod:`mixbench.core.storage`) fail with ENOSPC
    after ``room`` bytes, as on a full disk."""

    def opener(path, mode="r", *args, **kwargs):
        if Path(path).name.startswith(name + storage.TMP_MARK):
            file = _FillingFile(path, mode.replace("b", ""))
            file.room = room
            return file
        return open(path, mode, *args, **kwargs)

    storage.open = opener
    try:
        yield
    finally:
        del storage.open


FILL_LEAVE = 256 * 1024  # bytes :func:`fill_disk` leaves free in a process's fault: less than any checkpoint needs


def fault_action(fault: dict) -> Callable[[], None]:
    """The action a fault (a dict: ``action`` is a signal name, ``pause``, ``fill`` or ``no_space``; ``path`` the
    marker of a pause or the folder of a fill) describes."""
    kind = fault["action"]
    if kind.startswith("SIG"):
        return send(kind)
    if kind == "pause":
        return pause(Path(fault["path"]))
    if kind == "fill":
        return fill_disk(Path(fault["path"]), FILL_LEAVE)
    if kind == "no_space":
        return no_space
    raise ValueError(f"unknown fault action {kind!r}")


def at_step(step: int) -> Callable[[int], bool]:
    """A predicate true at optimizer step ``step`` (as ``kill_harness.py`` picks its moment)."""
    return lambda s: s == step


def run_command(argv: list[str], faults: list[dict], log: str, threads: int = 1) -> None:
    """The body of a process the chaos harness starts: ``mixbench ARGV`` on ``threads`` torch threads, its stdout and
    stderr appended to ``log``, each of ``faults`` (dicts: ``moment``, ``nth`` or ``step``, the action, ``fired``)
    injected: its action runs at the n-th such moment (or at every such moment of optimizer step ``step``), after
    touching the file ``fired``."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in (1, 2):
        os.dup2(out, fd)
    os.close(out)
    torch.set_num_threads(threads)
    for fault in faults:
        sys.stderr.write(f"fault: {json.dumps(fault)}\n")
        when = nth(fault["nth"]) if "nth" in fault else at_step(fault["step"])
        inject(fault["moment"], when, _announced(fault_action(fault), Path(fault["fired"])))
    sys.exit(main(argv))


def _announced(action: Callable[[], None], fired: Path) -> Callable[[], None]:
    def act() -> None:
        fired.touch()
        action()

    return act
