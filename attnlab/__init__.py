"""attnlab: the Transformer of *Attention Is All You Need*, trained as the paper describes it,
with every attention head recorded and explorable."""

from attnlab.config import PRESETS, ModelConfig, preset
from attnlab.model import Transformer, attention

__all__ = ["PRESETS", "ModelConfig", "Transformer", "attention", "preset"]
__version__ = "0.1.0"
