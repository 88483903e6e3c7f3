"""The captured training step (``cuda_graph_step``) and the cached EMA update.  The CPU tests check when a step is
captured and the EMA's arithmetic; the GPU tests (``-m gpu``) train captured against uncaptured and resume a captured
run after a kill."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _support.paths import REPO_ROOT, SUPPORT
from timm.utils import ModelEmaV3

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.training.config import compose
from mixbench.training.lit.ema import CachedModelEma
from mixbench.training.step_graph import module_obstacle, wants_capture

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize(
    "settings, expected",
    [
        (["cuda_graph_step=false"], (False, "cuda_graph_step=false")),
        (["trainer.accelerator=cpu"], (False, "not a CUDA run")),
    ],
)
def test_auto_capture_says_why_it_does_not_capture(settings, expected):
    assert wants_capture(compose(["task=llama_lm", *settings])) == expected


def test_capture_obstacles_on_a_gpu_config(monkeypatch):
    """What keeps a CUDA run uncaptured (the GPU itself faked: the decision reads only the config)."""
    monkeypatch.setattr("mixbench.training.step_graph.runs_on_cuda", lambda accelerator: True)
    base = ["task=llama_lm", "model=llama_debug"]
    assert wants_capture(compose(base)) == (True, None)
    cases = {
        "trainer.strategy=fsdp save_weights=false": "FSDP",
        "trainer.precision=fp8": "float8",
        "compile.mode=reduce-overhead": "replays CUDA graphs of its own",
        "data.global_batch_size=64": "gradient accumulation",  # 64 = 8 × the debug batch: 8 micro-batches a step
    }
    for setting, reason in cases.items():
        capture, why = wants_capture(compose([*base, *setting.split()]))
        assert not capture and reason in why
        with pytest.raises(ConfigError, match="cuda_graph_step=true, but"):
            wants_capture(compose([*base, *setting.split(), "cuda_graph_step=true"]))
    with pytest.raises(ConfigError, match="auto, true or false"):
        wants_capture(compose([*base, "cuda_graph_step=sometimes"]))


def test_only_modules_with_an_objective_and_static_batches_capture():
    from mixbench.training.lit import CausalLMModule, OptimConfig

    lm = CausalLMModule(torch.nn.Linear(2, 2), OptimConfig())
    assert module_obstacle(lm, object()) is None
    assert "vary in shape" in module_obstacle(lm, type("Padded", (), {"static_shapes": False})())
    from mixbench.rlhf.lit import RewardModelModule

    scored = torch.nn.Linear(2, 2)
    scored.score = torch.nn.Linear(2, 1)
    assert "no capturable objective" in module_obstacle(RewardModelModule(scored, OptimConfig()), object())


def test_cached_ema_update_equals_timms_step_for_step():
    """The cached lists give timm's update exactly, follow in-place changes of the model (optimizer steps, a restored
    checkpoint) and copy non-float buffers; forget_tensors re-lists after a module's buffers were replaced."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    model.register_buffer("count", torch.zeros((), dtype=torch.long))
    model.register_buffer("running", torch.zeros(3))
    ours, timms = CachedModelEma(model, decay=0.9), ModelEmaV3(model, decay=0.9)
    for step in range(1, 6):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))  # in place, as an optimizer step or load_state_dict
            model.count += 1
            model.running.add_(1.5)
        ours.update(model, step=step)
        timms.update(model, step=step)
        for (name, a), b in zip(ours.state_dict().items(), timms.state_dict().values()):
            assert torch.equal(a, b), (step, name)
    assert ours.module.count.item() == 5 and not torch.equal(ours.module.running, model.running)  # copied / averaged
    model.running = torch.full((3,), 7.0)  # a replaced buffer (as a device move does): stale until forgotten
    ours.forget_tensors()
    timms.update(model, step=6)
    ours.update(model, step=6)
    assert torch.equal(ours.module.running, timms.module.running)


# ------------------------------------------------------------------------------------------------------------- GPU
STEPS = [  # 30 steps, validation at 15, the record's train-loss history at every step
    "trainer.max_steps=30",
    "trainer.val_check_interval=15",
    "trainer.limit_val_batches=2",
    "trainer.enable_progress_bar=false",
    "divergence.unigram_floor=false",  # too few steps to learn: off; the check's own tests are in test_learning_check.py
    "save_weights=false",
    "trainer.log_every_n_steps=1",
    "divergence.check_every_n_steps=1",
]
TINY_VIT = ["task=vit_tiny", "norm=mix", "model.num_layers=4", "model.drop_path_rate=0.0", "trainer.max_epochs=null", *STEPS]
TINY_LM = ["task=llama_lm", "norm=mix", "model=llama_debug", "model.vocab_size=8192", "data.seq_len=64", "data.batch_size=8", *STEPS]
# Captured and uncaptured runs issue the same kernels; what differs is the order of a few reductions in bf16, so the
# losses agree to bf16 precision: |Δ| ≤ 2e-2 nats over 30 steps (bf16 keeps 8 bits of mantissa, ~0.4 % a value).
BF16_LOSS_TOLERANCE = 2e-2


def run_record(args: list[str], run_dir: Path) -> dict:
    assert main(["run", *args, f"run_dir={run_dir}"]) == 0
    return json.loads((run_dir / "record.json").read_text())


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("args", [TINY_VIT, TINY_LM], ids=["vit", "llama"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_captured_and_uncaptured_steps_train_alike(tmp_path, args, compiled):
    settings = [*args, f"compile={str(compiled).lower()}", "seed=3"]
    captured = run_record([*settings, "cuda_graph_step=true"], tmp_path / "captured")
    plain = run_record([*settings, "cuda_graph_step=false"], tmp_path / "plain")
    assert captured["cuda_graph_step"]["captured"] is True and captured["cuda_graph_step"]["eager_steps"] == 0
    assert plain["cuda_graph_step"]["captured"] is False
    losses = [(a[1], b[1]) for a, b in zip(captured["train_loss_history"], plain["train_loss_history"])]
    assert len(losses) >= 25
    worst = max(abs(a - b) for a, b in losses)
    print(f"max |train loss captured - uncaptured| over {len(losses)} steps: {worst:.2e}")
    assert worst <= BF16_LOSS_TOLERANCE
    assert abs(captured["metrics"]["val/loss"] - plain["metrics"]["val/loss"]) <= BF16_LOSS_TOLERANCE


@pytest.mark.gpu
@cuda
def test_a_captured_run_killed_mid_training_resumes_to_the_uninterrupted_result(tmp_path):
    settings = [*TINY_VIT, "model.drop_path_rate=0.1", "cuda_graph_step=true", "checkpoint.every_n_steps=10", "seed=5"]
    full = run_record(settings, tmp_path / "full")
    run_dir = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    killed = subprocess.run(
        [sys.executable, str(SUPPORT / "kill_harness.py"), "step", "17", *settings, f"run_dir={run_dir}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run_record([*settings, "resume=auto"], run_dir)
    assert resumed["cuda_graph_step"]["captured"] is True and resumed["steps"] == 30
    assert resumed["metrics"]["val/loss"] == full["metrics"]["val/loss"]  # exactly
