"""Preference data for the reward model (``data.loader=preferences``) and prompts for ReMax (``data.loader=prompts``).

Sources (``data.path``; ``data.format`` ``auto`` tells them apart by their fields):

* ``binarized``: UltraFeedback as people use it, ``HuggingFaceH4/ultrafeedback_binarized`` — records with ``prompt``
  and ``chosen`` / ``rejected`` message lists (``[{"role": "user", ...}, {"role": "assistant", ...}]``); a hub name
  (with ``data.split``, e.g. ``train_prefs``) or local parquet / JSON / JSON-lines files, read by HF ``datasets``;
* ``commonsense``: the offline proxy from real multiple-choice data, the LLM-Adapters train sets (BoolQ, ARC-E, ARC-C,
  OBQA; ``{"instruction", "input", "output", "answer"}``): chosen = the record's own response ("the correct answer is
  answer2"), rejected = the same response naming a wrong option from the record's ``Answer format:`` line (drawn with
  ``split_seed``);
* ``embedded``: a tiny synthetic sample in the binarized format (``mixbench/assets/rlhf/``), for tests.

Every prompt is put in the SFT template (:mod:`mixbench.sft.prompt`): the policy sees what it was fine-tuned on.
``stage_split`` / ``stage`` give each stage of the chain its own share of one source, as DeepSpeed-Chat's
``--data_split`` does: the records are permuted once with ``split_seed`` and cut in proportion to the weights
(``"4,3,3"``: 40 % to ``sft``, 30 % to ``rm``, 30 % to ``rl``); ``task=sft_commonsense`` takes the same options.
Within a stage's share, ``val_size`` records are held out (the same for every run, placement and seed).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from ..core.errors import ConfigError
from ..core.jsonitems import read_items
from ..data.samplers import ResumableOrder
from ..data.tokens import TokenizerSpec
from ..sft.data import EMBEDDED_SAMPLE, binarized_triples, data_name, files_of, read_records, special_ids, stage_share
from ..sft.prompt import build_prompt
from ..training.trained import tokenizer_of

log = logging.getLogger(__name__)
FORMATS = ("auto", "binarized", "commonsense")


@dataclass(frozen=True)
class Pair:
    """One preference: the prompt text in the SFT template, the chosen and the rejected response."""

    prompt: str
    chosen: str
    rejected: str


def binarized_pairs(path: str, split: str, template: str) -> list[Pair]:
    """Pairs of UltraFeedback-binarized records, the prompt in ``template``."""
    return [
        Pair(build_prompt(instruction, None, template), chosen, rejected)
        for instruction, chosen, rejected in binarized_triples(path, split)
    ]


def commonsense_pairs(records: list[dict], template: str, seed: int) -> list[Pair]:
    """Chosen = the record's response; rejected = that response with the answer replaced by another listed option."""
    pairs = []
    for i, r in enumerate(records):
        match = re.search(r"Answer format: (\S+)\s*$", r["instruction"])
        answer, output = str(r.get("answer", "")), r["output"]
        options = [o for o in match.group(1).split("/") if o != answer] if match else []
        at = output.rfind(answer) if answer else -1
        if not options or at < 0:
            raise ConfigError(
                f"record {i} has no 'Answer format: a/b/...' line or its output does not name its answer "
                f"{answer!r}: {r['instruction'][-120:]!r}; the commonsense format needs both"
            )
        wrong = options[int(np.random.default_rng([seed, i]).integers(len(options)))]
        rejected = output[:at] + wrong + output[at + len(answer) :]
        pairs.append(Pair(build_prompt(r["instruction"], r.get("input"), template), output, rejected))
    return pairs


