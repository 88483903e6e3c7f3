"""LightningModules wrapping plain ``nn.Module`` models (which never import Lightning)."""

from .base import OptimConfig
from .classify import ImageClassifierModule
from .lm import CausalLMModule

__all__ = ["CausalLMModule", "ImageClassifierModule", "OptimConfig"]
