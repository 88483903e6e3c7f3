"""LLaMA decoder (RMSNorm, SwiGLU, RoPE, causal SDPA attention, no biases, untied head) with a per-block norm placement.

Sizes follow the Mix-LN / GaLore configs (paper Table 7; hidden/intermediate/heads/layers from the
official ``configs/llama_*.json``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..core.constants import IGNORE_INDEX
from ..core.traits import ModelTraits
from ..layers import (
    DyT,
    NormSpec,
    PlacedResidual,
    get_placement,
    init_placements_,
    norm_factory,
    project_qkv,
    scaled_init_,
)
from ..layers.attention import causal_attention
from .llama_config import LLAMA_PRESETS, LLAMA_TRAITS, LlamaConfig, llama_config, llama_defaults  # noqa: F401 (the light part, re-exported)


def rope_cache(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (seq_len, head_dim) for rotary embeddings (rotate-half layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin for x of shape (B, heads, T, head_dim)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention; q/k/v share one fused projection ``qkv`` (rows [q; k; v]).

    ``q_norm`` / ``k_norm`` / ``v_norm`` (``None`` unless ``norm.qk_norm`` or a HybridNorm placement adds them,
    :mod:`mixbench.layers.attention`) act before RoPE."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.num_heads, self.head_dim, self.backend = cfg.num_heads, cfg.head_dim, cfg.attention_backend
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.qk_norm_mode = "none"
        self.q_norm = self.k_norm = self.v_norm = None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        """Causal attention (training); with ``mask`` (B, 1, t, S; True = may attend) the explicit-mask path of
        :meth:`Llama.forward_masked`, whose keys and values ``cache`` extends (block ``layer``'s)."""
        b, t, h = x.shape
        q, k, v = project_qkv(self, x)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if mask is None:
            y = causal_attention(q, k, v, self.backend)
        else:
            if cache is not None:
                k, v = cache.update(layer, k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, h))


class KVCache:
    """Keys and values of every block for incremental decoding: per block (B, heads, capacity, head_dim), filled up to
    ``length`` positions; allocated at the first update in the dtype of the keys (so under autocast too)."""

    def __init__(self, num_layers: int, capacity: int):
        self.capacity, self.length = capacity, 0
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k``, ``v`` (B, heads, t, head_dim) at positions ``length .. length + t`` of block ``layer``; return the
        keys and values of positions ``0 .. length + t``.  :meth:`advance` moves ``length`` once every block has written."""
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"KV cache of {self.capacity} positions is full (needs {end})")
        if self.keys[layer] is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self.keys[layer] = k.new_zeros(shape)
            self.values[layer] = v.new_zeros(shape)
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, t: int) -> None:
        self.length += t


class SwiGLU(nn.Module):
    """fc2(silu(x W_gate) * (x W_up)); gate and up share one fused projection ``fc1`` (rows [gate; up])."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class LlamaBlock(PlacedResidual, nn.Module):
    """One decoder block: attention then SwiGLU, each wrapped by this block's norm placement."""

    def __init__(self, cfg: LlamaConfig, norm: NormSpec, depth: int, make_norm):
        super().__init__()
        self.norm1 = make_norm(cfg.hidden_size, position="attn")
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = make_norm(cfg.hidden_size, position="mlp")
        self.mlp = SwiGLU(cfg)
        self.setup_placement(norm, depth, cfg.num_layers, cfg.hidden_size, make_norm)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        return self.placed_forward(x, lambda h: self.attn(h, cos, sin, mask, cache, layer), self.mlp)


