"""LightningModules of the RLHF stages: the reward model (Bradley–Terry) and the ReMax policy.

Formulas: :mod:`mixbench.rlhf.objectives`.  Both train ``self.model`` (a :class:`mixbench.models.llama.Llama`; the
reward model with its score head) through :class:`~mixbench.training.lit.base.OptimizedModule`'s optimizer and schedule.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
from torchmetrics import MeanMetric

from ..core.errors import ConfigError
from ..training.lit import OptimConfig
from ..training.lit.base import OptimizedModule
from ..training.trained import load_trained
from .generation import Responses, generate, joined, last_token_index, response_logprobs
from .objectives import bradley_terry, kl_onestep_returns, remax_loss


class RewardModelModule(OptimizedModule):
    """Trains the score head and trunk on pairs (:class:`~mixbench.rlhf.data.PreferenceDataModule` batches) with the
    Bradley–Terry loss; logs ``val/loss``, ``val/accuracy`` (% of held-out pairs scored chosen > rejected) and
    ``val/margin`` (mean r⁺ − r⁻)."""

    def __init__(self, model, optim):
        super().__init__(model, optim)
        if getattr(model, "score", None) is None:
            raise ConfigError("a reward model needs a score head: set model.score_head=true (task rm_preferences sets it)")
        self.val_loss, self.val_accuracy, self.val_margin = MeanMetric(), MeanMetric(), MeanMetric()

    def scores(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """r(x, y⁺), r(x, y⁻) (B,) of a batch whose first half holds the chosen rows."""
        r = self.model.score_last(self.model(batch["input_ids"], return_hidden=True), batch["last"])
        half = r.shape[0] // 2
        return r[:half], r[half:]

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, accuracy, margin = bradley_terry(*self.scores(batch))
        self.log("train/loss", loss, prog_bar=True)
        self.log_dict({"train/accuracy": 100 * accuracy, "train/margin": margin})
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, accuracy, margin = bradley_terry(*self.scores(batch))
        n = batch["input_ids"].shape[0] // 2
        for metric, value in ((self.val_loss, loss), (self.val_accuracy, 100 * accuracy), (self.val_margin, margin)):
            metric.update(value, weight=n)

    def on_validation_epoch_end(self) -> None:
        for name, metric in (("val/loss", self.val_loss), ("val/accuracy", self.val_accuracy), ("val/margin", self.val_margin)):
            self.log(name, metric.compute(), prog_bar=name != "val/margin")
            metric.reset()


class ModelReward(nn.Module):
    """r(x, y): a reward model's score of prompt ‖ response at the response's last token (frozen)."""

    def __init__(self, reward_model: nn.Module):
        super().__init__()
        self.reward_model = reward_model.requires_grad_(False).eval()

    @torch.no_grad()
    def forward(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, responses: Responses, answers: list[str]) -> torch.Tensor:
        ids, mask = joined(prompt_ids, prompt_mask, responses)
        return self.reward_model.score_last(self.reward_model.forward_masked(ids, mask), last_token_index(mask))


class RuleReward(nn.Module):
    """r(x, y) = 1 if the response (up to EOS, decoded, stripped) equals the prompt's known answer, else 0."""

    def __init__(self, decode, eos_id: int):
        super().__init__()
        self.decode, self.eos_id = decode, eos_id

    def forward(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, responses: Responses, answers: list[str]) -> torch.Tensor:
        texts = [
            self.decode([t for t in row[: int(n)].tolist() if t != self.eos_id]).strip()
            for row, n in zip(responses.tokens, responses.lengths)
        ]
        return torch.tensor([float(t == a.strip()) for t, a in zip(texts, answers)], device=responses.tokens.device)


@dataclass
class ReMaxSettings:
    """The ``rlhf`` config group (see ``configs/defaults.yaml``)."""

    reward: str = "model"
    reward_model: str | None = None
    kl_ctl: float = 0.1
    gamma: float = 1.0
    clip_reward: float = 5.0
    temperature: float = 1.0
    top_p: float = 0.9
    max_new_tokens: int = 512
    eval_seed: int = 1234


