"""attnlab: the Transformer of *Attention Is All You Need*, trained as the paper describes it,
with every attention head recorded and explorable.

The package is laid out in rooms that follow the data's path (docs/ARCHITECTURE.md):
`model` → `record` → `data` → `decode` → `train`, then `viz` and the screens in `app`.
`import attnlab` loads only the model and the recorder; `attnlab.load()` brings the decoder.
"""

from attnlab import _moved
from attnlab.model import PRESETS, ModelConfig, Transformer, attention, preset
from attnlab.record import AttentionTrace, ablate, head_stats, logit_attribution, logit_lens, record, rollout

_moved.install()


def load(path, device: str = "cpu", dtype: str = "fp32"):
    """Open a checkpoint: `attnlab.load("checkpoints/multi30k-en-de").translate("...")`."""
    from attnlab.decode.api import load as _load  # lazy: keeps `import attnlab` light (sentencepiece, data code)

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
    "logit_attribution",
    "logit_lens",
    "preset",
    "record",
    "rollout",
]
__version__ = "0.1.0"
