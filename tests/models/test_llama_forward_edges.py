"""LLaMA's forward where mutation testing (bench/mutation) found survivors: the summed loss over the labels that count
(−100 ignored) and the longest sequence the model takes."""

import pytest
import torch

from mixbench import build_model


def test_the_loss_is_the_sum_over_the_counted_labels():
    model = build_model("llama_debug", "mix", seed=0, max_seq_len=8).eval()
    ids = torch.randint(0, 512, (2, 8), generator=torch.Generator().manual_seed(0))
    labels = ids.roll(-1, 1)
    labels[0, :3] = -100  # padding / prompt positions
    with torch.no_grad():
        logprobs = model(ids).double().log_softmax(-1)
        counted = labels != -100
        expected = -logprobs[counted].gather(-1, labels[counted][:, None]).sum()
        assert model(ids, labels=labels).item() == pytest.approx(expected.item(), rel=1e-5)


def test_a_sequence_of_max_seq_len_runs_and_a_longer_one_is_refused():
    model = build_model("llama_debug", "pre", seed=0, max_seq_len=8).eval()
    with torch.no_grad():
        assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 512)
        with pytest.raises(ValueError, match=r"^sequence length 9 exceeds model.max_seq_len=8$"):
            model(torch.zeros(1, 9, dtype=torch.long))
        ids = torch.zeros(1, 8, dtype=torch.long)  # the generation path (padding mask, KV cache) takes as many
        assert model.forward_masked(ids, torch.ones_like(ids)).shape == (1, 8, 64)
        with pytest.raises(ValueError, match=r"^sequence length 9 exceeds model.max_seq_len=8$"):
            model.forward_masked(torch.zeros(1, 9, dtype=torch.long), torch.ones(1, 9, dtype=torch.long))
