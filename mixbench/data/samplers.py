"""Samplers that give each DDP rank a disjoint, seed-determined part of a map-style dataset.

DataLoader workers then split a rank's batches among themselves, so every sample is read once.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from ..core.errors import ConfigError


class EpochShuffleSampler(Sampler[int]):
    """Epoch ``e`` visits ``randperm(n, seed + e)``; rank ``r`` of ``w`` takes positions r, r+w, ...
    of its first ``n - n % w`` entries (equal counts on every rank).  ``start`` skips the first
    indices of the current epoch — used to resume a run where it stopped (``len`` stays the whole epoch's)."""

    def __init__(self, n: int, seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True):
        if n < world_size:
            raise ValueError(f"{n} samples cannot be split over {world_size} ranks")
        self.n, self.seed, self.rank, self.world_size, self.shuffle = n, seed, rank, world_size, shuffle
        self.epoch, self.start = 0, 0
        self.epoch_was_set = False  # set_epoch was called (a loader that reads it clears it when it starts an epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch_was_set = True
        if epoch != self.epoch:
            self.epoch, self.start = epoch, 0

    def set_start(self, epoch: int, start: int) -> None:
        self.epoch, self.start = epoch, start

    def order(self) -> torch.Tensor:
        """This rank's whole order of the current epoch (``start`` not applied), an int64 CPU tensor."""
        order = (
            torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
            if self.shuffle
            else torch.arange(self.n)
        )
        usable = self.n - self.n % self.world_size
        return order[self.rank : usable : self.world_size]

    def indices(self) -> list[int]:
        return self.order().tolist()

    def __iter__(self):
        yield from self.indices()[self.start :]

    def __len__(self) -> int:
        """The whole epoch's count, also while a resumed epoch yields only what follows ``start``: Lightning sizes
        every epoch of a fit from the loader's first length (and counts the resumed epoch's batches from its
        checkpoint), so a shortened length would cut every later epoch short."""
        return (self.n - self.n % self.world_size) // self.world_size


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

    def _epoch_spanning_loader(self, dataset, **loader_options) -> EpochSpanningLoader:
        """This rank's training loader over ``dataset``: full batches of :class:`EpochSpanningBatches` (no stall at epoch
        starts), started at the restored position, each sample's random augmentation seeded by (seed, epoch, index)
        (:class:`SeededSamples`), so a run resumed mid-epoch continues exactly as the uninterrupted one."""
        rank, world = self._rank_world()
        batches = EpochSpanningBatches(len(dataset), self.batch_size, self.seed, rank, world, keyed=True)
        if self._resume is not None:
            epoch, consumed = self._resume
            batches.start(epoch, consumed // self.batch_size)
            self._resume = None
        self.train_sampler = batches  # its epoch is the position state_dict saves
        loader = DataLoader(SeededSamples(dataset, self.seed), batch_sampler=batches, **loader_options)
        return EpochSpanningLoader(loader, batches)

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


def resumes_exactly(datamodule) -> bool:
    """Whether ``datamodule`` restores its training position on resume (a :class:`ResumableOrder`) and continues exactly
    as the uninterrupted run would — unless its description says otherwise (``exact_resume: false``, e.g. DALI)."""
    return isinstance(datamodule, ResumableOrder) and datamodule.describe().get("exact_resume", True) is not False


class EpochSpanningBatches(Sampler[list[int]]):
    """An endless batch sampler: the full batches of this rank's :class:`EpochShuffleSampler` order of epoch ``e``, then
    those of ``e + 1``, … with no break in between, so DataLoader workers prefetch the next epoch's first batches while
    the current epoch's last ones train.  Every batch it hands out is tagged ``(epoch, batch index)`` in ``tags``, in
    order, for :class:`EpochSpanningLoader`.

    ``epoch`` is the epoch being delivered (Lightning calls :meth:`set_epoch` at every epoch start; the data module's
    checkpoint position reads it); ``start(epoch, batch)`` (before iterating) resumes at a batch of an epoch."""

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1, keyed: bool = False):
        self.order = EpochShuffleSampler(n, seed, rank, world_size)
        self.keyed = keyed  # hand out (epoch, index) keys for SeededSamples instead of indices
        if len(self.order) < batch_size:
            raise ConfigError(f"this rank's {len(self.order)} training samples are fewer than one batch of {batch_size}")
        self.batch_size = batch_size
        self.epoch, self.first_batch = 0, 0
        self._dispatch_from: int | None = None  # an epoch the dispatch must jump to (a shortened epoch ended early)
        self.epoch_was_set = False
        self.tags: deque[tuple[int, int]] = deque()

    @property
    def batches_per_epoch(self) -> int:
        return len(EpochShuffleSampler(self.order.n, 0, self.order.rank, self.order.world_size)) // self.batch_size

    def start(self, epoch: int, batch: int) -> None:
        self.epoch, self.first_batch = epoch, batch

    def set_epoch(self, epoch: int) -> None:
        """The epoch to deliver next; batches of earlier epochs still queued are skipped (an epoch cut short, e.g. by
        ``trainer.limit_train_batches``)."""
        self.epoch_was_set = True
        if epoch != self.epoch:
            self.epoch = epoch
            self._dispatch_from = epoch

    def __iter__(self):
        epoch, first = self.epoch, self.first_batch
        while True:
            self.order.set_start(epoch, 0)
            indices = self.order.indices()
            for b in range(first, self.batches_per_epoch):
                if self._dispatch_from is not None and self._dispatch_from > epoch:
                    break
                self.tags.append((epoch, b))
                batch = indices[b * self.batch_size : (b + 1) * self.batch_size]
                yield [(epoch, i) for i in batch] if self.keyed else batch
            if self._dispatch_from is not None and self._dispatch_from > epoch:
                epoch, self._dispatch_from = self._dispatch_from, None
            else:
                epoch += 1
            first = 0


class EpochSpanningLoader:
    """The training loader of one fit over an endless :class:`EpochSpanningBatches` DataLoader: each ``iter()`` is one
    epoch (``len`` batches), taken from one DataLoader iterator that lives across epochs, so the workers never drain
    at an epoch boundary.  ``sampler`` is where Lightning calls ``set_epoch``; ``_iterator`` is what Lightning shuts
    down at the end of the fit."""

    def __init__(self, loader, batches: EpochSpanningBatches):
        self.loader, self.sampler = loader, batches
        self._iterator = None
        self._pending = None  # (tag, batch) fetched but belonging to a later epoch
        self._delivered: int | None = None  # the epoch the last iter() delivered

    def __len__(self) -> int:
        return self.sampler.batches_per_epoch

    def _next(self):
        if self._pending is not None:
            pending, self._pending = self._pending, None
            return pending
        if self._iterator is None:
            self.sampler.tags.clear()
            self._iterator = iter(self.loader)
        batch = next(self._iterator)
        return self.sampler.tags.popleft(), batch

    def __iter__(self):
        if self._delivered is not None and not self.sampler.epoch_was_set:  # nobody said which epoch: the next one
            self.sampler.set_epoch(self._delivered + 1)
        self.sampler.epoch_was_set = False
        epoch, last = self.sampler.epoch, self.sampler.batches_per_epoch - 1
        self._delivered = epoch
        while True:
            (tag_epoch, b), batch = self._next()
            if tag_epoch < epoch:  # queued before the epoch was cut short
                continue
            if tag_epoch > epoch:
                self._pending = ((tag_epoch, b), batch)
                return
            yield batch
            if b == last:  # end the epoch without waiting for the next one's first batch
                return


class SeededSamples(Dataset):
    """``dataset[index]`` for the keys ``(epoch, index)`` that :class:`EpochSpanningBatches` hands out with ``keyed=True``,
    with Python's, NumPy's and torch's global RNGs seeded from ``(seed, epoch, index)`` first: a sample's random
    augmentation (timm's crop, flip, RandAugment, erasing; the device pipelines' draws made in the collate after it)
    depends on which sample of which epoch it is, not on the worker or on what that worker did before — so a resumed run
    augments exactly as the uninterrupted one.  In the main process (no workers) the RNG states are restored after."""

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str):  # the wrapped dataset's attributes (skipped, classes, samples, ...)
        if name in ("dataset", "seed"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def _seeded(self, epoch: int, index: int):
        state = np.random.SeedSequence([self.seed, epoch, index]).generate_state(2)
        random.seed(int(state[0]))
        np.random.seed(int(state[1]))
        torch.manual_seed(int(state[0]))
        return self.dataset[index]

    def __getitem__(self, key: tuple[int, int]):
        if get_worker_info() is not None:
            return self._seeded(*key)
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            return self._seeded(*key)
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])
