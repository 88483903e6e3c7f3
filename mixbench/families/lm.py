"""The ``lm`` family: LLaMA causal language models (:mod:`mixbench.models.llama`) on token data."""

from __future__ import annotations

import math
import re
from functools import partial

from ..core.constants import IGNORE_INDEX
from ..core.errors import ConfigError
from ..core.families import Family, register_family
from ..models.llama_config import LLAMA_PRESETS, LLAMA_TRAITS, llama_defaults

# torch, the network and the training code are imported by the functions that use them: registering the family
# (`mixbench list`, `reclassify`) imports none of them


def lightning_module(cfg, model, datamodule):
    """Causal LM; a reward model on preference pairs (``data.loader=preferences``); ReMax on prompts (``prompts``)."""
    from ..training.lit import CausalLMModule, OptimConfig  # Lightning loads when a run builds its module, not for `mixbench list`

    objective = getattr(datamodule, "objective", "lm")
    if objective == "preferences":
        from ..rlhf.lit import RewardModelModule

        return RewardModelModule(model, OptimConfig.from_config(cfg.optim))
    if objective == "prompts":
        from ..rlhf.lit import remax_module

        return remax_module(cfg, model, datamodule)
    return CausalLMModule(model, OptimConfig.from_config(cfg.optim), loss_chunk_size=cfg.loss.chunk_size, loss_impl=cfg.loss.impl)


def options_from_data(cfg, options: dict, datamodule) -> dict:
    if datamodule.vocab_size > options["vocab_size"]:
        raise ConfigError(
            f"the tokenizer has {datamodule.vocab_size} tokens but model.vocab_size={options['vocab_size']}; "
            f"set model.vocab_size={datamodule.vocab_size} (or larger)"
        )
    return options


def data_options(cfg, options: dict) -> dict:
    """A streamed source is cached up to what the run will consume (+1 %)."""
    if options.get("path") is None and options.get("max_train_tokens") is None and cfg.trainer.max_steps > 0:
        from ..training.strategy import world_size

        global_batch = options.get("global_batch_size") or options["batch_size"] * world_size(cfg.trainer)
        options = {**options, "max_train_tokens": int(cfg.trainer.max_steps * global_batch * options["seq_len"] * 1.01)}
    return options


def check_config(cfg) -> None:
    from ..rlhf.checks import check_rlhf_config

    check_rlhf_config(cfg)


def analysis_loss(model, batch):
    labels = batch["labels"]
    return model(batch["input_ids"], labels=labels) / (labels != IGNORE_INDEX).sum().clamp(min=1)


def unigram_floor(datamodule) -> dict | None:
    """``{"val/loss": H}``, H the unigram entropy of the validation tokens: the best any context-free model can do."""
    entropy = getattr(datamodule, "unigram_entropy", None)
    return {"val/loss": entropy()} if entropy is not None else None


def never_learned(metrics: dict, floor: dict) -> str | None:
    """A reason when the final validation loss is not below the unigram floor — a run that stalled at token
    frequencies; None otherwise."""
    loss, entropy = metrics.get("val/loss"), floor.get("val/loss")
    if loss is None and metrics.get("val/ppl", 0) > 0:  # a record that kept only the perplexity
        loss = math.log(metrics["val/ppl"])
    if entropy is None or loss is None or not math.isfinite(loss):
        return None
    if loss >= entropy:
        return f"never learned beyond token frequencies: final val/loss {loss:.3f} ≥ unigram entropy {entropy:.3f} of the validation tokens"
    return None


def floor_from_reason(record: dict) -> dict | None:
    """The unigram floor an older record states in its divergence reason or warnings (records before floors were stored)."""
    texts = [(record.get("divergence") or {}).get("reason") or "", *record.get("warnings", [])]
    for text in texts:
        found = re.search(r"unigram entropy (\d+(?:\.\d+)?)", text)
        if found:
            return {"val/loss": float(found.group(1))}
    return None


def build(name: str, norm, **options):
    """:func:`mixbench.models.llama.build_llama` with the LLaMA traits."""
    from ..models.llama import build_llama

    return build_llama(name, norm, traits=LLAMA_TRAITS, **options)


LM = register_family(
    Family(
        name="lm",
        description="LLaMA causal language models (RMSNorm, SwiGLU, RoPE); metric: validation perplexity",
        models={name: partial(llama_defaults, name) for name in LLAMA_PRESETS},
        build=build,
        lightning_module=lightning_module,
        options_from_data=options_from_data,
        data_options=data_options,
        items=lambda batch: (batch["input_ids"] if "input_ids" in batch else batch["prompt_ids"]).numel(),
        item_name="tokens",
        flops_per_item=lambda cfg, model: model.flops_per_token(cfg.data.seq_len),
        distributed_sampler=False,  # the text data modules shard by rank themselves (and resume mid-epoch)
        analysis_loss=analysis_loss,
        analysis_inputs=lambda batch: (batch["input_ids"], batch["labels"] != IGNORE_INDEX),
        learning_floor=unigram_floor,
        learning_check=never_learned,
        record_floor=floor_from_reason,
        check_config=check_config,
        data_requires=("vocab_size",),
        model_requires=("flops_per_token",),
    )
)
