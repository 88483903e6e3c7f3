"""Sampling and greedy decoding from the LLaMA policy with its KV cache, and the log-probabilities of given responses.

Prompts are left-padded (``prompt_mask`` 1 on real tokens), so every response starts at the same column.  A response
ends at its first EOS (which belongs to it: DeepSpeed-Chat / ReMax count the EOS as an action); the positions after it
hold ``pad_id`` and have ``response_mask`` 0.  Sampling draws from softmax(logits / temperature) restricted to the
smallest set of most probable tokens whose probability reaches ``top_p`` (nucleus sampling, Holtzman et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Responses:
    """``tokens`` (B, N) and ``mask`` (B, N): 1 up to and including the first EOS; ``lengths`` = mask.sum(-1)."""

    tokens: torch.Tensor
    mask: torch.Tensor

    @property
    def lengths(self) -> torch.Tensor:
        return self.mask.sum(-1)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` with every token outside the nucleus set to −inf: sorted by probability, a token stays while the
    probability mass *before* it is below ``top_p`` (so the most probable token always stays)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    before = sorted_logits.softmax(-1).cumsum(-1) - sorted_logits.softmax(-1)
    drop = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, before >= top_p)
    return logits.masked_fill(drop, float("-inf"))


def next_token(logits: torch.Tensor, greedy: bool, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """The argmax (``greedy``) or a nucleus sample of each row of ``logits`` (B, V)."""
    if greedy:
        return logits.argmax(-1)
    probs = top_p_filter(logits.float() / temperature, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    greedy: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Responses:
    """Responses of ``model`` (:class:`mixbench.models.llama.Llama`) to the left-padded prompts, up to ``max_new_tokens``
    each.  ``use_cache=False`` recomputes the whole sequence at every step (the reference the KV cache must match);
    decoding stops once every row has produced EOS."""
    b = prompt_ids.shape[0]
    mask = prompt_mask.long()
    cache = model.new_cache(prompt_ids.shape[1] + max_new_tokens) if use_cache else None
    ids, step_ids = prompt_ids, prompt_ids
    done = torch.zeros(b, dtype=torch.bool, device=prompt_ids.device)
    tokens, keep = [], []
    for _ in range(max_new_tokens):
        hidden = model.forward_masked(step_ids, mask, cache) if use_cache else model.forward_masked(ids, mask)
        token = next_token(model.head(hidden[:, -1]), greedy, temperature, top_p, generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        keep.append(~done)
        tokens.append(token)
        done = done | (token == eos_id)
        ids, step_ids = torch.cat([ids, token[:, None]], 1), token[:, None]
        mask = torch.cat([mask, keep[-1].long()[:, None]], 1)
        if bool(done.all()):
            break
    return Responses(torch.stack(tokens, 1), torch.stack(keep, 1).long())


def joined(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, responses: Responses) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of prompt ‖ response (B, P + N)."""
    return torch.cat([prompt_ids, responses.tokens], 1), torch.cat([prompt_mask.long(), responses.mask], 1)


def response_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, responses: Responses) -> torch.Tensor:
    """log π(y_t | x, y_<t) of every response token (B, N) under ``model`` (0 where ``responses.mask`` is 0); keeps the
    graph when called with gradients."""
    ids, mask = joined(prompt_ids, prompt_mask, responses)
    p = prompt_ids.shape[1]
    hidden = model.forward_masked(ids[:, :-1], mask[:, :-1])[:, p - 1 :]
    logprobs = F.log_softmax(model.head(hidden).float(), -1).gather(-1, responses.tokens[..., None]).squeeze(-1)
    return logprobs * responses.mask


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last 1 in each row of ``mask`` (B, T) (0 for a row without any)."""
    positions = torch.arange(mask.shape[1], device=mask.device)
    return (positions * mask.bool()).amax(-1)
