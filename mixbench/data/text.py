"""Causal-LM text data in C4's file format (gzip JSON lines ``{"text","timestamp","url"}``).

Two sequence modes, both producing ``input_ids`` (T) and next-token ``labels`` (T, -100 = ignored):

* ``pack``: documents + EOS concatenated and cut into windows of T+1 tokens (no padding).
* ``pad``: the Mix-LN paper's protocol — each document + EOS is truncated / right-padded to T;
  labels are the shifted ids with pads (and the last position) excluded from the loss.
"""
from __future__ import annotations

import glob
import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from . import ASSETS_DIR
from ..errors import ConfigError

log = logging.getLogger(__name__)
IGNORE_INDEX = -100
EMBEDDED_TEXT = ASSETS_DIR / "text"
EMBEDDED_TOKENIZER = ASSETS_DIR / "tokenizer.json"
EOS_CANDIDATES = ("<eos>", "</s>", "<|endoftext|>")
PAD_CANDIDATES = ("<pad>",)


def resolve_files(pattern: str) -> list[str]:
    files = sorted(glob.glob(str(Path(pattern).expanduser())))
    if not files:
        raise FileNotFoundError(
            f"no files match data path {pattern!r}; set data.train_path / data.val_path to a glob of "
            "C4-format .json.gz (or .json/.jsonl) shards"
        )
    return files


def load_tokenizer(name_or_path: str):
    """A HF ``tokenizers.Tokenizer`` from ``embedded`` (the shipped BPE) or a ``tokenizer.json`` path."""
    from tokenizers import Tokenizer

    path = EMBEDDED_TOKENIZER if name_or_path == "embedded" else Path(name_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {str(path)!r} not found; set data.tokenizer=embedded or a tokenizer.json path")
    return Tokenizer.from_file(str(path))


def special_id(tokenizer, candidates: tuple[str, ...], what: str) -> int:
    for token in candidates:
        idx = tokenizer.token_to_id(token)
        if idx is not None:
            return idx
    raise ConfigError(f"tokenizer has no {what} token (looked for {', '.join(candidates)})")


def read_texts(files: list[str]) -> list[str]:
    """Document texts of C4-format shards, in file order, through HF ``datasets`` (works offline)."""
    from datasets import load_dataset

    return load_dataset("json", data_files=files, split="train")["text"]


def tokenize_documents(texts: list[str], tokenizer, eos_id: int, batch: int = 512) -> list[np.ndarray]:
    docs = []
    for start in range(0, len(texts), batch):
        for enc in tokenizer.encode_batch(texts[start : start + batch], add_special_tokens=False):
            docs.append(np.asarray(enc.ids + [eos_id], dtype=np.int32))
    return docs


def pack_sequences(docs: list[np.ndarray], seq_len: int) -> np.ndarray:
    """(N, T+1) windows of the concatenated token stream; the incomplete tail is dropped."""
    stream = np.concatenate(docs)
    n = len(stream) // (seq_len + 1)
    return stream[: n * (seq_len + 1)].reshape(n, seq_len + 1)


def pad_sequences(docs: list[np.ndarray], seq_len: int, pad_id: int) -> np.ndarray:
    """(N, T) rows: each document (with EOS) truncated or right-padded with ``pad_id``."""
    out = np.full((len(docs), seq_len), pad_id, dtype=np.int32)
    for i, doc in enumerate(docs):
        out[i, : min(len(doc), seq_len)] = doc[:seq_len]
    return out


class TokenWindows(Dataset):
    """Rows of token ids → ``{"input_ids", "labels"}``."""

    def __init__(self, rows: np.ndarray, mode: str, pad_id: int):
        self.rows, self.mode, self.pad_id = torch.from_numpy(rows.astype(np.int64)), mode, pad_id

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        row = self.rows[i]
        if self.mode == "pack":
            return {"input_ids": row[:-1], "labels": row[1:].clone()}
        labels = torch.full_like(row, IGNORE_INDEX)
        labels[:-1] = row[1:]
        labels[labels == self.pad_id] = IGNORE_INDEX
        return {"input_ids": row, "labels": labels}


class TextDataModule(L.LightningDataModule):
    """Tokenizes C4-format shards once in ``setup`` and serves packed or padded windows.

    ``train_path`` / ``val_path``: globs, or ``embedded`` for the public-domain sample shipped with
    mixbench (Austen, Melville, Shakespeare, US State of the Union addresses, Python docs).
    ``batch_size`` is per device.
    """

    def __init__(
        self,
        train_path: str = "embedded",
        val_path: str = "embedded",
        tokenizer: str = "embedded",
        seq_len: int = 128,
        mode: str = "pack",
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        max_val_tokens: int | None = None,
        name: str = "text",
        label: str | None = None,
        **_unused,
    ):
        super().__init__()
        if mode not in ("pack", "pad"):
            raise ConfigError(f"data.mode must be 'pack' or 'pad', got {mode!r}")
        self.train_path = str(EMBEDDED_TEXT / "c4-train.*.json.gz") if train_path == "embedded" else train_path
        self.val_path = str(EMBEDDED_TEXT / "c4-validation.*.json.gz") if val_path == "embedded" else val_path
        self.tokenizer_name, self.seq_len, self.mode = tokenizer, seq_len, mode
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size or batch_size, num_workers
        self.max_val_tokens = max_val_tokens
        self.dataset_name, self.dataset_label = name, label or name

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        tok = load_tokenizer(self.tokenizer_name)
        self.vocab_size = tok.get_vocab_size()
        self.eos_id = special_id(tok, EOS_CANDIDATES, "end-of-sequence")
        self.pad_id = special_id(tok, PAD_CANDIDATES, "padding") if self.mode == "pad" else self.eos_id
        self.train_set = self._windows(resolve_files(self.train_path), tok)
        self.val_set = self._windows(resolve_files(self.val_path), tok, max_tokens=self.max_val_tokens)
        log.info("text data: %d train / %d val windows of %d tokens (%s)", len(self.train_set), len(self.val_set), self.seq_len, self.mode)

    def _windows(self, files: list[str], tok, max_tokens: int | None = None) -> TokenWindows:
        docs = tokenize_documents(read_texts(files), tok, self.eos_id)
        rows = pack_sequences(docs, self.seq_len) if self.mode == "pack" else pad_sequences(docs, self.seq_len, self.pad_id)
        if max_tokens is not None:
            rows = rows[: max(1, max_tokens // self.seq_len)]
        return TokenWindows(rows, self.mode, self.pad_id)

    def describe(self) -> dict:
        return {
            "name": self.dataset_name, "label": self.dataset_label, "train_path": self.train_path, "val_path": self.val_path,
            "tokenizer": self.tokenizer_name, "vocab_size": self.vocab_size, "seq_len": self.seq_len, "mode": self.mode,
            "num_train_sequences": len(self.train_set), "num_val_sequences": len(self.val_set),
            "num_val_tokens": int((torch.stack([self.val_set[i]["labels"] for i in range(len(self.val_set))]) != IGNORE_INDEX).sum()),
        }

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers)
