"""Configuration of a mixbench LLaMA exported for Hugging Face transformers (written by `mixbench export --format hf`).

``mixbench_model`` / ``mixbench_options`` / ``mixbench_norm`` are the run's model description (preset, architecture
options, norm-placement settings); the usual transformers fields are derived from them.
"""

from transformers import PretrainedConfig


class MixbenchConfig(PretrainedConfig):
    model_type = "mixbench_llama"

    def __init__(
        self, mixbench_model: str = "llama_debug", mixbench_options: dict | None = None, mixbench_norm: dict | None = None, **kwargs
    ):
        self.mixbench_model = mixbench_model
        self.mixbench_options = dict(mixbench_options or {})
        self.mixbench_norm = dict(mixbench_norm or {})
        options = self.mixbench_options
        for key, value in (
            ("vocab_size", options.get("vocab_size")),
            ("hidden_size", options.get("hidden_size")),
            ("num_hidden_layers", options.get("num_layers")),
            ("num_attention_heads", options.get("num_heads")),
            ("intermediate_size", options.get("intermediate_size")),
            ("max_position_embeddings", options.get("max_seq_len")),
        ):
            if value is not None:
                kwargs.setdefault(key, value)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
