"""Instruction data in the Commonsense170K / LLM-Adapters format for supervised fine-tuning.

A record is ``{"instruction", "input", "output", "answer"}`` (``input`` and ``answer`` optional); files are JSON
arrays or JSON lines.  Each example is ``prompt ‖ output ‖ EOS`` with the prompt of :mod:`mixbench.sft.prompt`,
tokenized separately so the boundary is exact.  For the ids x_0..x_{n-1} of an example whose prompt is its first
m tokens, the model reads x_0..x_{n-2} and is scored on the response only::

    labels_t = x_{t+1}  if t + 1 >= m   else IGNORE_INDEX (-100)        (t = 0..n-2)

so ``loss = Σ_t CE(logits_t, labels_t) / #{t: labels_t != -100}`` counts response tokens (and EOS) only.

Sequence modes (``mode``):

* ``pad`` (default, LLM-Adapters): one example per row, truncated to ``seq_len + 1`` tokens, right-padded to the
  longest row of the batch (rounded up to a multiple of 8); pad positions are never scored.
* ``pack`` (OwLore / LMFlow ``group_texts``): examples concatenated and cut into windows of ``seq_len + 1`` tokens,
  every prompt token still unscored; attention crosses example boundaries (the model has no document mask).

Examples whose prompt fills the whole window have no scored token and are dropped (counted in ``describe()``).
``format=binarized`` reads UltraFeedback-binarized records instead (hub name with ``split``, or parquet/JSON files): the
prompt as the instruction and the chosen response as the output.  With ``stage_split`` (e.g. ``4,3,3``) the module reads
only the ``sft`` share of the records, the reward model and ReMax taking the others (:func:`stage_share`).  The
validation split is ``val_path``, or ``val_size`` examples held out by a permutation with ``split_seed`` (LLM-Adapters:
120 examples, seed 42) — the same for every run, placement and training seed.
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..core.constants import IGNORE_INDEX
from ..core.errors import ConfigError
from ..core.jsonitems import read_items
from ..data import ASSETS_DIR
from ..data.samplers import ResumableOrder
from ..data.tokens import EOS_CANDIDATES, PAD_CANDIDATES, TokenizerSpec, special_id
from ..training.trained import tokenizer_of
from .prompt import build_prompt

CHAIN_STAGES = ("sft", "rm", "rl")  # the stages of the RLHF chain that share one source (``stage_split``)

log = logging.getLogger(__name__)
REQUIRED_FIELDS = ("instruction", "output")


EMBEDDED_SAMPLE = ASSETS_DIR / "rlhf" / "preferences_sample.jsonl"  # synthetic binarized preferences (tests)


def files_of(path: str) -> list[Path]:
    return [Path(f) for part in str(path).split(",") if part.strip() for f in sorted(glob.glob(str(Path(part.strip()).expanduser())))]


GENERIC_STEMS = {"train", "test", "validation", "valid", "val", "dev", "data"}


def data_name(path: str) -> str:
    """A short dataset name for records: a file's stem (``commonsense_170k``); its folder's name when the stem says
    nothing (``boolq/train.json`` → ``boolq``) or the folder holds several of the files (shards); several sources
    joined by ``+`` (``ARC-Challenge+ARC-Easy+boolq+openbookqa``); a hub name's last part."""
    files = files_of(path)
    if not files:  # hub names
        return "+".join(dict.fromkeys(Path(p.strip()).name.split(".")[0] for p in str(path).split(",") if p.strip())) or "data"
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    names = []
    for folder, members in by_folder.items():
        stem = members[0].name.split(".")[0]
        names.append(stem if len(members) == 1 and stem.lower() not in GENERIC_STEMS else folder.resolve().name)
    return "+".join(dict.fromkeys(names))


def _messages_prompt(messages: list, where: str) -> tuple[str, str]:
    """``(instruction, response)`` of a conversation ending with the assistant's response."""
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
        raise ConfigError(f"{where}: chosen/rejected must be message lists ending with an assistant message, got {str(messages)[:200]}")
    context = messages[:-1]
    if len(context) == 1:
        instruction = context[0]["content"]
    else:
        instruction = "\n\n".join(f"{m['role']}: {m['content']}" for m in context)
    return instruction, messages[-1]["content"]


