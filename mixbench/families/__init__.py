"""The built-in model families: ``lm`` (LLaMA) and ``vision`` (timm ViT), each a :class:`Family` spec.

The registry itself lives in :mod:`mixbench.core.families` (the core knows no family by name; it imports these
modules when a family is first asked for); it is re-exported here, the name plugins import it by.
"""

from ..core.families import Family, family_of_model, get_family, list_families, list_models, register_family

__all__ = ["Family", "family_of_model", "get_family", "list_families", "list_models", "register_family"]
