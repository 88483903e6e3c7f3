"""Models and run folders for tests that compare placements or exports."""

from pathlib import Path

import torch

from mixbench import build_model
from mixbench.layers import NormSpec
from mixbench.training.weights import describe_model, save_weights


def randomize_norms(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every norm a non-trivial gain/bias (DyT: also its α) so placements produce clearly different outputs."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) or type(m).__name__ in ("LayerNorm", "RmsNorm", "DyT"):
                m.weight.copy_(1.0 + 0.5 * torch.randn(m.weight.shape, generator=generator))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=generator))
                if type(m).__name__ == "DyT":
                    m.alpha.copy_(0.3 + 1.2 * torch.rand(m.alpha.shape, generator=generator))


def make_run(folder: Path, spec: NormSpec, seed: int = 0) -> Path:
    """A run folder (weights, model description, the embedded tokenizer) of a 3-block LLaMA with randomized norms."""
    model = build_model("llama_debug", spec, seed=seed, num_layers=3, vocab_size=8192, hidden_size=32, intermediate_size=64, num_heads=2)
    randomize_norms(model, torch.Generator().manual_seed(seed))
    folder.mkdir(parents=True)
    save_weights(
        model, folder, describe_model("lm", "llama_debug", {k: getattr(model.cfg, k) for k in model.cfg.__dataclass_fields__}, model)
    )
    (folder / "config.yaml").write_text("data:\n  tokenizer: embedded\n")
    return folder
