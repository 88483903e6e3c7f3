"""The torch operations a block of code dispatches, for tests that check where work runs."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class TorchOps(TorchDispatchMode):
    """``with TorchOps() as ops: ...`` — ``ops.all``: the name of every aten op dispatched, in order; ``ops.on_cpu``:
    those with a CPU tensor among their arguments (host work)."""

    def __init__(self):
        super().__init__()
        self.all, self.on_cpu = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.all.append(str(func))
        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in (*args, *kwargs.values())):
            self.on_cpu.append(str(func))
        return func(*args, **kwargs)
