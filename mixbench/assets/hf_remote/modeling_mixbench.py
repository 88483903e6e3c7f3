"""A mixbench LLaMA as a transformers causal LM (written by `mixbench export --format hf`).

The network is mixbench's own code (the ``mb_*.py`` files beside this one are verbatim copies of the mixbench modules,
imports rewritten), rebuilt from ``config.json`` and loaded from ``model.safetensors`` (keys ``model.<mixbench key>``),
so every norm placement runs exactly as in mixbench.  A placement of the project the run came from is in its own
``mb_plugin_*.py``, registered by importing ``mb_plugins.py`` before the model is built.  Load with::

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    lm_eval --model hf --model_args pretrained=folder,trust_remote_code=True --tasks ...

No KV cache: generation re-reads the prefix at every step.  A left-padded batch (``attention_mask`` with zeros
before the tokens) is run row by row on its real tokens, so padding never changes the logits of real positions.
"""

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_mixbench import MixbenchConfig
from .mb_layers_placement import NormSpec  # its defining module: mixbench.layers may import its names lazily
from .mb_models_llama import Llama, LlamaConfig, rope_cache
from .mb_plugins import PLACEMENTS  # noqa: F401  (registers the project's placements the model uses)


class MixbenchForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = MixbenchConfig
    base_model_prefix = "model"
    _no_split_modules = ["LlamaBlock"]
    _supports_cache_class = False
    _tied_weights_keys = []

    def __init__(self, config: MixbenchConfig):
        super().__init__(config)
        self.model = Llama(LlamaConfig(**config.mixbench_options), NormSpec.from_dict(config.mixbench_norm))
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        """Every weight comes from model.safetensors; only the RoPE tables (not stored) are computed."""
        if isinstance(module, Llama):
            cos, sin = rope_cache(module.cfg.max_seq_len, module.cfg.head_dim, module.cfg.rope_theta)
            module.rope_cos.copy_(cos)
            module.rope_sin.copy_(sin)

    def get_input_embeddings(self):
        return self.model.embed

    def set_input_embeddings(self, value):
        self.model.embed = value

    def get_output_embeddings(self):
        return self.model.head

    def set_output_embeddings(self, value):
        self.model.head = value

    def _logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if attention_mask is None or bool(attention_mask.all()):
            return self.model(input_ids)
        logits = torch.zeros(*input_ids.shape, self.config.vocab_size, dtype=self.model.head.weight.dtype, device=input_ids.device)
        for row in range(input_ids.shape[0]):
            keep = attention_mask[row].bool()
            if keep.any():
                logits[row, keep] = self.model(input_ids[row, keep][None])[0].to(logits.dtype)
        return logits

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutput:
        logits = self._logits(input_ids, attention_mask)
        loss = None
        if labels is not None:  # transformers' convention: labels = input_ids, shifted here; -100 is ignored
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def _reorder_cache(self, past_key_values, beam_idx):
        return past_key_values
