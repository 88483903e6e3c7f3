import gzip

import numpy as np
import pytest
import torch
from _support.paths import DATA, SHARED_DATA
from _support.text import write_c4_shards

from mixbench.data.images import CifarArrayDataModule
from mixbench.data.samplers import EpochShuffleSampler, ShardSampler
from mixbench.data.text import (
    IGNORE_INDEX,
    PackedWindows,
    PaddedDocuments,
    TextDataModule,
    resolve_files,
    validation_glob,
)
from mixbench.data.tokens import TokenizerSpec, TokenStore, build_cache


class FakeStore:
    """A TokenStore stand-in over explicit documents."""

    def __init__(self, docs):
        self.tokens = np.concatenate(docs)
        self.doc_offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
        self.num_tokens, self.num_documents = len(self.tokens), len(docs)

    def read(self, start, length):
        return self.tokens[start : start + length]

    def document(self, i):
        return self.tokens[self.doc_offsets[i] : self.doc_offsets[i + 1]]


def test_pack_concatenates_documents_with_eos_and_shifts_labels():
    ds = PackedWindows(FakeStore([np.array([5, 6, 1]), np.array([7, 8, 9, 1]), np.array([4, 1])]), seq_len=3)
    assert len(ds) == 2
    assert ds[0]["input_ids"].tolist() == [5, 6, 1] and ds[0]["labels"].tolist() == [6, 1, 7]
    assert ds[1]["input_ids"].tolist() == [8, 9, 1] and ds[1]["labels"].tolist() == [9, 1, 4]


def test_pad_mode_is_the_papers_protocol():
    ds = PaddedDocuments(FakeStore([np.array([5, 6, 1]), np.array([7, 8, 9, 10, 11, 1])]), seq_len=5, pad_id=0)
    short, long = ds[0], ds[1]
    assert short["input_ids"].tolist() == [5, 6, 1, 0, 0]
    assert short["labels"].tolist() == [6, 1, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]  # EOS is a target, pads never
    assert long["input_ids"].tolist() == [7, 8, 9, 10, 11]  # truncated: the rest of the document is dropped
    assert long["labels"].tolist() == [8, 9, 10, 11, IGNORE_INDEX]
    assert ds.num_target_tokens() == 2 + 4


def test_cache_is_built_in_parallel_reused_and_keyed_by_the_data(tmp_path):
    data = tmp_path / "c4"
    data.mkdir()
    write_c4_shards(data, "train", [["the cat sat on the mat"] * 3, ["a dog ran", "far away"]])
    sources = [{"files": [f]} for f in resolve_files(str(data / "c4-train.*.json.gz"))]
    spec = TokenizerSpec("embedded")
    path = build_cache(tmp_path / "cache", spec, sources, num_proc=2)
    store = TokenStore(path)
    tok, eos = spec.load(), spec.load().token_to_id("<eos>")
    expected = [tok.encode(t, add_special_tokens=False).ids + [eos] for t in ["the cat sat on the mat"] * 3 + ["a dog ran", "far away"]]
    assert store.num_documents == 5 and store.meta["parts"][0]["documents"] == 3
    for i, ids in enumerate(expected):
        assert store.document(i).tolist() == ids
    assert store.read(0, store.num_tokens).tolist() == sum(expected, [])  # reads across the part boundary
    stamp = (path / "meta.json").stat().st_mtime_ns
    assert build_cache(tmp_path / "cache", spec, sources) == path and (path / "meta.json").stat().st_mtime_ns == stamp
    write_c4_shards(data, "train", [["changed text"], ["a dog ran", "far away"]])
    assert build_cache(tmp_path / "cache", spec, [{"files": [f]} for f in resolve_files(str(data / "c4-train.*.json.gz"))]) != path


def test_failed_build_leaves_no_cache(tmp_path):
    bad = tmp_path / "c4-train.00000-of-00001.json.gz"
    with gzip.open(bad, "wt") as f:
        f.write("{not json\n")
    from mixbench.core.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=rf"^cannot read {bad}: truncated or corrupt \(ArrowInvalid: .*\); re-download the shard or leave it out of data\.path$",
    ):
        build_cache(tmp_path / "cache", TokenizerSpec("embedded"), [{"files": [str(bad)]}], num_proc=1)
    assert not any((tmp_path / "cache").iterdir())


