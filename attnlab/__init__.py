"""attnlab: the Transformer of *Attention Is All You Need*, trained as the paper describes it,
with every attention head recorded and explorable."""

from attnlab.config import PRESETS, ModelConfig, preset
from attnlab.model import Transformer, attention
from attnlab.record import ablate, record
from attnlab.stats import head_stats
from attnlab.trace import AttentionTrace


def load(path, device: str = "cpu", dtype: str = "fp32"):
    """Open a checkpoint: `attnlab.load("checkpoints/multi30k-en-de").translate("...")`.

    Imported lazily so that `import attnlab` stays light (sentencepiece, data code)."""
    from attnlab.api import load as _load

    return _load(path, device, dtype)


__all__ = [
    "PRESETS",
    "AttentionTrace",
    "ModelConfig",
    "Transformer",
    "ablate",
    "attention",
    "head_stats",
    "load",
    "preset",
    "record",
]
__version__ = "0.1.0"
