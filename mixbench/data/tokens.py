"""Pre-tokenized, memory-mapped token caches of C4-format text.

A cache is a folder of parts, one per input shard (or one for a stream)::

    <cache_dir>/<key>/meta.json          tokenizer, sources, totals
    <cache_dir>/<key>/part-00000.bin     uint16/uint32 token ids of the part's documents (+ EOS each)
    <cache_dir>/<key>/part-00000.len.npy document lengths (int32)

The key hashes the tokenizer and the exact inputs (file names, sizes, mtimes; or the stream and its
budget), so a cache is built once and reused by every run, norm and sequence mode.  Parts are
tokenized in parallel (one process per shard) with a progress bar, written to a temporary folder and
renamed into place, so an interrupted build never leaves a half cache behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from . import ASSETS_DIR

log = logging.getLogger(__name__)
EMBEDDED_TOKENIZER = ASSETS_DIR / "tokenizer.json"
EOS_CANDIDATES = ("<eos>", "</s>", "<|endoftext|>")
PAD_CANDIDATES = ("<pad>",)
CACHE_VERSION = 1


@dataclass(frozen=True)
class TokenizerSpec:
    """``embedded`` (shipped BPE), a ``tokenizer.json`` path, or a hub name such as ``t5-base``."""

    name: str

    def load(self):
        from tokenizers import Tokenizer

        if self.name == "embedded":
            return Tokenizer.from_file(str(EMBEDDED_TOKENIZER))
        path = Path(self.name).expanduser()
        if path.is_file():
            try:
                return Tokenizer.from_file(str(path))
            except Exception as err:  # tokenizers raises a bare Exception for a file it cannot parse
                raise ConfigError(
                    f"tokenizer file {path} does not parse as a Hugging Face tokenizer.json ({err}); "
                    "set data.tokenizer to a valid tokenizer.json, 'embedded' or a hub name"
                ) from None
        if path.suffix == ".json" or os.sep in self.name:
            raise FileNotFoundError(
                f"tokenizer file {self.name!r} not found; set data.tokenizer=embedded, a tokenizer.json path or a hub name"
            )
        try:
            return Tokenizer.from_pretrained(self.name)
        except Exception as err:  # the hub is unreachable or the name is unknown
            raise ConfigError(
                f"cannot load tokenizer {self.name!r} from the Hugging Face hub ({type(err).__name__}); "
                "offline, set data.tokenizer to a local tokenizer.json (or 'embedded')"
            ) from None

    def download(self) -> str | None:
        """The hub repository :meth:`load` would fetch: None for the embedded tokenizer, a file, or one already in the
        local hub cache."""
        if self.name == "embedded" or Path(self.name).expanduser().is_file() or Path(self.name).suffix == ".json" or os.sep in self.name:
            return None
        from huggingface_hub import try_to_load_from_cache

        return None if isinstance(try_to_load_from_cache(self.name, "tokenizer.json"), str) else self.name

    def identity(self) -> str:
        """What the cache key depends on: the file's content hash, or the hub name."""
        path = EMBEDDED_TOKENIZER if self.name == "embedded" else Path(self.name).expanduser()
        if path.is_file():
            return "sha1:" + hashlib.sha1(path.read_bytes()).hexdigest()
        return "hub:" + self.name


def special_id(tokenizer, candidates: tuple[str, ...], what: str) -> int:
    for token in candidates:
        idx = tokenizer.token_to_id(token)
        if idx is not None:
            return idx
    raise ConfigError(f"tokenizer has no {what} token (looked for {', '.join(candidates)})")


def iter_texts(source: dict) -> Iterator[str]:
    """Document texts of a source: ``{"files": [...]}`` (C4-format JSON lines) or
    ``{"hub": "allenai/c4", "name": "en", "split": "train", "shuffle_seed": 32}``, both streamed by HF datasets."""
    from datasets import config, load_dataset

    if "files" in source:
        config.HF_UPDATE_DOWNLOAD_COUNTS = False  # local files: no download-count request to the hub's S3 bucket
        stream = load_dataset("json", data_files=source["files"], split="train", streaming=True)
    else:
        stream = load_dataset(source["hub"], source.get("name"), split=source["split"], streaming=True)
        if source.get("shuffle_seed") is not None:
            stream = stream.shuffle(seed=source["shuffle_seed"], buffer_size=10_000)
    for row in stream:
        yield row["text"]


def _where(source: dict) -> str:
    return ", ".join(source["files"]) if "files" in source else f"{source['hub']} {source.get('split')}"