class Llama(nn.Module):
    """Token embedding (→ optional learnable gain → optional embedding norm) → L placed blocks → optional final norm → untied LM head.

    The norms come from the placement's norm factory (the ``norm.kind`` norm, or DyT for ``norm=dyt``); the
    embedding norm ``embed_norm`` (Peri-LN's ``norm.embed_norm``) exists only when on, after ``scaled_embed``; so does
    the learnable scalar ``embed_gain`` (DyT's ``norm.dyt_embed_gain``, initialised to √d, before the embedding norm).
    """

    forward_computes_loss = True  # forward(input_ids, labels=...) returns the summed cross-entropy

    def __init__(self, cfg: LlamaConfig, norm: NormSpec = NormSpec(), traits: ModelTraits = LLAMA_TRAITS):
        super().__init__()
        placement = get_placement(norm.placement)
        norm = placement.for_model(norm, traits, cfg.hidden_size)  # e.g. DyT's α0 for this width (the lm family passes its traits)
        self.cfg, self.norm_spec = cfg, norm
        self.plan = norm.plan(cfg.num_layers)
        make_norm = placement.norm_factory(norm, norm_factory(norm.kind or "rmsnorm", eps=norm.eps or 1e-6, bias=False, groups=norm.groups))
        self.embed_scale = cfg.hidden_size**0.5 if norm.scaled_embed else 1.0
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_norm = make_norm(cfg.hidden_size, position="embed") if placement.wants_embed_norm(norm) else None
        self.embed_gain_init = placement.embed_gain(norm, cfg.hidden_size)  # DyT's learnable √d (norm.dyt_embed_gain)
        self.embed_gain = nn.Parameter(torch.empty(1)) if self.embed_gain_init is not None else None
        self.blocks = nn.ModuleList(LlamaBlock(cfg, norm, i, make_norm) for i in range(cfg.num_layers))
        self.norm = make_norm(cfg.hidden_size, position="final") if norm.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.score = nn.Linear(cfg.hidden_size, 1, bias=False) if cfg.score_head else None
        cos, sin = rope_cache(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.grad_checkpointing = False
        self.reset_parameters()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them (timm's switch, same name):
        the same gradients, a block's input kept instead of all its intermediates, one more forward of compute."""
        self.grad_checkpointing = enable

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, init_std) Linears, N(0, embed_init_std) embedding, unit norm gains; then the norm
        options' and placements' own inits (scaled init of output projections, DeepNorm, ...)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=self.cfg.init_std)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.cfg.embed_init_std)
            elif hasattr(module, "weight") and isinstance(module, (nn.RMSNorm, nn.LayerNorm)):
                nn.init.ones_(module.weight)
            elif isinstance(module, DyT):
                module.reset_parameters()
        if self.embed_gain is not None:
            self.embed_gain.fill_(self.embed_gain_init)
        if self.norm_spec.scaled_init:
            scaled_init_([w for b in self.blocks for w in (b.attn.proj.weight, b.mlp.fc2.weight)], self.cfg.init_std, self.cfg.num_layers)
        init_placements_(self.blocks)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward), PaLM convention: 6·N + 12·L·H·T, where N
        counts the matrix parameters (blocks + LM head, not the embedding lookup)."""
        n = sum(p.numel() for name, p in self.named_parameters() if p.ndim == 2 and not name.startswith("embed."))
        return 6.0 * n + 12.0 * self.cfg.num_layers * self.cfg.hidden_size * seq_len

    @property
    def fresh_keys(self) -> tuple[str, ...]:
        """Weights that start fresh when the model is initialised from a run without them (``init_from``): the score head."""
        return ("score.weight",) if self.score is not None else ()

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (× ``embed_scale``, × the learnable ``embed_gain``, then the embedding norm, each where on)."""
        x = self.embed(input_ids)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if self.embed_gain is not None:
            x = x * self.embed_gain
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return x

    def forward_hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Final hidden states (B, T, H) after the final norm."""
        t = input_ids.shape[1]
        if t > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds model.max_seq_len={self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.embed_tokens(input_ids)
        for block in self.blocks:
            x = self._run_block(block, x, cos, sin)
        return self.norm(x)

    def _run_block(self, block: nn.Module, x: torch.Tensor, *args) -> torch.Tensor:
        """``block(x, *args)``, recomputed in the backward pass where :meth:`set_grad_checkpointing` is on and this
        forward records gradients (never with a KV cache: a second forward would append to it again)."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, x, *args, use_reentrant=False)
        return block(x, *args)

    def forward_masked(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Final hidden states (B, t, H) of rows with padding anywhere (generation: left-padded prompts, responses that
        ended early).  ``attention_mask`` (B, S) marks the real tokens (1) of the whole sequence so far: S = t, or with
        ``cache`` S = ``cache.length`` + t, the new tokens continuing the cached ones (their keys and values are added).

        Token i of a row sits at RoPE position (number of real tokens before it) and attends to the real tokens at or
        before it; a pad token attends to itself only (its output is never read).  For a row without padding this is the
        training forward's computation (the causal kernel there, an explicit mask here)."""
        past = cache.length if cache is not None else 0
        t, total = input_ids.shape[1], attention_mask.shape[1]
        if total != past + t:
            raise ValueError(f"attention_mask covers {total} positions but the cache holds {past} and {t} are new")
        if total > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {total} exceeds model.max_seq_len={self.cfg.max_seq_len}")
        real = attention_mask.bool()
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)
        query = torch.arange(past, total, device=input_ids.device)[:, None]
        key = torch.arange(total, device=input_ids.device)[None, :]
        mask = ((key <= query) & real[:, None, None, :]) | (key == query)
        x = self.embed_tokens(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache, i) if cache is not None else self._run_block(block, x, cos, sin, mask, None, i)
        if cache is not None:
            cache.advance(t)
        return self.norm(x)

    def new_cache(self, capacity: int) -> KVCache:
        """An empty :class:`KVCache` for sequences of up to ``capacity`` positions."""
        return KVCache(self.cfg.num_layers, capacity)

    def score_last(self, hidden: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """The score head on the hidden state (B, T, H) at index ``last`` (B,) of each row: the reward model's r(x, y)."""
        if self.score is None:
            raise ValueError("this model has no score head (model.score_head=false): it is not a reward model")
        h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.score(h).squeeze(-1).float()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, return_hidden: bool = False) -> torch.Tensor:
        """Logits (B, T, V); the final hidden states (B, T, H) with ``return_hidden``; or, given next-token
        ``labels`` (−100 = ignored), the *summed* cross-entropy — computed inside the (compiled) forward so
        the fp32 up-cast of the logits fuses into the loss kernel instead of being materialized."""
        hidden = self.forward_hidden(input_ids)
        if return_hidden:
            return hidden
        logits = self.head(hidden)
        if labels is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


def build_llama(name: str, norm: NormSpec = NormSpec(), traits: ModelTraits = LLAMA_TRAITS, **overrides) -> Llama:
    cfg = llama_config(name, **overrides)
    return Llama(cfg, norm, traits)
