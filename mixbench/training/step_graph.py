"""``cuda_graph_step``: the training step's forward and backward replayed from CUDA graphs.

Small models (the proxy grids' ViT-Ti and LLaMA-71M, ViT-S at a few thousand images a second) are host-bound: issuing
~800 kernels a step from Python costs more than the GPU needs to run them.  With the captured step, the LightningModule's
objective ``loss = objective(model, *inputs)`` (the model's forward and the loss, not the data's augmentation) is
captured once by ``torch.cuda.make_graphed_callables`` — one graph for the forward, one for the backward — and every
later step copies its batch into the graph's static inputs and replays both.  Everything else stays as Lightning runs
it, eagerly: Mixup/CutMix, the optimizer step (fused AdamW), gradient clipping, the EMA update, DDP's all-reduce (its
hooks fire as the replayed backward hands the gradients to autograd), logging, checkpoints.  The parameters and the
optimizer state are the same tensors before and after a checkpoint is restored, so ``resume=auto`` needs nothing
special: a resumed run captures again at its first step.

``cuda_graph_step=auto`` (default) captures where it can: a CUDA run, no FSDP, no float8 layers, no ``compile.mode`` of
its own CUDA graphs, one micro-batch per optimizer step; otherwise one log line says why and the run goes on uncaptured.
``true`` makes those cases an error; ``false`` never captures.  At run time, a batch of another shape than the captured
one (a last partial batch) runs eagerly, and a capture that fails (an operation that needs the host) logs one line and
leaves the whole run eager.

Capture details: the objective runs under its own autocast with the weight cache off (a cached cast would be freed
while the graph still reads it), the capture itself outside Lightning's autocast; the CUDA random state is restored
after the capture's warm-up passes, so drop path draws the same numbers as an uncaptured run would; every micro-step
hands the same gradient buffers to autograd, which is why accumulation over micro-batches is excluded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from omegaconf import DictConfig

from ..core.errors import ConfigError
from .compile import uses_cudagraphs
from .precision import FP8, runs_on_cuda
from .strategy import FSDP, accumulation_steps, world_size

log = logging.getLogger(__name__)

CAPTURE_SETTINGS = ("auto", True, False)
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def capture_obstacle(cfg: DictConfig) -> str | None:
    """Why the training step of ``cfg`` cannot be captured, or None when it can."""
    if not runs_on_cuda(cfg.trainer.accelerator):
        return "not a CUDA run"
    if cfg.trainer.strategy == FSDP:
        return "FSDP gathers and frees parameters inside the step"
    if cfg.trainer.precision == FP8:
        return "float8 layers (trainer.precision=fp8) are not captured"
    if cfg.get("activation_checkpointing", False):
        return "activation checkpointing recomputes the blocks inside the backward pass (not captured)"
    if uses_cudagraphs(cfg):
        return f"compile.mode={cfg.compile.mode} replays CUDA graphs of its own"
    if accumulation_steps(cfg.data.get("global_batch_size"), cfg.data.batch_size, world_size(cfg.trainer)) > 1:
        return "gradient accumulation over micro-batches (one captured backward writes one set of gradient buffers)"
    return None


def wants_capture(cfg: DictConfig) -> tuple[bool, str | None]:
    """``(capture?, why not)`` for ``cuda_graph_step``; ``true`` with an obstacle is a :class:`ConfigError`."""
    setting = cfg.cuda_graph_step
    if setting not in CAPTURE_SETTINGS:
        raise ConfigError(f"cuda_graph_step must be auto, true or false, got {setting!r}")
    if setting is False:
        return False, "cuda_graph_step=false"
    obstacle = capture_obstacle(cfg)
    if obstacle is not None and setting is True:
        raise ConfigError(f"cuda_graph_step=true, but {obstacle}; set cuda_graph_step=auto (captures where it can) or false")
    return obstacle is None, obstacle


def module_obstacle(module, datamodule) -> str | None:
    """Why this run's LightningModule and data cannot use the captured step, or None."""
    if not getattr(module, "has_objective", lambda: False)():
        return f"{type(module).__name__} has no capturable objective"
    if not getattr(datamodule, "static_shapes", True):
        return "the batches vary in shape (padded to their longest row)"
    return None


class _Objective(torch.nn.Module):
    """``objective(model, *inputs)`` as a module (its parameters are the model's), under its own autocast."""

    def __init__(self, model: torch.nn.Module, objective: Callable, autocast_dtype: torch.dtype | None):
        super().__init__()
        self.model, self.objective, self.autocast_dtype = model, objective, autocast_dtype

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast(
            "cuda", dtype=self.autocast_dtype or torch.float32, enabled=self.autocast_dtype is not None, cache_enabled=False
        ):
            return self.objective(self.model, *inputs)


class GraphedObjective:
    """Calls ``objective(model, *inputs)`` — from CUDA graphs for inputs of the shapes of the first call, eagerly
    otherwise.  The first call captures (three warm-up passes on a side stream, then the capture); ``status`` says
    what happened, for the run's record."""

    def __init__(self, model: torch.nn.Module, objective: Callable, precision: str | None):
        dtype = AUTOCAST_DTYPES.get(str(precision))
        self.eager = _Objective(model, objective, dtype)
        self.captured = _Objective(model, objective, dtype)
        self.shapes: tuple | None = None
        self.status = {"captured": False, "reason": "not captured yet", "eager_steps": 0}

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.shapes is None and self.status["reason"] == "not captured yet":
            self._capture(inputs)
        if self.shapes is not None and tuple((t.shape, t.dtype) for t in inputs) == self.shapes:
            return self.captured(*inputs).clone()  # the graph's output buffer is overwritten by its next replay
        if self.shapes is not None and self.status["eager_steps"] == 0:
            log.info(
                "cuda_graph_step: a batch of another shape than the captured one runs uncaptured (%s)", [tuple(t.shape) for t in inputs]
            )
        self.status["eager_steps"] += 1
        return self.eager(*inputs)

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> None:
        rng = torch.cuda.get_rng_state()
        samples = tuple(t.detach().clone() for t in inputs)
        try:
            with torch.autocast("cuda", enabled=False):  # Lightning's autocast caches casts; the objective brings its own
                torch.cuda.make_graphed_callables(self.captured, samples, num_warmup_iters=3, allow_unused_input=True)
        except Exception as err:  # an operation that cannot be captured: the run goes on eagerly
            torch.cuda.synchronize()
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            log.warning("cuda_graph_step: the training step could not be captured (%s); training goes on uncaptured", reason)
            self.status.update(reason=reason)
            return
        finally:
            torch.cuda.set_rng_state(rng)
        self.shapes = tuple((t.shape, t.dtype) for t in inputs)
        self.status.update(captured=True, reason=None, shapes=[list(t.shape) for t in inputs])
        log.info("cuda_graph_step: training forward and backward captured for inputs %s", self.status["shapes"])
