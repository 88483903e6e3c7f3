"""Top-kernel tables of a training step (torch.profiler), shared by the throughput benchmarks.

from kernel_profile import profile_table  # bench/speed/ is the scripts' directory
print(profile_table(step, "cuda", classes=(("attention", ("flash", "fmha")), ("gemm", ("gemm", "nvjet")))))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

KernelClasses = Sequence[tuple[str, Sequence[str]]]  # (class, name fragments); the first class with a fragment in the name wins


def kernel_class(name: str, classes: KernelClasses) -> str:
    low = name.lower()
    return next((cls for cls, parts in classes if any(p in low for p in parts)), "other")


def profile_table(step: Callable[[], object], device: str, classes: KernelClasses, steps: int = 3, top: int = 25) -> str:
    """Device time per step by kernel class and the ``top`` kernels, over ``steps`` calls of ``step``
    (on CPU: the leaf ``aten::`` ops by self CPU time)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        times = {e.key: (e.self_device_time_total, e.count) for e in prof.key_averages() if e.device_type == DeviceType.CUDA}
    else:
        times = {e.key: (e.self_cpu_time_total, e.count) for e in prof.key_averages() if e.key.startswith("aten::")}
    total = sum(t for t, _ in times.values()) or 1.0
    by_class: dict[str, float] = {}
    for name, (t, _) in times.items():
        by_class[kernel_class(name, classes)] = by_class.get(kernel_class(name, classes), 0.0) + t
    ms = lambda us: us / 1e3 / steps  # noqa: E731 — profiler times are µs over all profiled steps
    lines = [f"{'kernel class':<50}{'ms/step':>9}{'share':>8}"]
    lines += [f"{cls:<50}{ms(t):>9.2f}{t / total:>8.1%}" for cls, t in sorted(by_class.items(), key=lambda kv: -kv[1])]
    lines += [f"{'total device time':<50}{ms(total):>9.2f}", "", f"{'kernel':<100}{'calls':>6}{'ms/step':>9}{'share':>8}"]
    for name, (t, count) in sorted(times.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{name[:98]:<100}{count // steps:>6}{ms(t):>9.2f}{t / total:>8.1%}")
    return "\n".join(lines)
