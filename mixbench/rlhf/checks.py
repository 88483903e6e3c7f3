"""Config-time checks of the RLHF stages: bad input is one ConfigError before any run folder or training."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..training.trained import tokenizer_of
from ..training.weights import description_of

REWARDS = ("model", "rule")


def _description(source: str) -> dict | None:
    return description_of(Path(source).expanduser())


def is_reward_model(source: str) -> bool:
    """Whether the run folder / weights file ``source`` holds a reward model (a model with a score head)."""
    description = _description(source) or {}
    return bool((description.get("options") or {}).get("score_head"))


def check_rlhf_config(cfg) -> None:
    """The reward-model stage (``data.loader=preferences``) needs a score head; the ReMax stage (``data.loader=prompts``)
    needs a policy that is not a reward model, and a reward: a reward-model run with the policy's tokenizer, or the rule."""
    loader = cfg.data.get("loader")
    if loader in ("preferences", "prompts") and cfg.data.get("path") is None:
        raise ConfigError(
            "set data.path: UltraFeedback-binarized parquet/JSON files or a hub name, Commonsense170K-format JSON "
            "(the offline preference proxy), or 'embedded' (a tiny synthetic sample)"
        )
    if loader == "preferences" and not cfg.model.get("score_head"):
        raise ConfigError("a reward model needs model.score_head=true (task rm_preferences sets it)")
    if loader == "preferences" and cfg.data.seq_len > cfg.model.max_seq_len:
        raise ConfigError(f"data.seq_len={cfg.data.seq_len} exceeds model.max_seq_len={cfg.model.max_seq_len}; lower data.seq_len")
    if loader != "prompts":
        return

    rl = cfg.rlhf
    if cfg.model.get("score_head"):
        raise ConfigError(
            "the ReMax policy is a language model: set model.score_head=false (the reward model comes from rlhf.reward_model)"
        )
    if cfg.init_from is not None and Path(str(cfg.init_from)).expanduser().exists() and is_reward_model(str(cfg.init_from)):
        raise ConfigError(
            f"init_from={cfg.init_from} is a reward-model run; the policy starts from the SFT run "
            "(give that as init_from=, and the reward-model run as rlhf.reward_model=)"
        )
    if rl.reward not in REWARDS:
        raise ConfigError(f"rlhf.reward={rl.reward!r}; valid: {', '.join(REWARDS)}")
    if not (rl.max_new_tokens >= 1 and rl.temperature > 0 and 0 < rl.top_p <= 1 and rl.kl_ctl >= 0 and rl.clip_reward > 0):
        raise ConfigError(
            f"rlhf settings out of range: max_new_tokens={rl.max_new_tokens} (≥ 1), temperature={rl.temperature} (> 0), "
            f"top_p={rl.top_p} (in (0, 1]), kl_ctl={rl.kl_ctl} (≥ 0), clip_reward={rl.clip_reward} (> 0)"
        )
    if cfg.data.prompt_len + rl.max_new_tokens > cfg.model.max_seq_len:
        raise ConfigError(
            f"data.prompt_len={cfg.data.prompt_len} + rlhf.max_new_tokens={rl.max_new_tokens} exceeds "
            f"model.max_seq_len={cfg.model.max_seq_len}; lower one of them"
        )
    if rl.reward == "rule":
        return
    if rl.reward_model is None:
        raise ConfigError("rlhf.reward=model needs rlhf.reward_model=<run folder of task=rm_preferences> (or rlhf.reward=rule)")
    path = Path(str(rl.reward_model)).expanduser()
    if not path.exists():
        raise ConfigError(f"rlhf.reward_model={rl.reward_model}: no such run folder or weights file")
    if not is_reward_model(str(path)):
        raise ConfigError(f"rlhf.reward_model={rl.reward_model} is not a reward model (no score head): give a run of task=rm_preferences")
    ours, theirs = tokenizer_of(cfg.data.tokenizer), tokenizer_of(str(path))
    if ours != theirs:
        raise ConfigError(
            f"the policy's tokenizer ({ours}) differs from the reward model's ({theirs}); "
            "train both from the same pretraining run, or set data.tokenizer to the reward model's"
        )
