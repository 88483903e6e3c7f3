"""The project of docs/extending.md — a project folder whose task registers a placement (halfpre) — as pytest fixtures
(registered by conftest.py), and the tiny LLaMA settings its runs use."""

import sys

import pytest

from mixbench.core.project import select_project
from mixbench.layers import placements

HALFPRE = '''"""My placement: Pre-LN with each sub-layer's update halved."""

from mixbench.layers import BlockPlacement, register_placement


@register_placement
class HalfPre(BlockPlacement):
    name, summary = "halfpre", "x + F(N(x))/2 — Pre-LN with half-size updates"

    def sublayer(self, block, which, x, branch):
        return x + 0.5 * branch(getattr(block, f"norm{which}")(x))
'''


TINY_LM = [
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "data.seq_len=32",
    "trainer.max_steps=2",
    "trainer.val_check_interval=null",
    "trainer.limit_val_batches=1",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
]


@pytest.fixture
def registry():
    """The placement registry and the imported plugin modules as they were before the test."""
    saved, modules = dict(placements._PLACEMENTS), set(sys.modules)
    yield
    placements._PLACEMENTS.clear()
    placements._PLACEMENTS.update(saved)
    for name in set(sys.modules) - modules:
        if name.startswith(("mixbench_tasks.", "mixbench_project_plugins_")):
            del sys.modules[name]
    select_project(None)


@pytest.fixture
def project(tmp_path, monkeypatch, registry):
    """The issue's project: tasks/my_lm (base: llama_lm) whose task.py registers halfpre, configs/norm/halfpre.yaml;
    the working directory."""
    root = tmp_path / "my_project"
    (root / "tasks" / "my_lm").mkdir(parents=True)
    (root / "tasks" / "my_lm" / "task.yaml").write_text("name: my_lm\nbase: llama_lm\ndescription: LLaMA LM, my placement\n")
    (root / "tasks" / "my_lm" / "task.py").write_text(HALFPRE)
    (root / "configs" / "norm").mkdir(parents=True)
    (root / "configs" / "norm" / "halfpre.yaml").write_text("placement: halfpre\n")
    monkeypatch.chdir(root)
    return root