def read_pairs(path: str | None, fmt: str, split: str, template: str, seed: int) -> tuple[list[Pair], str]:
    """``(pairs, format read)`` of ``data.path``."""
    if path is None:
        raise ConfigError(
            "set data.path: UltraFeedback-binarized parquet/JSON files or a hub name, Commonsense170K-format "
            "JSON (the offline proxy), or 'embedded' (a tiny synthetic sample)"
        )
    if fmt not in FORMATS:
        raise ConfigError(f"data.format={fmt!r}; valid: {', '.join(FORMATS)}")
    if path == "embedded":
        path, fmt = str(EMBEDDED_SAMPLE), "binarized"
    files = files_of(path)
    if fmt == "auto":
        if files and files[0].suffix in (".json", ".jsonl"):
            first = read_items(files[0])[:1]
            fmt = "commonsense" if first and "instruction" in first[0] else "binarized"
        else:
            fmt = "binarized"
    if fmt == "commonsense":
        if not files:
            raise ConfigError(f"data.path={path}: no such file (the commonsense format is read from local JSON files)")
        return commonsense_pairs(read_records(files), template, seed), fmt
    return binarized_pairs(path, split, template), fmt


class _PreferenceSource(ResumableOrder, L.LightningDataModule):
    """The share of ``stage`` of a preference source, tokenized, with ``val_size`` pairs held out."""

    stage_default = "rm"

    def __init__(
        self,
        path: str | None = None,
        format: str = "auto",
        split: str = "train_prefs",
        stage_split: str | None = None,
        stage: str | None = None,
        val_size: int = 64,
        split_seed: int = 42,
        tokenizer: str | None = None,
        template: str = "alpaca",
        seq_len: int = 512,
        prompt_len: int = 256,
        batch_size: int = 8,
        global_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        max_train_pairs: int | None = None,
        seed: int = 0,
        name: str | None = None,
        label: str | None = None,
    ):
        super().__init__()

        self.path, self.format, self.split = path, format, split
        self.stage_split, self.stage = stage_split, stage or self.stage_default
        self.val_size, self.split_seed = val_size, split_seed
        self.tokenizer = TokenizerSpec(tokenizer_of(tokenizer))
        self.template, self.seq_len, self.prompt_len = template, seq_len, prompt_len
        self.batch_size, self.global_batch_size = batch_size, global_batch_size
        self.eval_batch_size, self.num_workers = eval_batch_size or batch_size, num_workers
        self.max_train_pairs, self.seed, self.name, self.label = max_train_pairs, seed, name, label
        self._resume = None

    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        self.tok = self.tokenizer.load()
        self.vocab_size = self.tok.get_vocab_size()
        self.eos_id, self.pad_id = special_ids(self.tok)
        pairs, self.format_read = read_pairs(self.path, self.format, self.split, self.template, self.split_seed)
        share = [pairs[i] for i in stage_share(len(pairs), self.stage_split, self.stage, self.split_seed)]
        if not 0 < self.val_size < len(share):
            raise ConfigError(f"data.val_size={self.val_size} must be between 1 and the {len(share)} pairs of this stage's share - 1")
        order = np.random.default_rng(self.split_seed).permutation(len(share))
        held = set(order[: self.val_size].tolist())
        train = [p for i, p in enumerate(share) if i not in held]
        if self.max_train_pairs is not None:
            train = train[: self.max_train_pairs]
        self.num_source_pairs, self.num_share_pairs = len(pairs), len(share)
        self.train_set, self.val_set = self.encode(train), self.encode([share[i] for i in sorted(held)])
        if len(self.train_set) < self.batch_size:
            raise ConfigError(
                f"{len(self.train_set)} training items in the {self.stage} share, fewer than data.batch_size={self.batch_size} "
                "(pairs identical after truncation are dropped): give more data, a larger share or a smaller batch"
            )
        log.info(
            "%s: %d train / %d held-out of the %s share (%d of %d pairs)",
            type(self).__name__,
            len(self.train_set),
            len(self.val_set),
            self.stage,
            len(share),
            len(pairs),
        )

    def encode(self, pairs: list[Pair]) -> list:
        raise NotImplementedError

    def describe(self) -> dict:
        return {
            "name": self.name or (data_name(self.path) if self.path not in (None, "embedded") else "embedded_preferences"),
            "label": self.label or (f"preferences {self.path} ({self.format_read}), {self.stage} share of stage_split={self.stage_split}"),
            "source": str(self.path),
            "format": self.format_read,
            "stage": self.stage,
            "stage_split": self.stage_split,
            "tokenizer": self.tokenizer.name,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "prompt_len": self.prompt_len,
            "template": self.template,
            "num_source_pairs": self.num_source_pairs,
            "num_stage_pairs": self.num_share_pairs,
            "num_train": len(self.train_set),
            "num_val": len(self.val_set),
        }

    def _loader(self, items: list, batch_size: int, sampler, drop_last: bool) -> DataLoader:
        return DataLoader(
            items,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=drop_last,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.batch_size, self._train_sampler(len(self.train_set)), drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.eval_batch_size, self._val_sampler(len(self.val_set)), drop_last=False)


