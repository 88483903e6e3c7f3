"""``activation_checkpointing=true``: a run recomputes its blocks' activations in the backward pass — a resource
setting (the same gradients: ``tests/models/test_activation_checkpointing.py``), so a run made with it is the same run
as one made without it, for resume, planning and tables."""

import json

import pytest
import torch
from _support.runs import LM_TWO_STEPS
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.models import llama
from mixbench.results.records import annotate_recipes
from mixbench.training import step_graph
from mixbench.training.builders import checkpoint_activations
from mixbench.training.config import check_ranges, compose
from mixbench.training.run import run_defaults, same_run_settings
from mixbench.training.step_graph import capture_obstacle

TINY = LM_TWO_STEPS


def test_a_run_recomputes_its_blocks_and_is_the_same_run_as_one_without(tmp_path, monkeypatch):
    calls = []
    real = llama.checkpoint
    monkeypatch.setattr(llama, "checkpoint", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    assert main(["run", *TINY, "activation_checkpointing=true", f"results_dir={tmp_path}"]) == 0
    (path,) = tmp_path.rglob("record.json")
    record = json.loads(path.read_text())
    assert record["activation_checkpointing"] is True and record["steps"] == 2
    assert len(calls) == 2 * llama.llama_config("llama_debug").num_layers  # each block at each of the two training steps
    without = compose([*TINY, f"results_dir={tmp_path}"])
    assert same_run_settings(record["config"], without, run_defaults(without))  # resume and the planners count it
    other = dict(record, config={**record["config"], "activation_checkpointing": False})
    assert all(r["_recipe"] == "" for r in annotate_recipes([record, other]))  # one column of a table, not two


def test_bad_settings_name_the_fix():
    with pytest.raises(ConfigError, match="activation_checkpointing must be true or false, got 'yes'"):
        check_ranges(OmegaConf.merge(compose(TINY), {"activation_checkpointing": "yes"}))
    fsdp = OmegaConf.merge(compose(TINY), {"activation_checkpointing": True, "trainer": {"strategy": "fsdp"}})
    with pytest.raises(ConfigError, match="under FSDP set fsdp.activation_checkpointing=true"):
        check_ranges(fsdp)
    with pytest.raises(ConfigError, match="has no set_grad_checkpointing; set activation_checkpointing=false"):
        checkpoint_activations(compose([*TINY, "activation_checkpointing=true"]), torch.nn.Linear(2, 2))


def test_a_step_that_recomputes_is_not_captured_in_cuda_graphs(monkeypatch):
    monkeypatch.setattr(step_graph, "runs_on_cuda", lambda accelerator: True)  # as on a GPU machine
    cfg = compose(TINY)
    assert capture_obstacle(cfg) is None
    cfg.activation_checkpointing = True
    assert "activation checkpointing" in capture_obstacle(cfg)
