"""The reward model's and ReMax's objectives, as formulas on tensors.

Bradley–Terry (reward model; Ouyang et al. 2022, DeepSpeed-Chat step 2): for a prompt x with a chosen response y⁺ and a
rejected one y⁻, scores r⁺ = r(x, y⁺), r⁻ = r(x, y⁻) (the scalar head at each sequence's last token)::

    loss = mean_pairs  −log σ(r⁺ − r⁻)          accuracy = mean [r⁺ > r⁻]          margin = mean (r⁺ − r⁻)

ReMax (Li et al., ICML 2024; ``step3`` of zyushun/Adam-mini examples/RLHF with ``--algo remax --penalty kl_onestep``):
for each prompt x a sampled response y = (y_0 .. y_{T−1}) ~ π and the greedy response ŷ give the sequence reward

    R = clip(r(x, y) − r(x, ŷ), −c, c)                                  (c = ``clip_reward``, 5)

and each response position t of y its return (``kl_onestep``: the penalty of position t alone, not summed over later ones)

    G_t = −β (log π(y_t | x, y_<t) − log π_ref(y_t | x, y_<t)) + γ^(T−1−t) R        (β = ``kl_ctl`` 0.1, γ = 1)

(G_t is a constant: no gradient flows through it); the loss is the token mean over the batch

    loss = − Σ_{b,t} G_{b,t} log π(y_{b,t} | …) m_{b,t} / Σ_{b,t} m_{b,t}          (m: response mask, EOS included).

The greedy response enters only through its reward r(x, ŷ) (the reference code penalises the KL of the sampled
response alone; its ``--kl_with_baseline`` is off in the Adam-mini script).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry(chosen: torch.Tensor, rejected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, accuracy, margin)`` of scores of chosen and rejected responses (B,), each a mean over the pairs."""
    diff = chosen.float() - rejected.float()
    return -F.logsigmoid(diff).mean(), (diff > 0).float().mean(), diff.mean()


def kl_onestep_returns(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, reward: torch.Tensor, kl_ctl: float, gamma: float = 1.0
) -> torch.Tensor:
    """G (B, T) of the module docstring: ``reward`` (B,) is the clipped R, placed at each row's last response token and
    discounted by γ per step back; every position adds its own −β (log π − log π_ref); 0 outside ``mask``."""
    mask = mask.float()
    length = mask.sum(-1, keepdim=True)
    steps_to_end = (length - 1 - torch.arange(mask.shape[1], device=mask.device)).clamp(min=0)
    discount = torch.full_like(steps_to_end, gamma).pow(steps_to_end)
    return (-kl_ctl * (logprobs - ref_logprobs) + discount * reward[:, None]) * mask


def remax_loss(logprobs: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """−Σ G · log π · m / Σ m (``returns`` detached)."""
    mask = mask.float()
    return -(returns.detach() * logprobs * mask).sum() / mask.sum().clamp(min=1)
