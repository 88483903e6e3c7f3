"""Test helper: ``python kill_harness.py MOMENT STEP mixbench-run-args...`` runs ``mixbench run`` and SIGKILLs its own
process at MOMENT of optimizer step STEP: ``step`` (between forward and backward), ``validation`` (after the first
validation batch) or ``write`` (half-way through writing the checkpoint of that step).  ``MOMENT:SIGNAL`` (e.g.
``step:SIGTERM``) sends that signal instead of SIGKILL."""

import os
import signal
import sys

from lightning.pytorch.callbacks import Callback

import mixbench.training.checkpointing as checkpointing
import mixbench.training.run as train
from mixbench.cli.app import main

moment, _, signame = sys.argv[1].partition(":")
step, args = int(sys.argv[2]), sys.argv[3:]


def die() -> None:
    os.kill(os.getpid(), getattr(signal, signame or "SIGKILL"))


class KillAt(Callback):
    def on_before_backward(self, trainer, pl_module, loss):
        if moment == "step" and trainer.global_step == step:
            die()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if moment == "validation" and trainer.global_step == step:
            die()


if moment == "write":
    real_write = checkpointing._write

    def half_then_die(checkpoint, file):
        if checkpoint["global_step"] != step:
            return real_write(checkpoint, file)
        import io

        buffer = io.BytesIO()
        real_write(checkpoint, buffer)
        file.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        file.flush()
        die()

    checkpointing._write = half_then_die

build_trainer = train.build_trainer
train.build_trainer = lambda cfg, run_dir, callbacks, block_class=None: build_trainer(cfg, run_dir, [*callbacks, KillAt()], block_class)
sys.exit(main(["run", *args]))
