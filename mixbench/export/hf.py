"""``mixbench export --format hf RUN``: a Hugging Face model folder for a trained mixbench LLaMA.

The folder loads with ``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` and therefore runs under
``lm_eval --model hf --model_args pretrained=folder,trust_remote_code=True`` and any transformers tool::

    config.json                 model_type mixbench_llama, auto_map → the two files below, the run's model description
    configuration_mixbench.py   MixbenchConfig                 (mixbench/assets/hf_remote/; first line: a digest of the code)
    modeling_mixbench.py        MixbenchForCausalLM wrapping mixbench's Llama
    mb_*.py                     mixbench's model and layer modules, copied verbatim (imports rewritten: mixbench.export.bundle)
    mb_plugins.py               imports the project placements the model uses (mixbench.export.plugins; none for stock ones)
    mb_plugin_<module>.py       the project module that defines such a placement (a task's task.py, plugins.py), rewritten alike
    model.safetensors           the run's weights, keys ``model.<mixbench key>``
    tokenizer.json, tokenizer_config.json, special_tokens_map.json   the run's tokenizer (PreTrainedTokenizerFast)
    generation_config.json, README.md

Because the model code is mixbench's own, every norm placement exports, a project's own included: its module goes along,
and one that needs more than torch and the bundled mixbench modules at module level is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch

from ..core.errors import MixbenchError
from ..core.storage import refuse_link, replacing_folder
from ..data import ASSETS_DIR
from ..data.tokens import EOS_CANDIDATES, PAD_CANDIDATES, TokenizerSpec, special_id
from ..training.trained import load_trained
from .bundle import bundle_sources
from .plugins import plugin_sources, project_modules

log = logging.getLogger(__name__)
REMOTE_CODE = ASSETS_DIR / "hf_remote"
ENTRY_MODULE = "mixbench.models.llama"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ExportError(MixbenchError):
    """A run cannot be exported in the requested format."""


def _remote_code(bundled: dict[str, str]) -> dict[str, str]:
    """Every code file of the folder: ``bundled`` and the two of ``hf_remote/``, ``configuration_mixbench.py`` headed by a
    digest of the model code.  transformers names a local folder's remote modules by the folder's name and a hash of
    the file and what it imports; it maps a config class it has seen to the model class it loaded with it.  Without the
    digest every export's config file is the same, so a process that loaded one ``hf`` folder would build a later
    ``hf`` folder's model with the first one's code (a project placement unknown, or another project's of that name)."""
    code = {**bundled, "modeling_mixbench.py": (REMOTE_CODE / "modeling_mixbench.py").read_text(encoding="utf-8")}
    digest = hashlib.sha256("".join(f"{name}\0{text}\0" for name, text in sorted(code.items())).encode()).hexdigest()[:16]
    config = (REMOTE_CODE / "configuration_mixbench.py").read_text(encoding="utf-8")
    return {
        **code,
        "configuration_mixbench.py": f"# model code {digest} (a digest of this folder's code files; written by mixbench export)\n{config}",
    }


def _tokenizer_files(name: str, out: Path, max_length: int) -> dict:
    tok = TokenizerSpec(name).load()
    tok.save(str(out / "tokenizer.json"))
    eos_id = special_id(tok, EOS_CANDIDATES, "end-of-sequence")
    specials = {"eos_token": tok.id_to_token(eos_id)}
    pad = next((t for t in PAD_CANDIDATES if tok.token_to_id(t) is not None), None)
    if pad is not None:
        specials["pad_token"] = pad
    if tok.token_to_id("<unk>") is not None:
        specials["unk_token"] = "<unk>"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        **specials,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=1) + "\n")
    return {"eos_token_id": eos_id, "pad_token_id": tok.token_to_id(pad) if pad else eos_id}


