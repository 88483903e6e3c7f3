"""Batched scoring with a mixbench causal LM: log-likelihoods of continuations and greedy generation.

Sequences are sorted by length and right-padded.  In a causal model the output at a position depends only on the
tokens before it, so the padding after a sequence never changes its scored positions.  For a context c and a
continuation y (token ids), with h the final hidden states and W the LM head::

    log p(y | c) = Σ_j log softmax(W h_{|c|+j-1})[y_j]        is_greedy = ∀j: argmax_v (W h_{|c|+j-1})_v = y_j

Only the continuation positions go through the head (no (batch × length × vocab) logits); identical inputs
(one context with single-token choices " A", " B", ...) are run once.  Inputs longer than ``max_length`` lose
tokens from the left, as in lm-evaluation-harness.  Generation is greedy, without a KV cache (each step re-reads
the whole prefix): fine for the short answers of multiple-choice and instruction tasks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

from ..core.errors import ConfigError

PRECISIONS = ("auto", "32", "bf16", "16")


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given, else the GPU when there is one."""
    return torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Scorer:
    """Scores token sequences with ``model`` (a mixbench LM: ``model(ids, return_hidden=True)`` and ``model.head``).

    ``precision``: ``auto`` (bf16 autocast on a GPU, fp32 on the CPU), ``32``, ``bf16`` or ``16`` (autocast); the
    log-softmax is always computed in fp32.  ``batch_size`` counts sequences per forward pass.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: str | torch.device | None = None,
        batch_size: int = 16,
        max_length: int | None = None,
        precision: str = "auto",
    ):
        if precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
        if int(batch_size) < 1:
            raise ConfigError(f"batch size must be at least 1, got {batch_size}")
        self.device = pick_device(str(device) if device is not None else None)
        self.model = model.to(self.device).eval()
        self.batch_size = int(batch_size)
        model_max = getattr(getattr(model, "cfg", None), "max_seq_len", None)
        self.max_length = int(max_length or model_max or 2048)
        if model_max is not None and self.max_length > model_max:
            raise ConfigError(f"max length {self.max_length} exceeds the model's max_seq_len={model_max}")
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" else "32"
        self.dtype = {"32": None, "bf16": torch.bfloat16, "16": torch.float16}[precision]

    def _autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _hidden(self, ids: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return self.model(ids, return_hidden=True)

    def _logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            logits = self.model.head(hidden)
        return torch.log_softmax(logits.float(), dim=-1)

    def _batch(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        return ids.to(self.device, non_blocking=True)

    @torch.no_grad()
    def loglikelihood(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` for every ``(context ids, continuation ids)``."""
        inputs: dict[tuple[int, ...], list[int]] = {}  # model input → requests reading it
        targets = []
        for i, (context, continuation) in enumerate(pairs):
            if not continuation:
                raise ValueError("empty continuation")
            if len(continuation) > self.max_length:
                raise ValueError(f"continuation of {len(continuation)} tokens exceeds max_length={self.max_length}")
            whole = (list(context) + list(continuation))[-(self.max_length + 1) :]
            inputs.setdefault(tuple(whole[:-1]), []).append(i)
            targets.append(list(continuation))
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        order = sorted(inputs, key=len, reverse=True)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            hidden = self._hidden(self._batch(chunk))
            rows, cols, tokens, owner = [], [], [], []
            for b, seq in enumerate(chunk):
                for request in inputs[seq]:
                    y = targets[request]
                    rows += [b] * len(y)
                    cols += range(len(seq) - len(y), len(seq))
                    tokens += y
                    owner += [request] * len(y)
            logprobs = self._logprobs(hidden[torch.as_tensor(rows, device=self.device), torch.as_tensor(cols, device=self.device)])
            tokens_t = torch.as_tensor(tokens, device=self.device)
            picked = logprobs.gather(1, tokens_t[:, None]).squeeze(1).double().cpu().tolist()
            greedy = (logprobs.argmax(-1) == tokens_t).cpu().tolist()
            sums: dict[int, list] = {}
            for request, lp, g in zip(owner, picked, greedy):
                acc = sums.setdefault(request, [0.0, True])
                acc[0] += lp
                acc[1] = acc[1] and g
            for request, (lp, g) in sums.items():
                results[request] = (lp, bool(g))
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        eos_id: int | None = None,
        stop: Callable[[list[int]], bool] | None = None,
    ) -> list[list[int]]:
        """Greedy continuations of ``prompts`` (token ids), at most ``max_new_tokens`` each, ending at ``eos_id`` (kept
        out of the result) or as soon as ``stop(generated ids)`` is true.  Prompts lose tokens from the left to fit."""
        if max_new_tokens < 1 or max_new_tokens >= self.max_length:
            raise ConfigError(f"max new tokens must be in [1, {self.max_length - 1}], got {max_new_tokens}")
        keep = self.max_length - max_new_tokens
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
        outputs: list[list[int]] = [[] for _ in prompts]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            rows = [list(prompts[i])[-keep:] or [eos_id or 0] for i in chunk]
            lengths = [len(r) for r in rows]
            ids = torch.zeros((len(rows), max(lengths) + max_new_tokens), dtype=torch.long, device=self.device)
            ids[:, : max(lengths)] = self._batch(rows)
            active = list(range(len(rows)))
            for _ in range(max_new_tokens):
                width = max(lengths[b] for b in active)
                hidden = self._hidden(ids[active, :width])
                last = hidden[
                    torch.arange(len(active), device=self.device), torch.as_tensor([lengths[b] - 1 for b in active], device=self.device)
                ]
                next_tokens = self._logprobs(last).argmax(-1).cpu().tolist()
                still = []
                for b, token in zip(active, next_tokens):
                    if eos_id is not None and token == eos_id:
                        continue
                    ids[b, lengths[b]] = token
                    lengths[b] += 1
                    generated = outputs[chunk[b]]
                    generated.append(token)
                    if stop is None or not stop(generated):
                        still.append(b)
                active = still
                if not active:
                    break
        return outputs
