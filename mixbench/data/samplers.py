"""Samplers that give each DDP rank a disjoint, seed-determined part of a map-style dataset.

DataLoader workers then split a rank's batches among themselves, so every sample is read once.
"""

from __future__ import annotations

import torch
from torch.utils.data import Sampler

from ..core.errors import ConfigError


class EpochShuffleSampler(Sampler[int]):
    """Epoch ``e`` visits ``randperm(n, seed + e)``; rank ``r`` of ``w`` takes positions r, r+w, ...
    of its first ``n - n % w`` entries (equal counts on every rank).  ``start`` skips the first
    indices of the current epoch — used to resume a run where it stopped."""

    def __init__(self, n: int, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True):
        if n < world_size:
            raise ValueError(f"{n} samples cannot be split over {world_size} ranks")
        self.n, self.seed, self.rank, self.world_size, self.shuffle = n, seed, rank, world_size, shuffle
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.start = epoch, 0

    def set_start(self, epoch: int, start: int) -> None:
        self.epoch, self.start = epoch, start

    def indices(self) -> list[int]:
        order = (
            torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
            if self.shuffle
            else torch.arange(self.n)
        )
        usable = self.n - self.n % self.world_size
        return order[self.rank : usable : self.world_size].tolist()

    def __iter__(self):
        yield from self.indices()[self.start :]

    def __len__(self) -> int:
        return (self.n - self.n % self.world_size) // self.world_size - self.start


class ShardSampler(Sampler[int]):
    """Evaluation: rank ``r`` takes r, r+w, ... — every sample exactly once, no padding or duplicates."""

    def __init__(self, n: int, rank: int = 0, world_size: int = 1):
        self.n, self.rank, self.world_size = n, rank, world_size

    def __iter__(self):
        return iter(range(self.rank, self.n, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world_size))


class ResumableOrder:
    """Mixin for a Lightning data module whose training order is a per-epoch permutation from ``self.seed``, each rank
    reading a disjoint part, and whose position is saved in checkpoints (``state_dict``) so that a resumed run continues
    where it stopped.  The module sets ``self.seed``, ``self.batch_size`` and ``self._resume = None``."""

    _resume: tuple[int, int] | None = None

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _train_sampler(self, n: int) -> EpochShuffleSampler:
        """The sampler of this rank's training order, started at the restored position (if any)."""
        rank, world = self._rank_world()
        self.train_sampler = EpochShuffleSampler(n, self.seed, rank, world)
        if self._resume is not None:
            self.train_sampler.set_start(*self._resume)
            self._resume = None
        return self.train_sampler

    def _val_sampler(self, n: int) -> ShardSampler:
        rank, world = self._rank_world()
        return ShardSampler(n, rank, world)

    def state_dict(self) -> dict:
        """Position in the training order: epoch and samples this rank consumed in it."""
        trainer = getattr(self, "trainer", None)
        if trainer is None or not hasattr(self, "train_sampler"):
            return {}
        # micro-batches of this epoch, counted by Lightning across restarts (so not added to the resume offset)
        batches = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"epoch": self.train_sampler.epoch, "consumed": batches * self.batch_size, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state:
            if state.get("seed") != self.seed:
                raise ConfigError(f"the checkpoint was trained with seed {state.get('seed')}, this run has seed {self.seed}")
            self._resume = (state["epoch"], state["consumed"])