def _right_pad(rows: list[np.ndarray], pad_id: int) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.from_numpy(r)
    return out


class PreferenceDataModule(_PreferenceSource):
    """Pairs for the reward model: prompt ‖ response ‖ EOS for both responses, truncated to ``seq_len`` tokens; a batch
    is ``input_ids`` (2B, T) — the B chosen rows, then the B rejected rows, right-padded — and ``last`` (2B,), the index
    of each row's last token (where the score is read).  Pairs that truncation makes identical are dropped."""

    objective = "preferences"

    def encode(self, pairs: list[Pair]) -> list:
        prompts = self.tok.encode_batch([p.prompt for p in pairs], add_special_tokens=False)
        chosen = self.tok.encode_batch([p.chosen for p in pairs], add_special_tokens=False)
        rejected = self.tok.encode_batch([p.rejected for p in pairs], add_special_tokens=False)
        items = []
        for p, c, r in zip(prompts, chosen, rejected):
            a, b = (np.asarray(p.ids + x.ids + [self.eos_id], dtype=np.int64)[: self.seq_len] for x in (c, r))
            if not np.array_equal(a, b):
                items.append((a, b))
        self.dropped = len(pairs) - len(items)
        return items

    def collate(self, rows: list) -> dict:
        seqs = [a for a, _ in rows] + [b for _, b in rows]
        return {"input_ids": _right_pad(seqs, self.pad_id), "last": torch.tensor([len(s) - 1 for s in seqs])}


class PromptDataModule(_PreferenceSource):
    """Prompts for ReMax: the last ``prompt_len`` tokens of each prompt, left-padded (``prompt_ids``, ``prompt_mask``),
    with the chosen response as ``answers`` (the known answer of the rule reward)."""

    objective = "prompts"
    stage_default = "rl"

    def encode(self, pairs: list[Pair]) -> list:
        prompts = self.tok.encode_batch([p.prompt for p in pairs], add_special_tokens=False)
        return [(np.asarray(p.ids[-self.prompt_len :], dtype=np.int64), pair.chosen) for p, pair in zip(prompts, pairs)]

    def collate(self, rows: list) -> dict:
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (p, _) in enumerate(rows):
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.from_numpy(p), 1
        return {"prompt_ids": ids, "prompt_mask": mask, "answers": [a for _, a in rows]}

    def decode(self, tokens: list[int]) -> str:
        return self.tok.decode(tokens)


def synthetic_sample(n: int = 48) -> list[dict]:
    """The embedded sample (``mixbench/assets/rlhf/preferences_sample.jsonl``): synthetic parity and comparison questions
    in the UltraFeedback-binarized format, the chosen answer right and the rejected one wrong."""
    rows = []
    for i in range(n):
        a, b = 3 + 7 * i % 50, 11 + 5 * i % 40
        if i % 2:
            even = a % 2 == 0
            question = f"Is {a} an even number?"
            right = f"{'Yes' if even else 'No'}, {a} is {'even' if even else 'odd'}."
            wrong = f"{'No' if even else 'Yes'}, {a} is {'odd' if even else 'even'}."
        else:
            big, small = max(a, b + 1), min(a, b + 1)
            question, right, wrong = (
                f"Which number is larger, {a} or {b + 1}?",
                f"{big} is larger than {small}.",
                f"{small} is larger than {big}.",
            )
        user = {"role": "user", "content": question}
        rows.append(
            {
                "prompt": question,
                "prompt_id": f"synthetic-{i}",
                "chosen": [user, {"role": "assistant", "content": right}],
                "rejected": [user, {"role": "assistant", "content": wrong}],
                "score_chosen": 10.0,
                "score_rejected": 1.0,
            }
        )
    return rows
