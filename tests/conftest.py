import os

import pytest
import torch

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(min(2, torch.get_num_threads()))
pytest_plugins = ("downstream_fixtures",)  # pretrain_run, sft_run: one tiny pretrain → SFT chain per session


@pytest.fixture(scope="session")
def token_cache(tmp_path_factory):
    """One ``data.cache_dir`` for the session's text runs, apart from the user's ~/.cache: the token caches are keyed by
    their data (test_data.py), so a test reads what an earlier one built instead of tokenizing the same text again
    (~6 s on a 2-core machine)."""
    return tmp_path_factory.mktemp("token_cache")


@pytest.fixture
def local_data(tmp_path):
    """Empty stand-ins for the data a grid's dry run looks up (and never reads): ``text``, a glob of C4-format shards
    with its validation shard; ``cifar``, a CIFAR-10 ``.npz``; ``lm``, the LLaMA runs' settings (those shards, the
    embedded tokenizer: nothing from the hub)."""
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("c4-train.00000-of-00001.json.gz", "c4-validation.00000-of-00001.json.gz", "cifar10.npz"):
        (folder / name).touch()
    text = str(folder / "c4-train.*.json.gz")
    return type(
        "LocalData", (), {"text": text, "cifar": str(folder / "cifar10.npz"), "lm": [f"data.path={text}", "data.tokenizer=embedded"]}
    )


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(0)


def randomize_norms(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every norm a non-trivial gain/bias (DyT: also its α) so placements produce clearly different outputs."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) or type(m).__name__ in ("LayerNorm", "RmsNorm", "DyT"):
                m.weight.copy_(1.0 + 0.5 * torch.randn(m.weight.shape, generator=generator))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=generator))
                if type(m).__name__ == "DyT":
                    m.alpha.copy_(0.3 + 1.2 * torch.rand(m.alpha.shape, generator=generator))
