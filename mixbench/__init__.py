"""mixbench: where should the normalization sit in a transformer block?

Python API::

    import mixbench
    model = mixbench.build_model("llama_71m", norm="mix", alpha=0.25, num_layers=24)
    mixbench.layer_plan("mix", 12, alpha=0.25)   # ['post', 'post', 'post', 'pre', ...]
    cfg = mixbench.compose(task="vit_tiny", norm="mix")   # the config of `mixbench run task=vit_tiny norm=mix`
    record = mixbench.run(cfg)                            # one run → its result record
    df = mixbench.load_records("results")                 # every record, one DataFrame row per run
"""

from .api import compose, load_records, run
from .core.constants import VERSION as __version__
from .layers import NormSpec, layer_plan, list_placements, register_placement
from .models import build_model, list_models

__all__ = [
    "NormSpec",
    "build_model",
    "compose",
    "layer_plan",
    "list_models",
    "list_placements",
    "load_records",
    "register_placement",
    "run",
    "__version__",
]
