"""Preemption: on SIGTERM, or SLURM's pre-timeout signal (SIGUSR1, ``sbatch --signal=USR1@90``), finish the optimizer
step in flight, write an atomic checkpoint and stop with :class:`Preempted` (``mixbench run`` exits with
:data:`PREEMPTED_EXIT`); on SIGUSR1 inside a SLURM job the job is also requeued, and its next start continues with
``resume=auto``.

Ctrl-C (SIGINT) stops the same way — the step in flight finishes, its checkpoint is written — but as
:class:`Interrupted`: exit status :data:`INTERRUPTED_EXIT` (130, as a shell reports a Ctrl-C) and status
``interrupted`` in the record.  Outside the training loop (data set-up, model build, the final validation)
:class:`InterruptHandler`, installed for the whole run, stops the run where it is, without a new checkpoint.  Once a
run is stopping, a further Ctrl-C is logged and ignored, so that the checkpoint and the record are written whole
(``kill -9`` still ends it at once; checkpoint writes are atomic, so the resume then starts from the newest complete
one).

Lightning's own SLURM handler (``SLURMEnvironment(auto_requeue=True)``) saves from inside the signal handler, at
whatever point of the step the signal arrives; this callback sets a flag there and acts at the next step boundary —
the point where ``ModelCheckpoint`` saves — so a resumed run continues exactly.  Its handlers replace Lightning's for
the training loop (Lightning's SIGTERM handler stops after any micro-batch, even inside a gradient accumulation) and
Lightning's teardown restores the ones from before ``fit``.

Several ranks agree whether any of them got a signal every ``agree_every_n_steps`` optimizer steps (the strategy's
``reduce_boolean_decision``: a flag on the GPU, read back, so the host waits for the GPU there); one rank decides at
every step without any wait.  Lightning's own per-batch SIGTERM broadcast under DDP (a GPU flag read back every batch,
Lightning-AI/pytorch-lightning#21487) is switched off for the training loop: its flag is only set by Lightning's SIGTERM
handler, which this callback replaces there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..core.errors import INTERRUPTED_EXIT, RESUMABLE_EXIT

log = logging.getLogger(__name__)
PREEMPTED_EXIT = RESUMABLE_EXIT  # 75, sysexits' EX_TEMPFAIL: stopped on request; the same command (resume=auto) continues
SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
AGAIN = "Ctrl-C again: ignored, the run is already stopping (its checkpoint and record are being written; kill -9 ends it at once)"


class Preempted(Exception):
    """The run stopped on a preemption signal; ``checkpoint`` (None: stopped outside a training step) holds its state.
    ``status``: the record's status; ``exit_status``: ``mixbench run``'s; ``note``: the record's entry that says how
    it stopped."""

    status, exit_status, note, verb = "failed", PREEMPTED_EXIT, "preempted", "preempted"

    def __init__(self, signame: str, step: int | None, checkpoint: Path | None, requeued: bool):
        where = f"checkpoint {checkpoint}" if checkpoint else "no new checkpoint (stopped outside a training step)"
        super().__init__(
            f"{self.verb} by {signame} "
            + (f"at step {step}" if step is not None else "before training")
            + f": {where}; "
            + ("the SLURM job was requeued" if requeued else "run it again with resume=auto to continue")
        )
        self.signame, self.step, self.checkpoint, self.requeued = signame, step, checkpoint, requeued


class Interrupted(Preempted):
    """The run stopped on Ctrl-C (SIGINT): recorded as ``interrupted``, exit status :data:`INTERRUPTED_EXIT`."""

    status, exit_status, note, verb = "interrupted", INTERRUPTED_EXIT, "interrupted", "interrupted (Ctrl-C)"


def stop_for(signum: int | None) -> type[Preempted]:
    """The stop a signal asks for: :class:`Interrupted` for SIGINT, :class:`Preempted` for the others."""
    return Interrupted if signum == signal.SIGINT else Preempted


class InterruptHandler:
    """The SIGINT handler of a run (:func:`interrupts_stop`): the first Ctrl-C raises :class:`Interrupted` where the
    run is (no new checkpoint; inside the training loop :class:`PreemptionCheckpoint` takes SIGINT over and stops at
    the step's end instead), later ones are logged and ignored while the run stops.  A forked process (a DataLoader
    worker) ignores it: the run stops its workers.  ``step()``: the optimizer step it stopped at (the run sets it once
    it has a trainer)."""

    def __init__(self):
        self.step, self.pid, self.stopping = lambda: None, os.getpid(), False

    def __call__(self, signum, frame) -> None:
        if os.getpid() != self.pid:
            return
        if self.stopping:
            log.warning(AGAIN)
            return
        self.stopping = True
        raise Interrupted("SIGINT", self.step(), None, False)


@contextlib.contextmanager
def interrupts_stop() -> Iterator[InterruptHandler | None]:
    """While the block runs (in the main thread; elsewhere signals cannot be handled), Ctrl-C stops the run through an
    :class:`InterruptHandler`; the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    handler = InterruptHandler()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)


