"""Lightning's FSDPStrategy with the fit's root wrapper kept for a validate/test after ``fit``.

Lightning wraps the LightningModule in a root ``FullyShardedDataParallel`` when fitting.  A later
``trainer.validate`` sees the already-wrapped blocks inside the module, skips wrapping and drops the root, so the
root's own parameters (embedding, final norm, head) stay sharded 1-D views and the forward fails with
"'weight' must be 2-D" (Lightning-AI/pytorch-lightning#19015).  This strategy hands the same root back instead.
"""

from __future__ import annotations

from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.nn import Module


class RootKeepingFSDPStrategy(FSDPStrategy):
    """:class:`~lightning.pytorch.strategies.FSDPStrategy` whose evaluation after ``fit`` runs through the fit's root
    FSDP wrapper of the same LightningModule."""

    _root: FullyShardedDataParallel | None = None

    def _setup_model(self, model: Module) -> Module:
        if self._root is not None and self._root.module is model:
            return self._root
        wrapped = super()._setup_model(model)
        if isinstance(wrapped, FullyShardedDataParallel):
            self._root = wrapped
        return wrapped
