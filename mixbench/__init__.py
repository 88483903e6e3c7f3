"""mixbench: where should the normalization sit in a transformer block?

Python API::

    import mixbench
    model = mixbench.build_model("llama_71m", norm="mix", alpha=0.25, num_layers=24)
    mixbench.layer_plan("mix", 12, alpha=0.25)   # ['post', 'post', 'post', 'pre', ...]
"""
from .layers import NormSpec, layer_plan
from .models import build_model, list_models

__version__ = "0.1.0"
__all__ = ["NormSpec", "build_model", "layer_plan", "list_models", "__version__"]
