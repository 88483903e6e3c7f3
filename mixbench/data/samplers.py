"""Samplers that give each DDP rank a disjoint, seed-determined part of a map-style dataset.

DataLoader workers then split a rank's batches among themselves, so every sample is read once.
"""
from __future__ import annotations

import torch
from torch.utils.data import Sampler


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
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)) if self.shuffle else torch.arange(self.n)
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
