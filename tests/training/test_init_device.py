"""``init_device``: ``cpu`` (default) draws the initial weights on the CPU; ``cuda`` builds the model on the run's one
GPU — refused, before any run folder, where the run has no GPU or more than one."""

import pytest
import torch
from _support.runs import LM_TWO_STEPS
from omegaconf import OmegaConf

from mixbench.cli.app import main
from mixbench.core.errors import ConfigError
from mixbench.models import build_model
from mixbench.training import builders
from mixbench.training.config import check_ranges, compose

TINY = LM_TWO_STEPS


ONE_GPU = "set trainer.devices=1 trainer.num_nodes=1, or init_device=cpu"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"init_device": "gpu"}, "init_device must be one of cpu, cuda, got 'gpu'"),
        (
            {"init_device": "cuda", "trainer": {"devices": 2, "num_nodes": 1}},
            "set trainer.devices=1 trainer.num_nodes=1, or init_device=cpu",
        ),
        (
            {"init_device": "cuda", "trainer": {"devices": 1, "num_nodes": 2}},
            "set trainer.devices=1 trainer.num_nodes=1, or init_device=cpu",
        ),
    ],
)
def test_bad_settings_name_the_fix(settings, message):
    cfg = OmegaConf.merge({"logger": "csv", "resume": None, "trainer": {"devices": 1, "num_nodes": 1}}, settings)
    with pytest.raises(ConfigError, match=message):
        check_ranges(cfg)


def test_cpu_builds_where_it_did():
    assert builders.init_device(compose(TINY)) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a run without a GPU")
def test_cuda_without_a_gpu_is_refused_before_any_run_folder(tmp_path, caplog):
    assert main(["run", *TINY, "init_device=cuda", f"results_dir={tmp_path / 'results'}"]) == 2
    assert "init_device=cuda builds the model on the run's GPU, and this run has none: set init_device=cpu" in caplog.text
    assert not (tmp_path / "results").exists()


def test_the_model_is_built_inside_the_init_device(monkeypatch):
    """The whole build (parameters and buffers: the RoPE tables) happens on the device ``init_device`` names: here the
    meta device stands in for a GPU."""
    cfg = compose(TINY)
    monkeypatch.setattr(builders, "init_device", lambda cfg: torch.device("meta"))
    model, omegas = builders.build_run_model(cfg, "pre", datamodule=None, options={"vocab_size": 8192})
    assert omegas is None
    assert {p.device.type for p in model.parameters()} | {b.device.type for b in model.buffers()} == {"meta"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_builds_the_same_weights_for_a_seed_and_for_every_placement():
    with torch.device("cuda"):
        pre, again, mix = (build_model("llama_debug", norm, seed=3) for norm in ("pre", "pre", "mix"))
    assert next(pre.parameters()).is_cuda
    for (name, a), b, c in zip(pre.state_dict().items(), again.state_dict().values(), mix.state_dict().values()):
        assert torch.equal(a, b) and torch.equal(a, c), name
