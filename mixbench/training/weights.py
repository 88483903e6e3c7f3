"""Portable weights: ``model.safetensors`` with the resolved model and norm config beside it, and starting a run
from trained weights (``init_from=``).

A run folder holds ``model.safetensors`` (the model's ``state_dict``; for ViTs the same keys as timm's
models, so timm loads the file) and ``model_config.json``::

    {"family": "lm", "model": "llama_71m", "options": {...architecture...}, "norm": {...norm group...},
     "norm_label": "mix(α=0.25)", "plan": ["post", ..., "pre"]}

(the same JSON is also stored in the safetensors header under ``mixbench``).  Records made before this
format have ``model.pt`` (a pickled ``state_dict``) and their ``config.yaml``; both still load.  A pickled file
(``.ckpt``, ``.pt``, ``.pth``) is read only through the restricted unpickler (:mod:`mixbench.training.trusted`): one
that would need another type is refused (:class:`mixbench.core.errors.UntrustedFile`) before any of it runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from ..core.configs import read_saved_config
from ..core.errors import ConfigError
from ..core.run_files import CHECKPOINT_DIR
from ..core.run_files import CONFIG_FILE as RUN_CONFIG  # config.yaml (CONFIG_FILE here: model_config.json)
from ..core.storage import atomic_write_text, fsync_file, replacing
from ..layers import NormSpec
from ..layers.placements import plan_summary
from .trusted import check_trusted, load_trusted

log = logging.getLogger(__name__)
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model_config.json"
LEGACY_WEIGHTS_FILE = "model.pt"
PICKLED = (".ckpt", ".pt", ".pth")  # torch.save files: read through mixbench.training.trusted


class WeightsError(ConfigError):
    """Weights cannot be found, read or used for this model."""


def describe_model(family: str, model_name: str, options: dict, model) -> dict:
    """What the weights are: family, preset, architecture options, norm settings and the per-block plan."""
    return {
        "family": family,
        "model": model_name,
        "options": options,
        "norm": model.norm_spec.to_dict(),
        "norm_label": model.norm_spec.label(),
        "plan": list(model.plan),
    }


def save_weights(model, run_dir: str | Path, description: dict) -> Path:
    """Write ``model.safetensors`` and ``model_config.json`` into ``run_dir``, each atomically (a full disk:
    :class:`mixbench.core.errors.DiskFull`, naming at least the bytes of the tensors)."""
    from safetensors.torch import save_file

    run_dir = Path(run_dir)
    state, seen = {}, {}
    for key, tensor in model.state_dict().items():
        tensor = tensor.detach().to("cpu")
        storage = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        state[key] = tensor.clone().contiguous() if storage in seen else tensor.contiguous()  # tied weights: own copy
        seen[storage] = key
    path, metadata = run_dir / WEIGHTS_FILE, {"format": "pt", "mixbench": json.dumps(description)}
    with replacing(path, size=lambda: sum(t.nbytes for t in state.values()) + len(json.dumps(metadata))) as tmp:
        save_file(state, str(tmp), metadata=metadata)
        fsync_file(tmp)
    atomic_write_text(run_dir / CONFIG_FILE, json.dumps(description, indent=1) + "\n")
    return path


def check_pickled(source: Path) -> None:
    """Refuse (:class:`mixbench.core.errors.UntrustedFile`) the pickled file ``source`` is or a run folder's weights
    would be read from (a legacy ``model.pt``) if it needs a type outside the allowlist; reads no tensors."""
    if source.is_dir() and not (source / WEIGHTS_FILE).is_file():
        source = source / LEGACY_WEIGHTS_FILE
    if source.suffix in PICKLED and source.is_file():
        check_trusted(source)


def description_of(source: Path) -> dict | None:
    """The model description of a run folder or weights file (None if it has none); reads no tensors, and refuses a
    pickled file that would need a type outside the allowlist (:func:`check_pickled`)."""
    check_pickled(source)
    if source.is_dir():
        return _description_of_run(source)
    if source.suffix == ".safetensors":
        from safetensors.torch import safe_open

        with safe_open(str(source), framework="pt") as f:
            meta = (f.metadata() or {}).get("mixbench")
        return _description(meta, f"{source}'s metadata") if meta else None
    return _description_of_run(_run_of(source))


def _description(text: str, what: str) -> dict:
    """A model description from its JSON ``text``; :class:`WeightsError` naming ``what`` when it is not a JSON object."""
    try:
        description = json.loads(text)
    except ValueError as err:
        raise WeightsError(f"{what} is not a model description (not JSON: {err}); give a run folder or weights mixbench wrote") from None
    if not isinstance(description, dict):
        raise WeightsError(f"{what} is not a model description (not a JSON object); give a run folder or weights mixbench wrote")
    return description


def _run_of(weights: Path) -> Path:
    """The run folder a weights file lies in: its folder, or two levels up for ``checkpoints/*.ckpt``."""
    return weights.parent.parent if weights.parent.name == CHECKPOINT_DIR else weights.parent


def _description_of_run(run_dir: Path) -> dict | None:
    if (run_dir / CONFIG_FILE).is_file():
        return _description((run_dir / CONFIG_FILE).read_text(errors="replace"), str(run_dir / CONFIG_FILE))
    if (run_dir / RUN_CONFIG).is_file():  # older runs: the resolved run config
        cfg = read_saved_config(run_dir / RUN_CONFIG)
        options = {k: v for k, v in cfg["model"].items() if k != "name"}
        return {"family": cfg["task"]["family"], "model": cfg["model"]["name"], "options": options, "norm": cfg["norm"]}
    return None


def _existing(source: str | Path) -> Path:
    path = Path(source).expanduser()
    if not path.exists():
        raise WeightsError(f"init_from={source}: no such file or folder (give a run folder, a .safetensors file or a .ckpt)")
    return path


def load_description(source: str | Path) -> dict | None:
    """The model description of ``init_from`` weights without reading the weights (None if they carry none).  A
    pickled file is checked by the restricted unpickler first (memory-mapped, no tensor read): one that would run code
    is refused here, before a run folder exists."""
    from safetensors import SafetensorError, safe_open

    path = _existing(source)
    check_pickled(path)
    if path.is_dir():
        return _description_of_run(path)
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = (f.metadata() or {}).get("mixbench")
        except (SafetensorError, OSError) as err:
            raise WeightsError(f"init_from={source}: cannot read the weights ({type(err).__name__}: {err})") from None
        return _description(meta, f"{path}'s metadata") if meta else None
    if path.suffix == ".ckpt":
        return _description_of_run(_run_of(path))
    return None


def load_weights(source: str | Path) -> tuple[dict[str, torch.Tensor], dict | None, Path]:
    """``(state_dict, description or None, file)`` from a run folder, a ``.safetensors`` file or a Lightning ``.ckpt``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = _existing(source)
    if path.is_dir():
        for name in (WEIGHTS_FILE, LEGACY_WEIGHTS_FILE):
            if (path / name).is_file():
                state, _, file = load_weights(path / name)
                return state, _description_of_run(path), file
        raise WeightsError(
            f"init_from={source}: the folder holds no {WEIGHTS_FILE} (or legacy {LEGACY_WEIGHTS_FILE}); "
            "was the run made with save_weights=false?"
        )
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path)), load_description(path), path
        if path.suffix in (".pt", ".pth"):
            return load_trusted(path), None, path
        if path.suffix == ".ckpt":  # a Lightning checkpoint of a mixbench run: the model's tensors, under "model."
            checkpoint = load_trusted(path, mmap=True)
            state = {k[len("model.") :]: v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
            return state, _description_of_run(_run_of(path)), path
    except (SafetensorError, RuntimeError, KeyError, OSError, json.JSONDecodeError) as err:
        raise WeightsError(f"init_from={source}: cannot read the weights ({type(err).__name__}: {err})") from None
    raise WeightsError(f"init_from={source}: unknown weights format {path.suffix!r}; give a run folder, a .safetensors file or a .ckpt")


def _plan_text(plan) -> str:
    return plan_summary(list(plan)) if plan else "?"


def check_compatible(source: str, theirs: dict | None, ours: dict) -> None:
    """Same family and same norm placement (label and per-block plan); architecture is checked on the tensors."""
    if theirs is None:
        log.warning("init_from=%s carries no model description; checking tensor names and shapes only", source)
        return
    if theirs.get("family") != ours["family"]:
        raise WeightsError(
            f"init_from={source} holds a {theirs.get('family')} model ({theirs.get('model')}) but this run builds a "
            f"{ours['family']} model ({ours['model']})"
        )

    their_norm = NormSpec.from_dict(theirs["norm"]) if "norm" in theirs else None
    their_label = theirs.get("norm_label") or (their_norm.label() if their_norm else "?")
    their_plan = theirs.get("plan") or (their_norm.plan(int(theirs["options"]["num_layers"])) if their_norm else None)
    if their_label != ours["norm_label"] or (their_plan is not None and list(their_plan) != ours["plan"]):
        raise WeightsError(
            f"init_from={source} was trained with norm {their_label} [{_plan_text(their_plan)}] but this run uses "
            f"{ours['norm_label']} [{_plan_text(ours['plan'])}]; choose the same norm= and norm.* settings"
        )


def check_tensors(source: str, state: dict, model, theirs: dict | None, ours: dict) -> None:
    """Every parameter and buffer name, shape and dtype must match (except the model's ``fresh_keys``, e.g. a reward model's
    score head, which may be absent from the weights); the error lists what differs on each side."""
    expected = model.state_dict()
    fresh = set(getattr(model, "fresh_keys", ()))
    missing = [k for k in expected if k not in state and k not in fresh]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items() if k in state and state[k].shape != v.shape]
    dtypes = [f"{k}: {state[k].dtype} vs {v.dtype}" for k, v in expected.items() if k in state and state[k].dtype != v.dtype]
    if missing or unexpected or shapes or dtypes:
        theirs_name = f"{theirs.get('model')} {theirs.get('options')}" if theirs else "(no description)"
        parts = [
            f"{label} ({len(items)}): {', '.join(items[:4])}{' …' if len(items) > 4 else ''}"
            for label, items in (
                ("missing in the weights", missing),
                ("not in this model", unexpected),
                ("shape weights vs model", shapes),
                ("dtype weights vs model", dtypes),
            )
            if items
        ]
        raise WeightsError(
            f"init_from={source} does not fit this model — weights: {theirs_name}; this run: {ours['model']} {ours['options']}; "
            + "; ".join(parts)
        )


def init_from(model, source: str | Path, ours: dict) -> dict:
    """Load trained weights into ``model`` after checking family, placement, names and shapes; returns provenance."""
    state, theirs, file = load_weights(source)
    check_compatible(str(source), theirs, ours)
    check_tensors(str(source), state, model, theirs, ours)
    fresh = [k for k in getattr(model, "fresh_keys", ()) if k not in state]
    model.load_state_dict(state, strict=not fresh)
    log.info("initialized from %s (%d tensors)%s", file, len(state), f"; {', '.join(fresh)} start fresh" if fresh else "")
    return {"source": str(source), "file": str(file), "model": (theirs or {}).get("model"), "norm_label": (theirs or {}).get("norm_label")}
