"""``profiler.kind``: Lightning's profilers, their report of ``fit`` written into the run folder as ``fit-profile.txt``
(``fit-profile-<local rank>.txt`` per rank with several ranks; a resumed run appends its report).

- ``simple``: wall seconds of every Lightning action (``run_training_batch``, ``[_TrainingEpochLoop].train_dataloader_next``,
  ``optimizer_step``, each callback hook …), mean and total over the run: where the host spends a step.
- ``pytorch``: ``torch.profiler``'s operator tables (CPU and, on a GPU, CUDA time) of ``profiler.active_steps`` training
  steps after ``profiler.skip_steps`` (compilation and warm-up left out): one sorted by device time on a GPU (what keeps
  the GPU busy; total host time on a CPU), one by self host time (what keeps the host from feeding the GPU: launches,
  synchronising waits).  ``profiler.trace=true`` also writes their timeline (``fit-profile*.pt.trace.json``, for
  Perfetto or chrome://tracing): when each operator ran on each host thread and each kernel on each CUDA stream.

Profiling slows the steps it records: a profiled run's throughput is not a benchmark number.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from ..core.errors import ConfigError

KINDS = ("simple", "pytorch")
REPORT = "profile"  # Lightning names the file <stage>-profile.txt
HOST_SORT_KEY = "self_cpu_time_total"


def check_profiler(settings: DictConfig, num_nodes: int = 1) -> None:
    """One error naming the fix for a ``profiler:`` setting that cannot work (run before anything is written)."""
    if settings.kind is not None and settings.kind not in KINDS:
        raise ConfigError(f"profiler.kind={settings.kind!r} is not one of {', '.join(KINDS)} (or null for none)")
    if settings.kind is not None and num_nodes > 1:
        raise ConfigError(
            f"profiler.kind={settings.kind} with trainer.num_nodes={num_nodes}: each node's ranks would write the same "
            "report files in the shared run folder; profile a one-node run"
        )
    if settings.trace and settings.kind != "pytorch":
        raise ConfigError(f"profiler.trace=true records torch.profiler's timeline: set profiler.kind=pytorch (not {settings.kind})")
    if settings.kind == "pytorch" and (settings.skip_steps < 0 or settings.active_steps < 1):
        raise ConfigError(
            f"profiler.skip_steps={settings.skip_steps} / active_steps={settings.active_steps}: need skip_steps >= 0 and active_steps >= 1"
        )


def make_profiler(settings: DictConfig, run_dir: Path, on_gpu: bool):
    """The Lightning profiler of ``settings`` (the ``profiler:`` config), or None when ``kind`` is null."""
    if settings.kind is None:
        return None
    if settings.kind == "simple":
        from lightning.pytorch.profilers import SimpleProfiler

        return SimpleProfiler(dirpath=run_dir, filename=REPORT, extended=True)
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    return _profiler_class()(
        dirpath=run_dir,
        filename=REPORT,
        export_to_chrome=bool(settings.trace),  # Lightning writes it as <filename>.<time>.pt.trace.json
        record_module_names=False,  # its per-module hooks would break the compiled model into graph pieces
        row_limit=40,
        sort_by_key="cuda_time_total" if on_gpu else "cpu_time_total",
        activities=activities,
        schedule=torch.profiler.schedule(wait=settings.skip_steps, warmup=1, active=settings.active_steps),
    )


def _profiler_class():
    """Lightning's ``PyTorchProfiler`` whose report adds the operators sorted by self host time."""
    from lightning.pytorch.profilers import PyTorchProfiler

    class HostAndDeviceProfiler(PyTorchProfiler):
        def summary(self) -> str:
            report = super().summary()
            if not report:
                return report
            table = self.function_events.key_averages().table(sort_by=HOST_SORT_KEY, row_limit=self._row_limit)
            return report + "\n" + self._stats_to_str({"records by self host time": table})

    return HostAndDeviceProfiler


def stop_profiling(trainer) -> None:
    """After ``fit``: the evaluation that follows runs unprofiled (the pytorch profiler's schedule is spent by then, and
    a second report would only repeat the first)."""
    from lightning.pytorch.profilers import PassThroughProfiler

    trainer.profiler = PassThroughProfiler()
