"""The Lightning callback that marks CUDA-graph step boundaries for ``compile.mode`` ``reduce-overhead`` /
``max-autotune`` (why: :mod:`mixbench.training.compile`).  A module of its own so that the compile settings, which
the config checks and the family specs read, import no Lightning."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback


class CudaGraphStepMarker(Callback):
    """Marks each training and validation batch as a new CUDA-graph step (``torch.compiler.cudagraph_mark_step_begin``),
    so the graphs of the previous batch may reuse their memory and no output of theirs is read after it was overwritten."""

    def __init__(self):
        self.marks = 0

    def _mark(self) -> None:
        torch.compiler.cudagraph_mark_step_begin()
        self.marks += 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._mark()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._mark()