def _card(description: dict, source: Path, out: Path, plugins: list) -> str:
    return (
        f"# {description['model']} · {description.get('norm_label', '?')} (mixbench export)\n\n"
        f"Exported by `mixbench export --format hf` from `{source}`.\n\n"
        f"* norm placement: `{description.get('norm_label')}`, per block: {', '.join(description.get('plan') or [])}\n"
        f"* architecture: `{json.dumps(description['options'])}`\n\n"
        "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"model = AutoModelForCausalLM.from_pretrained('{out}', trust_remote_code=True)\n"
        f"tokenizer = AutoTokenizer.from_pretrained('{out}')\n```\n\n"
        f"`lm_eval --model hf --model_args pretrained={out},trust_remote_code=True --tasks arc_easy`\n\n"
        "The `mb_*.py` files are mixbench's model code (Apache-2.0), copied verbatim with their imports rewritten"
        + "".join(f"; `{p.flat}.py` is the project's `{p.path}` (placement {', '.join(p.placements)})" for p in plugins)
        + (", rewritten alike: `trust_remote_code` runs it too" if plugins else "")
        + ".\n"
    )


def export_hf(run: str | Path, out: str | Path | None = None, dtype: str = "float32", tokenizer: str | None = None) -> Path:
    """Write the Hugging Face folder of ``run`` (a run folder, ``.safetensors`` or ``.ckpt``) to ``out``
    (default ``<run>/hf``); returns the folder."""
    if dtype not in DTYPES:
        raise ExportError(f"unknown --dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    trained = load_trained(run, tokenizer)
    if trained.description.get("family", "lm") != "lm":
        raise ExportError(f"{run} holds a {trained.description.get('family')} model; --format hf exports LLaMA language models (family lm)")
    model = trained.model
    plugins = project_modules([model.norm_spec.placement, *model.plan])
    code = _remote_code({**bundle_sources(ENTRY_MODULE, *(m for p in plugins for m in p.needs)), **plugin_sources(plugins)})
    if out is None:
        if trained.run_dir is None:
            raise ExportError(f"{run} is not in a run folder: give --out DIR")
        out = trained.run_dir / "hf"
    out = refuse_link(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} is not empty; give another --out or remove it")
    with replacing_folder(out) as folder:  # a new folder that takes out's place whole, or nothing is left
        _write_folder(trained, folder, out, code, plugins, dtype)
    log.info("exported %s (%s, %d code files) to %s", trained.description["model"], trained.description.get("norm_label"), len(code), out)
    return out


def _write_folder(trained, out: Path, final: Path, code: dict, plugins: list, dtype: str) -> None:
    """The export's files, written into the new folder ``out`` that becomes ``final``."""
    from safetensors.torch import save_file

    model = trained.model
    for name, text in code.items():
        (out / name).write_text(text, encoding="utf-8")
    description = trained.description
    options = description["options"]
    tokens = _tokenizer_files(trained.tokenizer, out, int(options["max_seq_len"]))
    state = {f"model.{k}": v.detach().to("cpu", DTYPES[dtype]).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["MixbenchForCausalLM"],
        "model_type": "mixbench_llama",
        "auto_map": {
            "AutoConfig": "configuration_mixbench.MixbenchConfig",
            "AutoModelForCausalLM": "modeling_mixbench.MixbenchForCausalLM",
        },
        "mixbench_model": description["model"],
        "mixbench_options": options,
        "mixbench_norm": description["norm"],
        "mixbench_norm_label": description.get("norm_label"),
        "mixbench_plan": description.get("plan"),
        "vocab_size": options["vocab_size"],
        "hidden_size": options["hidden_size"],
        "num_hidden_layers": options["num_layers"],
        "num_attention_heads": options["num_heads"],
        "intermediate_size": options["intermediate_size"],
        "max_position_embeddings": options["max_seq_len"],
        "tie_word_embeddings": False,
        "use_cache": False,
        "bos_token_id": None,
        **tokens,
        "torch_dtype": dtype,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({**tokens, "bos_token_id": None, "do_sample": False, "use_cache": False}, indent=1) + "\n"
    )
    (out / "README.md").write_text(_card(description, trained.source, final, plugins))