def remax_step(policy, reference, reward, batch: dict, s: ReMaxSettings, eos_id: int, pad_id: int) -> tuple[torch.Tensor, dict]:
    """One ReMax loss on a batch of prompts (:mod:`mixbench.rlhf.objectives`) and its statistics: the sampled and the
    greedy response of the policy (decoded in eval mode with the KV cache), their rewards, the kl_onestep returns."""
    ids, mask = batch["prompt_ids"], batch["prompt_mask"]
    was_training = policy.training
    policy.eval()
    sample = generate(policy, ids, mask, s.max_new_tokens, eos_id, pad_id, temperature=s.temperature, top_p=s.top_p)
    greedy = generate(policy, ids, mask, s.max_new_tokens, eos_id, pad_id, greedy=True)
    policy.train(was_training)
    with torch.no_grad():
        r_sample, r_greedy = reward(ids, mask, sample, batch["answers"]), reward(ids, mask, greedy, batch["answers"])
        ref_logprobs = response_logprobs(reference, ids, mask, sample)
    logprobs = response_logprobs(policy, ids, mask, sample)
    advantage = (r_sample - r_greedy).clamp(-s.clip_reward, s.clip_reward)
    returns = kl_onestep_returns(logprobs.detach(), ref_logprobs, sample.mask, advantage, s.kl_ctl, s.gamma)
    kl = ((logprobs.detach() - ref_logprobs) * sample.mask).sum(-1)
    stats = {
        "reward": r_sample.mean(),
        "greedy_reward": r_greedy.mean(),
        "advantage": advantage.mean(),
        "kl": kl.mean(),
        "response_len": sample.lengths.float().mean(),
    }
    return remax_loss(logprobs, returns, sample.mask), stats


