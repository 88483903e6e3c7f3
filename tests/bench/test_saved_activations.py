"""bench/speed/saved_activations.py on CPU: a row's saved bytes shrink to the blocks' inputs when the blocks are
recomputed, and the estimate is the formula of its docstring."""

import pytest
from _support.bench import bench_module

from mixbench.models import build_model


def test_recomputed_blocks_keep_their_inputs_only_and_the_estimate_adds_up():
    bench = bench_module("speed", "saved_activations")
    model = build_model("llama_debug", norm="pre", seed=0, vocab_size=256).train()
    kept, recomputed = bench.measure(model, seq=16, rows=8)
    cfg = model.cfg
    inputs_mib = cfg.num_layers * 16 * cfg.hidden_size * 4 / 2**20  # each block's fp32 input, a 16-token row
    assert inputs_mib <= recomputed["per_row_mib"] < kept["per_row_mib"] / 2
    assert recomputed["fixed_gib"] < kept["fixed_gib"]  # the bf16 weight copies are made again in the backward pass
    parameters = sum(p.numel() for p in model.parameters())
    for row in (kept, recomputed):
        saved = row["fixed_gib"] + 8 * row["per_row_mib"] / 1024
        held = 8 * row["block_row_mib"] / 1024 if row["recompute"] else 0.0
        assert row["estimate_gib"] == pytest.approx(16 * parameters / 2**30 + saved + held)
    lines = bench.table([kept, recomputed]).splitlines()
    assert lines[2].startswith("kept") and lines[3].startswith("recomputed")