def preemption_note(err: BaseException) -> dict:
    """The record's ``preempted`` (``interrupted`` for Ctrl-C) entry for an error that is such a stop (empty for any
    other error)."""
    if isinstance(err, Preempted):
        return {
            err.note: {
                "signal": err.signame,
                "step": err.step,
                "checkpoint": str(err.checkpoint) if err.checkpoint else None,
                "requeued": err.requeued,
            }
        }
    if isinstance(err, SIGTERMException):  # Lightning's own handler stopped the run (a SIGTERM before training started)
        return {"preempted": {"signal": "SIGTERM", "step": None, "checkpoint": None, "requeued": False}}
    return {}


def requeue_slurm_job() -> bool:
    """``scontrol requeue`` this SLURM job (an array task by its array id), as Lightning's auto-requeue does."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if done.returncode:
        log.warning("scontrol requeue %s failed: %s", job, done.stderr.strip())
    return done.returncode == 0


def silence_sigterm_broadcast(trainer) -> None:
    """Turn off the training loop's per-batch SIGTERM broadcast (Lightning >= 2.6 under DDP: a flag tensor on the GPU,
    broadcast and read back with ``.item()`` before every batch, which makes the host wait for the GPU each step)."""
    loop = trainer.fit_loop.epoch_loop
    if hasattr(loop, "_broadcast_sigterm_tensor"):
        loop._broadcast_sigterm_tensor = lambda: None


class PreemptionCheckpoint(Callback):
    """Checkpoint ``<checkpoint_dir>/epoch=E-step=S.ckpt`` and raise :class:`Preempted` (:class:`Interrupted` for
    SIGINT) at the end of the optimizer step a preemption signal or Ctrl-C arrived in (micro-batches of gradient
    accumulation run to the step's end).  With several ranks, a signal to any rank stops every rank at the next
    multiple of ``agree_every_n_steps``."""

    def __init__(self, checkpoint_dir: Path, agree_every_n_steps: int = 10):
        if agree_every_n_steps < 1:
            raise ValueError(f"agree_every_n_steps must be >= 1, got {agree_every_n_steps}")
        self.checkpoint_dir, self.agree_every = Path(checkpoint_dir), agree_every_n_steps
        self.received: int | None = None
        self._previous: dict = {}
        self._step_before = -1

    def _notice(self, signum, frame) -> None:
        if os.getpid() != self._pid:  # a DataLoader worker forked during training: the run stops its workers
            return
        if self.received is None:
            self.received = signum
        elif signum == signal.SIGINT:
            log.warning(AGAIN)

    def on_train_start(self, trainer, pl_module) -> None:
        """Replace Lightning's handlers (installed just before), which would stop in the middle of an accumulation."""
        if threading.current_thread() is threading.main_thread():
            self._pid, self._handler = os.getpid(), self._notice
            self._previous = {s: signal.signal(s, self._handler) for s in SIGNALS}
            if trainer.world_size > 1:  # Lightning's broadcast of a flag that only its replaced handler sets
                silence_sigterm_broadcast(trainer)

    def stop_now(self, trainer) -> bool:
        """Whether to stop at this optimizer step; every rank gets the same answer at the same step."""
        if trainer.world_size > 1 and trainer.global_step % self.agree_every:
            return False
        return self._any_rank_received(trainer)

    def _any_rank_received(self, trainer) -> bool:
        if trainer.world_size == 1:
            return self.received is not None
        return trainer.strategy.reduce_boolean_decision(self.received is not None, all=False)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) is self._handler:
                signal.signal(signum, handler)
            if isinstance(handler, InterruptHandler) and self.received is not None:
                handler.stopping = True  # a stop is under way: a Ctrl-C during its teardown is not another stop
        self._previous = {}

    def on_train_end(self, trainer, pl_module) -> None:
        """Restore the handlers; a signal that came after the last step's end (in the last validation) stops the run
        here, at that step's checkpoint, like one inside training."""
        self._restore()
        if self._any_rank_received(trainer):
            self._checkpoint_and_stop(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._restore()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._step_before = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._step_before:  # inside a gradient accumulation
            return
        if self.stop_now(trainer):
            self._checkpoint_and_stop(trainer)

    def _checkpoint_and_stop(self, trainer) -> None:
        path = self.checkpoint_dir / f"epoch={trainer.current_epoch}-step={trainer.global_step}.ckpt"
        trainer.save_checkpoint(path)
        signame = signal.Signals(self.received).name if self.received else "a signal to another rank"
        requeued = self.received == signal.SIGUSR1 and SLURMEnvironment.detect() and trainer.is_global_zero and requeue_slurm_job()
        log.info("%s: checkpoint %s written at step %d", signame, path, trainer.global_step)
        raise stop_for(self.received)(signame, trainer.global_step, path, requeued)