class ReMaxModule(OptimizedModule):
    """ReMax on prompt batches (:class:`~mixbench.rlhf.data.PromptDataModule`).  The frozen reference is a copy of the
    policy as it starts (the SFT weights, loaded by ``init_from``).  Validation samples one response per held-out prompt
    (the same random stream at every validation) and logs ``val/final_reward`` (mean reward of those samples: the
    paper's "final reward" at the end of training), ``val/kl`` (Σ_t log π − log π_ref per response),
    ``val/response_len`` (tokens, EOS included), ``val/answer_match`` (% of those samples equal to the prompt's chosen
    response: the answer accuracy where the chosen response is the one correct answer, as in the commonsense proxy;
    near 0 for free-text preferences) and ``val/initial_reward`` / ``val/initial_answer_match`` (the same before the
    first step)."""

    def __init__(
        self,
        model,
        optim,
        settings: ReMaxSettings,
        reward: nn.Module,
        eos_id: int,
        pad_id: int,
        provenance: dict | None = None,
        answer_match: nn.Module | None = None,
    ):
        super().__init__(model, optim)
        self.settings, self.reward, self.eos_id, self.pad_id = settings, reward, eos_id, pad_id
        self.answer_match = answer_match  # a RuleReward (``reward`` itself when that is one): 1 where the response equals the chosen one
        self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        self.val_reward, self.val_kl, self.val_len, self.val_match = MeanMetric(), MeanMetric(), MeanMetric(), MeanMetric()
        self.record_extra, self.initial_reward, self.initial_answer_match = provenance or {}, None, None

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, stats = remax_step(self.model, self.reference, self.reward, batch, self.settings, self.eos_id, self.pad_id)
        self.log("train/loss", loss)
        self.log("train/reward", stats["reward"], prog_bar=True)
        self.log_dict({f"train/{k}": v for k, v in stats.items() if k != "reward"})
        return loss

    def on_train_start(self) -> None:
        """The held-out reward of the policy as it starts (the SFT model), measured once like ``val/final_reward`` and
        logged beside it as ``val/initial_reward`` (kept in checkpoints, so a resumed run does not measure it again)."""
        if self.initial_reward is not None:
            return
        from lightning.pytorch.utilities import move_data_to_device

        self.model.eval()
        self.on_validation_epoch_start()
        with torch.no_grad(), self.trainer.precision_plugin.forward_context():
            for batch in self.trainer.datamodule.val_dataloader():
                self.validation_step(move_data_to_device(batch, self.device), 0)
        self.model.train()
        self.initial_reward = float(self.val_reward.compute())
        if self.answer_match is not None:
            self.initial_answer_match = float(self.val_match.compute())
        for metric in (self.val_reward, self.val_kl, self.val_len, self.val_match):
            metric.reset()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["initial_reward"] = self.initial_reward
        checkpoint["initial_answer_match"] = self.initial_answer_match

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.initial_reward = checkpoint.get("initial_reward")
        self.initial_answer_match = checkpoint.get("initial_answer_match")

    def on_validation_epoch_start(self) -> None:
        self.val_generator = torch.Generator(device=self.device).manual_seed(self.settings.eval_seed + self.global_rank)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        s, ids, mask = self.settings, batch["prompt_ids"], batch["prompt_mask"]
        sample = generate(
            self.model,
            ids,
            mask,
            s.max_new_tokens,
            self.eos_id,
            self.pad_id,
            temperature=s.temperature,
            top_p=s.top_p,
            generator=self.val_generator,
        )
        kl = ((response_logprobs(self.model, ids, mask, sample) - response_logprobs(self.reference, ids, mask, sample)) * sample.mask).sum(
            -1
        )
        n = ids.shape[0]
        rewards = self.reward(ids, mask, sample, batch["answers"])
        self.val_reward.update(rewards.mean(), weight=n)
        self.val_kl.update(kl.mean(), weight=n)
        self.val_len.update(sample.lengths.float().mean(), weight=n)
        if self.answer_match is not None:  # with the rule reward, the match is the reward: not decoded twice
            matches = rewards if self.answer_match is self.reward else self.answer_match(ids, mask, sample, batch["answers"])
            self.val_match.update(100.0 * matches.mean(), weight=n)

    def on_validation_epoch_end(self) -> None:
        metrics = [("val/final_reward", self.val_reward), ("val/kl", self.val_kl), ("val/response_len", self.val_len)]
        for name, metric in metrics + ([("val/answer_match", self.val_match)] if self.answer_match is not None else []):
            self.log(name, metric.compute(), prog_bar=name == "val/final_reward")
            metric.reset()
        if self.initial_reward is not None:
            self.log("val/initial_reward", self.initial_reward)
        if self.initial_answer_match is not None:
            self.log("val/initial_answer_match", self.initial_answer_match)


def reward_module(cfg, settings: ReMaxSettings, datamodule) -> tuple[nn.Module, dict]:
    """The reward of ``rlhf.reward`` and what the record says about it."""
    if settings.reward == "rule":
        return RuleReward(datamodule.decode, datamodule.eos_id), {"reward": "rule: exact match of the known answer"}

    trained = load_trained(settings.reward_model)
    record = {
        "reward": "model",
        "reward_model": {
            "source": str(settings.reward_model),
            "model": trained.description.get("model"),
            "norm_label": trained.description.get("norm_label"),
        },
    }
    return ModelReward(trained.model), record


def remax_module(cfg, model, datamodule) -> ReMaxModule:
    from omegaconf import OmegaConf

    settings = ReMaxSettings(**OmegaConf.to_container(cfg.rlhf, resolve=True))
    reward, provenance = reward_module(cfg, settings, datamodule)
    answer_match = reward if isinstance(reward, RuleReward) else RuleReward(datamodule.decode, datamodule.eos_id)
    return ReMaxModule(
        model, OptimConfig.from_config(cfg.optim), settings, reward, datamodule.eos_id, datamodule.pad_id, provenance, answer_match
    )