def test_a_missing_reader_package_is_named_not_blamed_on_the_shard(tmp_path, monkeypatch):
    import builtins

    from mixbench.core.errors import ConfigError

    shard = tmp_path / "c4-train.00000-of-00001.json.gz"
    write_c4_shards(tmp_path, "train", [["a fine document"]])
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):  # an environment without HF datasets
        if name == "datasets":
            raise ModuleNotFoundError("No module named 'datasets'", name="datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(ConfigError, match="needs the package datasets: install") as err:
        build_cache(tmp_path / "cache", TokenizerSpec("embedded"), [{"files": [str(shard)]}], num_proc=1)
    assert "corrupt" not in str(err.value)


def test_samplers_split_ranks_disjointly_and_deterministically():
    ranks = [list(EpochShuffleSampler(103, seed=7, rank=r, world_size=4)) for r in range(4)]
    assert all(len(r) == 25 for r in ranks)
    flat = sum(ranks, [])
    assert len(set(flat)) == 100
    assert list(EpochShuffleSampler(103, seed=7, rank=1, world_size=4)) == ranks[1]
    assert list(EpochShuffleSampler(103, seed=8, rank=1, world_size=4)) != ranks[1]
    shards = [list(ShardSampler(10, r, 3)) for r in range(3)]
    assert sorted(sum(shards, [])) == list(range(10))  # validation: every sample once, no padding


def test_sampler_resume_continues_where_it_stopped():
    full = EpochShuffleSampler(50, seed=1)
    full.set_epoch(2)
    order = list(full)
    resumed = EpochShuffleSampler(50, seed=1)
    resumed.set_start(epoch=2, start=17)
    assert list(resumed) == order[17:] and len(resumed) == 50  # the whole epoch: Lightning sizes later epochs by it


def test_missing_path_names_the_setting_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="set data.path"):
        resolve_files(str(tmp_path / "nothing-*.json.gz"))
    assert validation_glob("/d/c4/en/c4-train.*.json.gz") == "/d/c4/en/c4-validation.*.json.gz"


def test_embedded_text_tokenizes_offline(tmp_path):
    dm = TextDataModule(seq_len=64, max_val_tokens=4096, cache_dir=str(tmp_path))
    dm.setup()
    info = dm.describe()
    assert info["vocab_size"] == 8192 and info["num_val_target_tokens"] <= 4096
    assert info["num_train_sequences"] > 10_000
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (16, 64) and batch["input_ids"].max() < 8192
    torch.testing.assert_close(batch["input_ids"][:, 1:], batch["labels"][:, :-1])


def test_embedded_cifar_is_stratified_real_images():
    dm = CifarArrayDataModule(batch_size=8)
    dm.setup()
    assert len(dm.train_set) == 1600 and len(dm.val_set) == 400
    assert torch.bincount(dm.val_set.labels).tolist() == [40] * 10
    images, labels = next(iter(dm.val_dataloader()))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
    assert dm.classes[0] == "airplane"
    assert dm.describe()["exact_resume"] is True and "resume_note" not in dm.describe()


SHARED_CIFAR = SHARED_DATA / "cifar10-test" / "cifar10_bigbench.npz"


def test_cifar_npz_is_split_stratified_and_resized(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "c.npz"
    np.savez(
        path, x=rng.integers(0, 255, (100, 32, 32, 3), dtype=np.uint8), y=np.repeat(np.arange(10), 10), classes=np.array(list("abcdefghij"))
    )
    dm = CifarArrayDataModule(path=str(path), val_per_class=3, img_size=64, batch_size=5)
    dm.setup()
    assert len(dm.train_set) == 70 and torch.bincount(dm.val_set.labels).tolist() == [3] * 10
    images, _ = next(iter(dm.val_dataloader()))
    assert images.shape == (5, 3, 64, 64) and "70 train / 30 val, 64px" in dm.describe()["label"]


CIFAR_SAMPLE = DATA / "cifar10_test_sample.npz"  # 2 a class of that file (data/NOTICE.md)


@pytest.mark.parametrize(
    "path, val_per_class, sizes",
    [
        (CIFAR_SAMPLE, 1, (10, 10)),
        pytest.param(SHARED_CIFAR, 200, (8000, 2000), marks=pytest.mark.skipif(not SHARED_CIFAR.is_file(), reason="needs ../shared")),
    ],
    ids=["sample", "shared"],
)
def test_cifar_proxy_split_of_the_real_test_set(path, val_per_class, sizes):
    dm = CifarArrayDataModule(path=str(path), val_per_class=val_per_class)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set)) == sizes
    assert torch.bincount(dm.val_set.labels).tolist() == [val_per_class] * 10 and dm.classes[:2] == ["airplane", "automobile"]