def binarized_triples(path: str, split: str) -> list[tuple[str, str, str]]:
    """``(instruction, chosen, rejected)`` of UltraFeedback-binarized records: local parquet / JSON files, or a hub
    dataset's ``split``."""
    import datasets

    files = files_of(path)
    if files:
        kind = "parquet" if files[0].suffix == ".parquet" else "json"
        rows = datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train")
    else:
        try:
            rows = datasets.load_dataset(path, split=split)
        except Exception as err:  # offline, unknown name or split
            raise ConfigError(
                f"data.path={path}: no such file, and the hub dataset cannot be loaded ({type(err).__name__}: "
                f"{str(err)[:200]}); give local parquet/JSON files in the binarized format"
            ) from None
    missing = [k for k in ("chosen", "rejected") if k not in rows.column_names]
    if missing:
        raise ConfigError(
            f"data.path={path}: the records lack {missing}; the binarized format has prompt, chosen and rejected message lists"
        )
    out = []
    for i, row in enumerate(rows):
        instruction, chosen = _messages_prompt(row["chosen"], f"{path} record {i}")
        _, rejected = _messages_prompt(row["rejected"], f"{path} record {i}")
        out.append((instruction, chosen, rejected))
    return out


def binarized_instructions(path: str, split: str) -> list[dict]:
    """UltraFeedback-binarized records as SFT instructions (Commonsense170K fields): the prompt and the chosen response
    (DeepSpeed-Chat step 1 fine-tunes on the chosen responses)."""
    if path == "embedded":
        path = str(EMBEDDED_SAMPLE)
    return [{"instruction": instruction, "input": "", "output": chosen} for instruction, chosen, _ in binarized_triples(path, split)]


def stage_share(n: int, stage_split: str | None, stage: str, seed: int) -> np.ndarray:
    """Indices of ``stage``'s share of ``n`` records (all of them without ``stage_split``), in their original order."""
    if stage_split is None:
        return np.arange(n)
    try:
        weights = [float(w) for w in str(stage_split).split(",")]
    except ValueError:
        weights = []
    if len(weights) != len(CHAIN_STAGES) or min(weights) < 0 or sum(weights) <= 0:
        raise ConfigError(f"data.stage_split={stage_split!r}: give three non-negative weights for {', '.join(CHAIN_STAGES)}, e.g. 4,3,3")
    if stage not in CHAIN_STAGES:
        raise ConfigError(f"data.stage={stage!r}; valid: {', '.join(CHAIN_STAGES)}")
    cuts = np.round(np.cumsum([0, *weights]) / sum(weights) * n).astype(int)
    i = CHAIN_STAGES.index(stage)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[cuts[i] : cuts[i + 1]])


def special_ids(tok) -> tuple[int, int]:
    """``(eos id, pad id)`` of a tokenizer (``<pad>`` where it has one, else EOS)."""
    eos = special_id(tok, EOS_CANDIDATES, "end-of-sequence")
    pad = tok.token_to_id(PAD_CANDIDATES[0])
    return eos, (pad if pad is not None else eos)


def resolve_paths(path: str | None) -> list[Path]:
    """Files of ``path``: one file, a glob, or several separated by commas."""
    if path is None:
        raise ConfigError(
            "set data.path to Commonsense170K-format JSON (e.g. data.path=commonsense_170k.json, "
            "a glob, or several files separated by commas)"
        )
    files = [Path(f) for part in str(path).split(",") if part.strip() for f in sorted(glob.glob(str(Path(part.strip()).expanduser())))]
    if not files:
        raise FileNotFoundError(f"data.path={path}: no such file (give a JSON file, a glob, or files separated by commas)")
    return files


def read_records(files: list[Path]) -> list[dict]:
    """Every record of ``files`` (JSON array or JSON lines), checked for ``instruction`` and ``output`` strings."""
    records = []
    for file in files:
        for i, row in enumerate(read_items(file, 'records {"instruction", "input", "output", "answer"}')):
            if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in REQUIRED_FIELDS):
                raise ConfigError(
                    f"{file}: record {i} is not an object with string fields {', '.join(REQUIRED_FIELDS)} "
                    f'(Commonsense170K format {{"instruction", "input", "output", "answer"}}): {str(row)[:200]}'
                )
            records.append(row)
    if not records:
        raise ConfigError(f"data.path: {', '.join(map(str, files))} hold no records")
    return records


