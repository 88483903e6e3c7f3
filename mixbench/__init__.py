"""mixbench: where should the normalization sit in a transformer block?

Python API::

    import mixbench
    model = mixbench.build_model("llama_71m", norm="mix", alpha=0.25, num_layers=24)
    mixbench.layer_plan("mix", 12, alpha=0.25)   # ['post', 'post', 'post', 'pre', ...]
    cfg = mixbench.compose(task="vit_tiny", norm="mix")   # the config of `mixbench run task=vit_tiny norm=mix`
    record = mixbench.run(cfg)                            # one run → its result record
    df = mixbench.load_records("results")                 # every record, one DataFrame row per run

Importing the package imports neither torch nor Lightning: each name is imported from its module on first use.
"""

from __future__ import annotations

from .core.constants import VERSION as __version__
from .core.lazy import lazy_attributes

_PUBLIC = {  # name → the module that defines it
    "NormSpec": ".layers",
    "build_model": ".models",
    "compose": ".api",
    "layer_plan": ".layers",
    "list_models": ".models",
    "list_placements": ".layers",
    "load_records": ".api",
    "register_placement": ".layers",
    "run": ".api",
}

__all__ = [*sorted(_PUBLIC), "__version__"]
__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)
