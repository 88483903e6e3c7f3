"""load_config_file: a config file's YAML parsed once while it is unchanged, each call a fresh config."""

import os

from mixbench.core.configs import load_config_file


def test_each_call_is_a_fresh_config_and_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "defaults.yaml"
    path.write_text("seed: 0\ntrainer: {max_steps: 5}\nname: ${trainer.max_steps}\n")
    first = load_config_file(path)
    first.trainer.max_steps = 99  # a caller's change never reaches the next caller
    second = load_config_file(path)
    assert second.trainer.max_steps == 5 and second.name == 5  # interpolations kept, resolved against the new config
    path.write_text("seed: 1\ntrainer: {max_steps: 7}\n")
    os.utime(path, ns=(1, 1))  # another modification time, whatever the clock's resolution
    assert load_config_file(path).seed == 1 and load_config_file(path).trainer.max_steps == 7