def _tokenize_part(job: tuple[dict, str, str, int, int | None, str]) -> tuple[int, int]:
    """Tokenize one source into ``<out>.bin`` + ``<out>.len.npy``; returns (documents, tokens)."""
    source, tokenizer_name, out, eos_id, max_tokens, dtype = job
    tokenizer = TokenizerSpec(tokenizer_name).load()
    lengths, total = [], 0
    with open(out + ".bin", "wb") as f:
        batches = _batched(iter_texts(source), 1000)
        while True:
            try:
                texts = next(batches, None)
            except ImportError as err:  # a missing package (HF datasets, a codec), not a bad shard
                raise ConfigError(
                    f"reading {_where(source)} needs the package {err.name or err}: install mixbench's dependencies (pip install -e .)"
                ) from None
            except Exception as err:  # gzip/JSON errors surface through HF datasets' streaming reader
                raise ConfigError(
                    f"cannot read {_where(source)}: truncated or corrupt ({type(err).__name__}: {err}); "
                    "re-download the shard or leave it out of data.path"
                ) from None
            if texts is None:
                break
            for enc in tokenizer.encode_batch(texts, add_special_tokens=False):
                ids = np.asarray(enc.ids + [eos_id], dtype=dtype)
                f.write(ids.tobytes())
                lengths.append(len(ids))
                total += len(ids)
            if max_tokens is not None and total >= max_tokens:
                break
    np.save(out + ".len.npy", np.asarray(lengths, dtype=np.int32))
    return len(lengths), total


def _batched(items: Iterable[str], n: int) -> Iterator[list[str]]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def file_fingerprint(files: list[str]) -> list[tuple[str, int, int]]:
    return [(os.path.abspath(f), os.path.getsize(f), int(os.path.getmtime(f))) for f in files]


def cache_key(tokenizer: TokenizerSpec, sources: list[dict], max_tokens: int | None) -> str:
    desc = {
        "v": CACHE_VERSION,
        "tokenizer": tokenizer.identity(),
        "max_tokens": max_tokens,
        "sources": [{**s, "files": file_fingerprint(s["files"])} if "files" in s else s for s in sources],
    }
    return hashlib.sha1(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def build_cache(
    cache_root: str | Path, tokenizer: TokenizerSpec, sources: list[dict], max_tokens: int | None = None, num_proc: int | None = None
) -> Path:
    """Tokenize ``sources`` (one part each) into ``cache_root/<key>`` unless it exists; returns that folder."""
    path = Path(cache_root).expanduser() / cache_key(tokenizer, sources, max_tokens)
    if (path / "meta.json").is_file():
        return path
    tok = tokenizer.load()
    eos_id = special_id(tok, EOS_CANDIDATES, "end-of-sequence")
    dtype = "uint16" if tok.get_vocab_size() <= 65536 else "uint32"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=path.parent))
    jobs = [(s, tokenizer.name, str(tmp / f"part-{i:05d}"), eos_id, max_tokens, dtype) for i, s in enumerate(sources)]
    workers = max(1, min(num_proc or os.cpu_count() or 1, len(jobs)))
    try:
        from rich.progress import Progress

        with Progress(transient=True) as progress, ProcessPoolExecutor(workers) as pool:
            bar = progress.add_task(f"tokenizing {len(jobs)} part(s) with {workers} process(es)", total=len(jobs))
            counts = []
            for result in pool.map(_tokenize_part, jobs):
                counts.append(result)
                progress.advance(bar)
        meta = {
            "version": CACHE_VERSION,
            "tokenizer": tokenizer.name,
            "tokenizer_identity": tokenizer.identity(),
            "vocab_size": tok.get_vocab_size(),
            "eos_id": eos_id,
            "dtype": dtype,
            "max_tokens": max_tokens,
            "sources": [s.get("files", s) for s in sources],
            "parts": [{"documents": d, "tokens": t} for d, t in counts],
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished the same cache first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("token cache %s: %d documents, %d tokens", path, sum(d for d, _ in counts), sum(t for _, t in counts))
    return path


class TokenStore:
    """Read-only view of a cache: one logical token stream and its document boundaries."""

    def __init__(self, path: str | Path):
        self._open(Path(path))

    def __getstate__(self) -> dict:  # pickled by path (DDP spawn, DataLoader workers), never by content
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self._open(state["path"])

    def _open(self, path: Path) -> None:
        self.path = path
        try:
            self.meta = json.loads((self.path / "meta.json").read_text())
            parts = sorted(self.path.glob("part-*.bin"))
            self.parts = [np.memmap(p, dtype=self.meta["dtype"], mode="r") for p in parts]
            lengths = np.concatenate([np.load(str(p)[: -len(".bin")] + ".len.npy") for p in parts]).astype(np.int64)
        except (OSError, ValueError, KeyError, TypeError) as err:  # np.load refuses an object (pickled) array: ValueError
            raise ConfigError(f"the token cache {path} is damaged ({err}); remove that folder and it is built again") from None
        self.doc_offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.part_offsets = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])]).tolist()
        self.num_tokens = int(self.doc_offsets[-1])

    @property
    def num_documents(self) -> int:
        return len(self.doc_offsets) - 1

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens [start, start+length) of the stream, across part boundaries."""
        out, pos, end = [], start, start + length
        while pos < end:
            i = bisect_right(self.part_offsets, pos) - 1
            part_start = self.part_offsets[i]
            stop = min(end, self.part_offsets[i + 1])
            out.append(self.parts[i][pos - part_start : stop - part_start])
            pos = stop
        return np.concatenate(out) if len(out) > 1 else np.asarray(out[0])

    def document(self, i: int) -> np.ndarray:
        return self.read(int(self.doc_offsets[i]), int(self.doc_offsets[i + 1] - self.doc_offsets[i]))