def encode_examples(records: list[dict], tokenizer, eos_id: int, template: str, train_on_inputs: bool) -> list[tuple[np.ndarray, int]]:
    """``(ids, m)`` per record: prompt ids ‖ output ids ‖ EOS, and m = the number of unscored prompt tokens."""
    prompts = [build_prompt(r["instruction"], r.get("input"), template) for r in records]
    prompt_ids = tokenizer.encode_batch(prompts, add_special_tokens=False)
    output_ids = tokenizer.encode_batch([r["output"] for r in records], add_special_tokens=False)
    out = []
    for p, o in zip(prompt_ids, output_ids):
        ids = np.asarray(p.ids + o.ids + [eos_id], dtype=np.int64)
        out.append((ids, 0 if train_on_inputs else len(p.ids)))
    return out


def example_labels(ids: np.ndarray, prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, labels)`` of one example: inputs x_0..x_{n-2}, labels x_{t+1} with prompt targets ignored."""
    labels = ids[1:].copy()
    labels[: max(prompt_len - 1, 0)] = IGNORE_INDEX
    return ids[:-1], labels


class PaddedExamples(Dataset):
    """One example per item, truncated to ``seq_len`` inputs (variable length; the collate pads)."""

    def __init__(self, examples: list[tuple[np.ndarray, int]], seq_len: int):
        self.items = []
        for ids, m in examples:
            inputs, labels = example_labels(ids[: seq_len + 1], m)
            if (labels != IGNORE_INDEX).any():
                self.items.append((inputs, labels))
        self.dropped = len(examples) - len(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        inputs, labels = self.items[i]
        return {"input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}

    def num_target_tokens(self) -> int:
        return int(sum((labels != IGNORE_INDEX).sum() for _, labels in self.items))


class PackedExamples(Dataset):
    """Examples concatenated into one stream of (token, label) pairs, cut into windows of ``seq_len``."""

    def __init__(self, examples: list[tuple[np.ndarray, int]], seq_len: int):
        pairs = [example_labels(ids, m) for ids, m in examples]
        # within an example, labels are its next tokens; across examples, the last input of one example predicts
        # the first token of the next: that position is a boundary and is not scored
        inputs = np.concatenate([np.append(i, ids[-1]) for (i, _), (ids, _) in zip(pairs, examples)])
        labels = np.concatenate([np.append(lab, IGNORE_INDEX) for _, lab in pairs])
        n = len(inputs) // seq_len
        self.inputs = inputs[: n * seq_len].reshape(n, seq_len)
        self.labels = labels[: n * seq_len].reshape(n, seq_len)
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.from_numpy(self.inputs[i]), "labels": torch.from_numpy(self.labels[i])}

    def num_target_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())


def pad_collate(pad_id: int, multiple: int = 8):
    """Right-pad ``input_ids`` with ``pad_id`` and ``labels`` with IGNORE_INDEX to the longest row (rounded up to ``multiple``)."""

    def collate(rows: list[dict]) -> dict:
        longest = max(len(r["input_ids"]) for r in rows)
        width = -(-longest // multiple) * multiple
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r["input_ids"])] = r["input_ids"]
            labels[i, : len(r["labels"])] = r["labels"]
        return {"input_ids": ids, "labels": labels}

    return collate


class InstructionDataModule(ResumableOrder, L.LightningDataModule):
    """Commonsense170K-format instruction data (``data.loader=instruction``) for ``task=sft_commonsense``.

    ``tokenizer`` is ``embedded``, a ``tokenizer.json``, a hub name, or a run folder / weights file whose
    pretraining tokenizer is used (the shipped config sets it to ``${init_from}``).  ``batch_size`` is the per-device
    micro-batch; ``global_batch_size`` is reached by gradient accumulation.  Each DDP rank reads a disjoint part of
    a per-epoch permutation from ``seed``.
    """

    def __init__(
        self,
        path: str | None = None,
        val_path: str | None = None,
        val_size: int = 120,
        split_seed: int = 42,
        tokenizer: str | None = None,
        template: str = "alpaca",
        train_on_inputs: bool = False,
        seq_len: int = 256,
        mode: str = "pad",
        batch_size: int = 16,
        global_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        max_train_tokens: int | None = None,
        stage_split: str | None = None,
        format: str = "instruction",
        split: str = "train_sft",
        seed: int = 0,
        name: str | None = None,
        label: str | None = None,
    ):
        super().__init__()
        if mode not in ("pad", "pack"):
            raise ConfigError(f"data.mode must be 'pad' or 'pack', got {mode!r}")

        if format not in ("instruction", "binarized"):
            raise ConfigError(
                f"data.format={format!r}; valid: instruction (Commonsense170K fields), binarized (UltraFeedback: "
                "prompt and chosen responses, local parquet/JSON or a hub name with data.split)"
            )
        if format == "binarized" and path is None:
            raise ConfigError("set data.path to UltraFeedback-binarized parquet/JSON files or a hub name (data.format=binarized)")
        self.format, self.split, self.path = format, split, path
        self.files = resolve_paths(path) if format == "instruction" else [Path(str(path))]
        self.val_files = resolve_paths(val_path) if val_path is not None else None
        self.val_size, self.split_seed = val_size, split_seed
        self.tokenizer = TokenizerSpec(tokenizer_of(tokenizer))
        self.template, self.train_on_inputs = template, train_on_inputs
        self.seq_len, self.mode, self.seed = seq_len, mode, seed
        self.static_shapes = mode == "pack"  # padded batches vary in width: nothing to gain from a captured step
        self.batch_size, self.global_batch_size = batch_size, global_batch_size
        self.eval_batch_size, self.num_workers = eval_batch_size or batch_size, num_workers
        self.max_train_tokens, self.stage_split = max_train_tokens, stage_split
        self.dataset_name = name or data_name(",".join(str(f) for f in self.files))
        self.dataset_label = label or f"instruction data {', '.join(str(f) for f in self.files)}"
        self._resume: tuple[int, int] | None = None

    def _split(self, records: list[dict]) -> tuple[list[dict], list[dict]]:
        if self.val_files is not None:
            return records, read_records(self.val_files)
        if not 0 < self.val_size < len(records):
            raise ConfigError(f"data.val_size={self.val_size} must be between 1 and the {len(records)} records - 1 (or give data.val_path)")
        order = np.random.default_rng(self.split_seed).permutation(len(records))
        held = set(order[: self.val_size].tolist())
        return [r for i, r in enumerate(records) if i not in held], [records[i] for i in sorted(held)]

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        tok = self.tokenizer.load()
        self.vocab_size = tok.get_vocab_size()
        self.eos_id, self.pad_id = special_ids(tok)
        if self.format == "binarized":
            records = binarized_instructions(str(self.path), self.split)
        else:
            records = read_records(self.files)
        train, val = self._split([records[i] for i in stage_share(len(records), self.stage_split, "sft", self.split_seed)])
        encode = lambda rows: encode_examples(rows, tok, self.eos_id, self.template, self.train_on_inputs)  # noqa: E731
        train_examples = encode(train)
        if self.max_train_tokens is not None:
            lengths = np.cumsum([len(ids) for ids, _ in train_examples])
            train_examples = train_examples[: max(1, int(np.searchsorted(lengths, self.max_train_tokens, side="right")))]
        dataset = PackedExamples if self.mode == "pack" else PaddedExamples
        self.train_set, self.val_set = dataset(train_examples, self.seq_len), dataset(encode(val), self.seq_len)
        if len(self.train_set) == 0:
            raise ConfigError(f"no training example has a response within data.seq_len={self.seq_len} tokens; raise data.seq_len")
        log.info(
            "instruction data: %d train / %d val %s (%d without a response within %d tokens dropped)",
            len(self.train_set),
            len(self.val_set),
            "windows" if self.mode == "pack" else "examples",
            self.train_set.dropped + self.val_set.dropped,
            self.seq_len,
        )

    def describe(self) -> dict:
        return {
            "name": self.dataset_name,
            "label": self.dataset_label,
            "source": ",".join(map(str, self.files)),
            "val_source": ",".join(map(str, self.val_files)) if self.val_files else f"{self.val_size} held out (seed {self.split_seed})",
            "tokenizer": self.tokenizer.name,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "mode": self.mode,
            "template": self.template,
            "train_on_inputs": self.train_on_inputs,
            "num_train_sequences": len(self.train_set),
            "num_val_sequences": len(self.val_set),
            "num_train_target_tokens": self.train_set.num_target_tokens(),
            "num_val_target_tokens": self.val_set.num_target_tokens(),
            "dropped_examples": self.train_set.dropped + self.val_set.dropped,
        }

    def _loader(self, dataset, batch_size: int, sampler, drop_last: bool) -> DataLoader:
        collate = pad_collate(self.pad_id) if self.mode == "pad" else None
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=drop_last,
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.batch_size, self._train_sampler(len(self.train_set)), drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.eval_batch_size, self._val_sampler(len(self.val_set)), drop_last=False)
