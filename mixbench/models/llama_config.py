"""The architecture options of a LLaMA (:class:`LlamaConfig`) and its presets, free of torch: the ``lm`` family lists
its models from here without importing the network (:mod:`mixbench.models.llama`, which re-exports these names)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..core.errors import ConfigError
from ..core.traits import ModelTraits, dyt_llm_alpha0


@dataclass
class LlamaConfig:
    """Architecture of one LLaMA model; ``num_layers`` counts decoder blocks."""

    vocab_size: int = 32000
    hidden_size: int = 512
    intermediate_size: int = 1368
    num_heads: int = 8
    num_layers: int = 12
    max_seq_len: int = 2048  # length of the RoPE cache
    rope_theta: float = 10000.0
    init_std: float = 0.02  # N(0, init_std) for every Linear
    embed_init_std: float = 0.02  # the official Mix-LN code uses sqrt(2/5) ≈ 0.632 here (all placements)
    attention_backend: str = "auto"  # SDPA kernel: auto (PyTorch chooses) | flash | cudnn | efficient | math; speed only
    score_head: bool = False  # a scalar head ``score`` beside the LM head (reward models: the score of a sequence's last token)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
        from ..layers.attention import check_attention_backend  # torch: only once a config is made

        check_attention_backend(self.attention_backend)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


LLAMA_PRESETS: dict[str, dict] = {
    # name: hidden, intermediate, heads, layers  (paper sizes; vocab 32000)
    "llama_71m": dict(hidden_size=512, intermediate_size=1368, num_heads=8, num_layers=12),
    "llama_130m": dict(hidden_size=768, intermediate_size=2048, num_heads=12, num_layers=12),
    "llama_250m": dict(hidden_size=768, intermediate_size=2560, num_heads=16, num_layers=24),
    "llama_350m": dict(hidden_size=1024, intermediate_size=2736, num_heads=16, num_layers=24),
    "llama_1b": dict(hidden_size=2048, intermediate_size=5461, num_heads=32, num_layers=24),
    "llama_7b": dict(hidden_size=4096, intermediate_size=11008, num_heads=32, num_layers=32),
    # small sizes for CPU runs and tests
    "llama_tiny": dict(hidden_size=256, intermediate_size=688, num_heads=4, num_layers=6, vocab_size=8192),
    "llama_debug": dict(hidden_size=64, intermediate_size=176, num_heads=4, num_layers=4, vocab_size=512),
}


def llama_config(name: str, **overrides) -> LlamaConfig:
    valid = {f.name for f in fields(LlamaConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise ConfigError(f"unknown LLaMA option(s) {unknown}; valid: {', '.join(sorted(valid))}")
    return LlamaConfig(**{**LLAMA_PRESETS[name], **overrides})


def llama_defaults(name: str) -> dict:
    return asdict(LlamaConfig(**LLAMA_PRESETS[name]))


# what the placements may need of a LLaMA (DyT: the √d gain on its token embeddings, α0 from the DyT paper's LLM width
# table); the lm family passes it to the models it builds, and an exported model's code passes it too
LLAMA_TRAITS = ModelTraits(token_embeddings=True, dyt_alpha0=dyt_llm_alpha0)
