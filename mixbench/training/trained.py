"""A trained model and the tokenizer it was trained with, from a run folder, its ``model.safetensors`` or a Lightning ``.ckpt``.

Used by everything downstream of training (fine-tuning's tokenizer, evaluation, export).  The model is rebuilt
from the weights' description (``model_config.json``: family, preset, architecture options, norm settings), so no
data module is needed; the tokenizer is the ``data.tokenizer`` of the run's ``config.yaml``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.configs import read_saved_config
from ..core.errors import ConfigError
from ..core.reading import UnreadableFile, read_json
from ..layers import NormSpec
from ..models import build_model
from .weights import load_weights

log = logging.getLogger(__name__)
WEIGHT_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth")


@dataclass
class Trained:
    """``model`` (eval mode, CPU), ``description`` (see :func:`mixbench.training.weights.describe_model`), ``tokenizer`` (a
    :class:`mixbench.data.tokens.TokenizerSpec` name), and the run folder (None for a bare weights file)."""

    model: torch.nn.Module
    description: dict
    tokenizer: str
    run_dir: Path | None
    source: Path


def run_folder_of(source: str | Path) -> Path | None:
    """The run folder of ``source``: itself, the folder of its weights file, or two levels up for ``checkpoints/*.ckpt``."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    folder = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return folder if (folder / "config.yaml").is_file() else None


def tokenizer_of(source: str | Path | None, _depth: int = 0) -> str:
    """A tokenizer name for :class:`~mixbench.data.tokens.TokenizerSpec`: ``source`` itself (``embedded``, a
    ``tokenizer.json``, a hub name), or — for a run folder or a weights file of a run — the tokenizer its record names,
    else its config's ``data.tokenizer`` (followed when that is another run: a fine-tuning run names its pretraining run)."""
    if source is None:
        raise ConfigError(
            "no tokenizer: set init_from=<pretraining run folder> (its tokenizer is used) "
            "or data.tokenizer=embedded|<tokenizer.json>|<hub name>"
        )
    path = Path(str(source)).expanduser()
    if not (path.is_dir() or (path.is_file() and path.suffix in WEIGHT_SUFFIXES)):
        return str(source)
    run_dir = run_folder_of(path)
    recorded = _recorded_tokenizer(run_dir) if run_dir is not None else None
    if recorded is not None:
        return recorded
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"cannot tell which tokenizer {source} was trained with (no config.yaml in its run folder); "
            "set the tokenizer explicitly (data.tokenizer=... or --tokenizer ...)"
        )
    data = read_saved_config(run_dir / "config.yaml").get("data")
    tokenizer = data.get("tokenizer") if isinstance(data, dict) else None
    if tokenizer is None:
        raise ConfigError(f"the run {run_dir} has no data.tokenizer in its config.yaml; set the tokenizer explicitly")
    if _depth > 8:
        raise ConfigError(f"{source}: its tokenizer refers to runs in a loop; set the tokenizer explicitly")
    return tokenizer_of(str(tokenizer), _depth + 1)  # a fine-tuning run names its pretraining run


def _recorded_tokenizer(run_dir: Path) -> str | None:
    """The tokenizer a finished run's record names (resolved at training time), if any."""
    try:
        tokenizer = read_json(run_dir / "record.json")["dataset"]["tokenizer"]  # never blocks on a special file
    except (UnreadableFile, KeyError, TypeError):
        return None
    return tokenizer if isinstance(tokenizer, str) else None


def load_trained(source: str | Path, tokenizer: str | None = None) -> Trained:
    """Rebuild the model of ``source`` (run folder, ``.safetensors``, ``.ckpt``) and load its weights (strict)."""

    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"{source}: no such run folder or weights file (give a run folder from `mixbench run`, its model.safetensors or a .ckpt)"
        )
    state, description, file = load_weights(path)
    if description is None or "options" not in description or "model" not in description:
        raise ConfigError(f"{source} carries no model description (model_config.json); it cannot be rebuilt")
    norm = NormSpec.from_dict(description["norm"]) if "norm" in description else NormSpec()
    model = build_model(description["model"], norm, **description["options"])
    model.load_state_dict(state, strict=True)
    model.eval()
    return Trained(model, description, tokenizer or tokenizer_of(path), run_folder_of(path), Path(file))
