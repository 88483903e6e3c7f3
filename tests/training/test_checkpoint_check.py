"""checkpoint_problem: a checkpoint's zip structure checked without reading its data (a 1B checkpoint is ~15 GB);
its CRCs only when asked."""

import zipfile

import pytest
import torch

from mixbench.training.checkpointing import checkpoint_problem


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "epoch=0-step=4.ckpt"
    torch.save({"global_step": 4, "state_dict": {"w": torch.arange(4096, dtype=torch.float32)}}, path)
    return path


def test_a_whole_checkpoint_passes_without_its_data_read(checkpoint, monkeypatch):
    def read_everything(self):
        raise AssertionError("the data was read")

    monkeypatch.setattr(zipfile.ZipFile, "testzip", read_everything)
    assert checkpoint_problem(checkpoint) is None


def test_a_cut_checkpoint_is_caught(checkpoint):
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])  # the end, with the zip's directory, is gone
    assert checkpoint_problem(checkpoint) is not None
    checkpoint.write_bytes(data[:1000] + data[9000:])  # a piece of the middle gone, the directory kept
    assert checkpoint_problem(checkpoint) is not None


def test_a_member_overwritten_where_the_directory_puts_it_is_caught(checkpoint):
    with zipfile.ZipFile(checkpoint) as archive:
        (member,) = [m for m in archive.infolist() if m.filename.endswith("data/0")]
    data = bytearray(checkpoint.read_bytes())
    data[member.header_offset : member.header_offset + 4] = bytes(4)  # its local header's signature
    checkpoint.write_bytes(bytes(data))
    assert checkpoint_problem(checkpoint).endswith("data/0 is not where its directory says (the file is cut or overwritten)")


def test_a_flipped_byte_in_the_data_is_caught_only_when_the_data_is_read(checkpoint):
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor's bytes
    checkpoint.write_bytes(bytes(data))
    assert checkpoint_problem(checkpoint) is None
    assert checkpoint_problem(checkpoint, read_data=True).endswith("fails its checksum")
