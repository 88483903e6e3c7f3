"""Causal-LM text data in C4's file format (gzip JSON lines ``{"text","timestamp","url"}``).

Sources: local shards (``path``: a glob, ``embedded`` for the sample shipped with mixbench) or, when
``path`` is null, the hub dataset ``hub`` (e.g. ``allenai/c4`` / ``en``) streamed through HF datasets.
Text is tokenized once into a memory-mapped cache (:mod:`mixbench.data.tokens`).

Two sequence modes, both producing ``input_ids`` (T) and next-token ``labels`` (T, -100 = ignored):

* ``pack``: documents + EOS concatenated and cut into windows of T+1 tokens (no padding).
* ``pad``: the Mix-LN paper's protocol — each document + EOS truncated / right-padded to T; the
  labels are the shifted ids, with padding (and the last position) excluded from the loss.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..core.constants import IGNORE_INDEX
from ..core.errors import ConfigError
from . import ASSETS_DIR
from .samplers import ResumableOrder
from .sources import TEXT_SOURCE_UNSET, resolve_files, validation_glob  # noqa: F401 (resolve_files: imported from here too)
from .tokens import PAD_CANDIDATES, TokenizerSpec, TokenStore, build_cache, special_id

log = logging.getLogger(__name__)
EMBEDDED_TRAIN = str(ASSETS_DIR / "text" / "c4-train.*.json.gz")


class PackedWindows(Dataset):
    """Window i = tokens [i(T+1), (i+1)(T+1)) of the stream: inputs its first T, labels its last T.
    ``max_targets`` keeps the first windows holding at most that many target tokens."""

    def __init__(self, store: TokenStore, seq_len: int, max_targets: int | None = None):
        self.store, self.seq_len = store, seq_len
        self.length = store.num_tokens // (seq_len + 1)
        if max_targets is not None:
            self.length = min(self.length, max(1, max_targets // seq_len))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        row = torch.from_numpy(self.store.read(i * (self.seq_len + 1), self.seq_len + 1).astype(np.int64))
        return {"input_ids": row[:-1], "labels": row[1:]}

    def num_target_tokens(self) -> int:
        return len(self) * self.seq_len


class PaddedDocuments(Dataset):
    """Item i = document i (with EOS) truncated / right-padded to T; pads are never targets.
    ``max_targets`` keeps the first documents until they hold that many target tokens."""

    def __init__(self, store: TokenStore, seq_len: int, pad_id: int, max_targets: int | None = None):
        self.store, self.seq_len, self.pad_id = store, seq_len, pad_id
        self.length = store.num_documents
        if max_targets is not None:
            targets = np.cumsum(np.minimum(np.diff(store.doc_offsets), seq_len) - 1)
            self.length = min(self.length, int(np.searchsorted(targets, max_targets, side="left")) + 1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        doc = torch.from_numpy(self.store.document(i)[: self.seq_len].astype(np.int64))
        ids = torch.full((self.seq_len,), self.pad_id, dtype=torch.long)
        ids[: len(doc)] = doc
        labels = torch.full((self.seq_len,), IGNORE_INDEX, dtype=torch.long)
        labels[: len(doc) - 1] = doc[1:]
        return {"input_ids": ids, "labels": labels}

    def num_target_tokens(self) -> int:
        lengths = np.minimum(np.diff(self.store.doc_offsets[: self.length + 1]), self.seq_len)
        return int((lengths - 1).sum())


class TextDataModule(ResumableOrder, L.LightningDataModule):
    """Token-cached C4-format text for causal LM training.

    ``batch_size`` is the micro-batch per device; ``global_batch_size`` (optional) is reached by
    gradient accumulation (see :func:`mixbench.training.strategy.accumulation_steps`).  Training order is a
    per-epoch permutation from ``seed``; each rank reads a disjoint part, and the position is saved in
    checkpoints (``state_dict``) so a resumed run continues where it stopped.  Validation uses the first
    ``max_val_tokens`` tokens (whole documents) of the validation source, split over ranks without
    duplicates.
    """

    def __init__(
        self,
        path: str | None = "embedded",
        val_path: str | None = None,
        hub: str | None = None,
        hub_name: str | None = None,
        shuffle_seed: int | None = 32,
        tokenizer: str = "embedded",
        seq_len: int = 128,
        mode: str = "pack",
        batch_size: int = 16,
        global_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        max_train_tokens: int | None = None,
        max_val_tokens: int | None = None,
        cache_dir: str = "~/.cache/mixbench/tokens",
        num_proc: int | None = None,
        seed: int = 0,
        name: str | None = None,
        label: str | None = None,
    ):
        super().__init__()
        if mode not in ("pack", "pad"):
            raise ConfigError(f"data.mode must be 'pack' or 'pad', got {mode!r}")
        if path is None and hub is None:
            raise ConfigError(TEXT_SOURCE_UNSET)
        self.path = EMBEDDED_TRAIN if path == "embedded" else path
        self.val_path = val_path
        self.hub, self.hub_name, self.shuffle_seed = hub, hub_name, shuffle_seed
        self.tokenizer = TokenizerSpec(tokenizer)
        self.seq_len, self.mode, self.seed = seq_len, mode, seed
        self.batch_size, self.global_batch_size = batch_size, global_batch_size
        self.eval_batch_size, self.num_workers = eval_batch_size or batch_size, num_workers
        self.max_train_tokens, self.max_val_tokens = max_train_tokens, max_val_tokens
        self.cache_dir, self.num_proc = cache_dir, num_proc
        # never label local files with the hub dataset's name: C4-format text is not C4
        default_name = (hub or "text").split("/")[-1] if path is None else (Path(self.path).parent.name or "text")
        default_label = f"{hub}/{hub_name} (streamed)" if path is None else f"C4-format files {self.path}"
        self.dataset_name, self.dataset_label = name or default_name, label or default_label
        self._resume: tuple[int, int] | None = None

    # sources -----------------------------------------------------------------------------------
    def _sources(self, split: str) -> list[dict]:
        if self.path is not None:
            pattern = self.path if split == "train" else (self.val_path or validation_glob(self.path))
            return [{"files": [f]} for f in resolve_files(pattern)]
        return [{"hub": self.hub, "name": self.hub_name, "split": split, "shuffle_seed": self.shuffle_seed if split == "train" else None}]

    def check_sources(self) -> None:
        """The local shards of both splits exist (their globs, as :meth:`_sources` looks them up); a hub stream has none."""
        for split in ("train", "validation"):
            self._sources(split)

    def hub_sources(self) -> list[str]:
        """What this module would fetch from the Hugging Face hub: the dataset it streams (none from local files), a
        tokenizer not in the local hub cache."""
        stream = [f"dataset {self.hub}" + (f" ({self.hub_name})" if self.hub_name else "")] if self.path is None else []
        tokenizer = self.tokenizer.download()
        return stream + ([f"tokenizer {tokenizer}"] if tokenizer else [])

    def _budget(self, split: str) -> int | None:
        """Streams are cut at a token budget (the run's need); local files are cached whole."""
        if self.path is not None:
            return None
        return self.max_train_tokens if split == "train" else self.max_val_tokens

    def _store(self, split: str) -> TokenStore:
        cache = build_cache(self.cache_dir, self.tokenizer, self._sources(split), self._budget(split), self.num_proc)
        return TokenStore(cache)

    def prepare_data(self) -> None:
        for split in ("train", "validation"):
            self._store(split)

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        tok = self.tokenizer.load()
        self.vocab_size = tok.get_vocab_size()
        self.pad_id = special_id(tok, PAD_CANDIDATES, "padding") if self.mode == "pad" else 0
        self.train_set = self._dataset(self._store("train"))
        self.val_set = self._dataset(self._store("validation"), max_targets=self.max_val_tokens)
        log.info(
            "text data: %d train / %d val sequences of %d tokens (%s)", len(self.train_set), len(self.val_set), self.seq_len, self.mode
        )

    def _dataset(self, store: TokenStore, max_targets: int | None = None) -> Dataset:
        if self.mode == "pack":
            return PackedWindows(store, self.seq_len, max_targets)
        return PaddedDocuments(store, self.seq_len, self.pad_id, max_targets)

    def describe(self) -> dict:
        return {
            "name": self.dataset_name,
            "label": self.dataset_label,
            "source": self.path if self.path is not None else f"{self.hub}/{self.hub_name} (streamed)",
            "val_source": (self.val_path or validation_glob(self.path))
            if self.path is not None
            else f"{self.hub}/{self.hub_name} validation",
            "tokenizer": self.tokenizer.name,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "mode": self.mode,
            "num_train_sequences": len(self.train_set),
            "num_val_sequences": len(self.val_set),
            "num_val_target_tokens": self.val_set.num_target_tokens(),
            "train_tokens_available": self.train_set.store.num_tokens,
        }

    def unigram_entropy(self) -> float:
        """H = −Σ p(t) ln p(t) of the validation target tokens' own frequencies (nats): no model that ignores
        context can have a lower validation loss, so a final loss at or above it means nothing was learned."""
        if not hasattr(self, "_unigram_entropy"):
            counts = np.zeros(self.vocab_size, dtype=np.int64)
            for i in range(len(self.val_set)):
                labels = self.val_set[i]["labels"].numpy()
                counts += np.bincount(labels[labels != IGNORE_INDEX], minlength=self.vocab_size)[: self.vocab_size]
            p = counts[counts > 0] / counts.sum()
            self._unigram_entropy = float(-(p * np.log(p)).sum())
        return self._unigram_entropy

    # loaders -----------------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            sampler=self._train_sampler(len(self.train_set)),
            drop_last=True,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.val_set,
            batch_size=self.eval_batch_size,
            sampler=self._val_sampler(len(self.val_set)),
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
        )
