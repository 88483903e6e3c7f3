"""RLHF (paper Table 3): KV-cache generation, preference data, the reward model, ReMax, and the tiny CPU chain."""
import pytest
import torch

from mixbench.layers import NormSpec, list_placements
from mixbench.models import build_model
from mixbench.rlhf.generation import generate, response_logprobs, top_p_filter


def _spec(placement: str) -> NormSpec:
    if placement == "custom":
        return NormSpec(placement="custom", layers=("post", "pre", "sandwich", "pre"))
    return NormSpec(placement=placement)


def _prompts(vocab: int = 512):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[1, :1] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("placement", [*list_placements(), "pre+qk_norm"])
def test_cached_and_uncached_generation_give_the_same_tokens(placement):
    spec = NormSpec(placement="pre", qk_norm="head") if placement == "pre+qk_norm" else _spec(placement)
    model = build_model("llama_debug", spec, seed=0).eval()
    ids, mask = _prompts()
    for greedy in (True, False):
        runs = [generate(model, ids, mask, 10, eos_id=2, pad_id=0, greedy=greedy, top_p=0.9,
                         generator=torch.Generator().manual_seed(1), use_cache=cached) for cached in (True, False)]
        assert torch.equal(runs[0].tokens, runs[1].tokens) and torch.equal(runs[0].mask, runs[1].mask)
    assert runs[0].tokens.shape == (3, 10)


@pytest.mark.parametrize("placement", ["pre", "post", "mix"])
def test_masked_forward_of_an_unpadded_row_is_the_training_forward(placement):
    """The training forward is untouched: the generation path computes the same logits on a row without padding."""
    model = build_model("llama_debug", placement, seed=0).eval()
    ids, mask = _prompts()
    with torch.no_grad():
        assert torch.allclose(model(ids[2:]), model.head(model.forward_masked(ids[2:], mask[2:])), atol=1e-5)
        # a left-padded row gives its real tokens the logits of the same row without the padding
        assert torch.allclose(model(ids[:1, 3:]), model.head(model.forward_masked(ids[:1], mask[:1]))[:, 3:], atol=1e-5)


def test_responses_stop_at_eos_and_log_probs_match_the_decoder():
    model = build_model("llama_debug", "pre", seed=0).eval()
    ids, mask = _prompts()
    with torch.no_grad():  # make EOS (id 2) likely so that rows end early
        model.head.weight[2] += 0.5 * model.head.weight.std() * torch.randn(model.cfg.hidden_size).sign()
    out = generate(model, ids, mask, 12, eos_id=2, pad_id=0, greedy=False, generator=torch.Generator().manual_seed(0))
    for row, m in zip(out.tokens, out.mask):
        n = int(m.sum())
        assert (row[:n - 1] != 2).all() and (row[n:] == 0).all()
        assert m[:n].all() and not m[n:].any()
    greedy = generate(model, ids, mask, 6, eos_id=2, pad_id=0, greedy=True)
    logp = response_logprobs(model, ids, mask, greedy)
    with torch.no_grad():  # greedy tokens are the argmax: their log-prob is the max of the distribution at each step
        step0 = torch.log_softmax(model.head(model.forward_masked(ids, mask))[:, -1], -1)
    assert torch.allclose(logp[:, 0], step0.max(-1).values, atol=1e-5)


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(top_p_filter(logits, 0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(top_p_filter(logits, 0.75)).tolist() == [[False, False, True, True]]
    assert torch.isinf(top_p_filter(logits, 0.81)).tolist() == [[False, False, False, True]]
    assert torch.isinf(top_p_filter(logits, 0.1)).tolist() == [[False, True, True, True]]
