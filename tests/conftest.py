import os

import pytest
import torch
from _support.paths import TESTS

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(min(2, torch.get_num_threads()))
pytest_plugins = (
    "_support.downstream",  # pretrain_run, sft_run: one tiny pretrain → SFT chain per session
    "_support.project",  # registry, project: the project folder of docs/extending.md
    "_support.shared_runs",  # uninterrupted, tiny_lm_run, tiny_vit_run, tiny_vit_results: tiny runs trained once a session
)
BENCH_TESTS = TESTS / "bench"


@pytest.hookimpl(tryfirst=True)  # before -m selects: ``-m bench`` / ``-m "not bench"`` see the marker
def pytest_collection_modifyitems(config, items):
    """The tests of bench/'s scripts (tests/bench/) carry the ``bench`` marker."""
    for item in items:
        if BENCH_TESTS in item.path.parents:
            item.add_marker(pytest.mark.bench)


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
