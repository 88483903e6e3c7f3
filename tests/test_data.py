import numpy as np
import pytest
import torch

from mixbench.data.images import EmbeddedCifarDataModule
from mixbench.data.text import IGNORE_INDEX, TextDataModule, TokenWindows, pack_sequences, pad_sequences, resolve_files


def test_pack_concatenates_documents_with_eos_and_shifts_labels():
    docs = [np.array([5, 6, 1]), np.array([7, 8, 9, 1]), np.array([4, 1])]
    rows = pack_sequences(docs, seq_len=3)
    assert rows.tolist() == [[5, 6, 1, 7], [8, 9, 1, 4]]
    item = TokenWindows(rows, "pack", pad_id=1)[0]
    assert item["input_ids"].tolist() == [5, 6, 1] and item["labels"].tolist() == [6, 1, 7]


def test_pad_mode_is_the_papers_protocol():
    docs = [np.array([5, 6, 1]), np.array([7, 8, 9, 10, 11, 1])]
    rows = pad_sequences(docs, seq_len=5, pad_id=0)
    assert rows.tolist() == [[5, 6, 1, 0, 0], [7, 8, 9, 10, 11]]  # EOS kept, long doc truncated
    short = TokenWindows(rows, "pad", pad_id=0)[0]
    assert short["input_ids"].tolist() == [5, 6, 1, 0, 0]
    assert short["labels"].tolist() == [6, 1, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]  # pads never scored


def test_missing_path_names_the_setting_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="set data.train_path"):
        resolve_files(str(tmp_path / "nothing-*.json.gz"))


def test_embedded_text_tokenizes_offline():
    dm = TextDataModule(seq_len=64, max_val_tokens=4096)
    dm.setup()
    info = dm.describe()
    assert info["vocab_size"] == 8192 and info["num_val_sequences"] == 64
    assert info["num_train_sequences"] > 10_000
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (16, 64) and batch["input_ids"].max() < 8192
    torch.testing.assert_close(batch["input_ids"][:, 1:], batch["labels"][:, :-1])


def test_embedded_cifar_is_stratified_real_images():
    dm = EmbeddedCifarDataModule(batch_size=8)
    dm.setup()
    assert len(dm.train_set) == 1600 and len(dm.val_set) == 400
    assert torch.bincount(dm.val_set.labels).tolist() == [40] * 10
    images, labels = next(iter(dm.val_dataloader()))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
    assert dm.classes[0] == "airplane"
