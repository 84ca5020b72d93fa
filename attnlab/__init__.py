"""attnlab: the Transformer of *Attention Is All You Need*, trained as the paper describes it,
with every attention head recorded and explorable.

The package is laid out in rooms that follow the data's path (docs/ARCHITECTURE.md):
`model` → `record` → `data` → `decode` → `train`, then `viz` and the screens in `app`.

`import attnlab` imports no PyTorch: each name below is imported when first used (PEP 562), so
`attnlab.Transformer` loads the model and the recorder, `attnlab.load` the decoder too. The
command line depends on it: `attnlab COMMAND` imports `attnlab.cli` through this file, and
PyTorch's second of import must come after the line that turns Ctrl-C into "interrupted".
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from attnlab import _moved

if TYPE_CHECKING:  # what editors and type checkers see; at run time `__getattr__` imports these
    from attnlab import record  # the room, which is called as the recording function
    from attnlab.decode.compare import compare
    from attnlab.decode.loading import load
    from attnlab.model import PRESETS, ModelConfig, Transformer, attention, preset
    from attnlab.record import AttentionTrace, ablate, head_stats, logit_attribution, logit_lens, rollout

_moved.install()

_NAMES = {
    "load": "attnlab.decode.loading",  # `attnlab.load("checkpoints/multi30k-en-de").translate("...")`
    "compare": "attnlab.decode.compare",  # two models (or one with heads off) on one sentence
    **dict.fromkeys(["PRESETS", "ModelConfig", "Transformer", "attention", "preset"], "attnlab.model"),
    **dict.fromkeys(
        ["AttentionTrace", "ablate", "head_stats", "logit_attribution", "logit_lens", "rollout"],
        "attnlab.record",
    ),
}


def __getattr__(name: str) -> Any:
    """A public name or a room (`attnlab.model`, as after an eager import), imported on first use."""
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"attnlab.{name}") is not None:
        value = importlib.import_module(f"attnlab.{name}")
    else:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES})


__all__ = [
    "PRESETS",
    "AttentionTrace",
    "ModelConfig",
    "Transformer",
    "ablate",
    "attention",
    "compare",
    "head_stats",
    "load",
    "logit_attribution",
    "logit_lens",
    "preset",
    "record",
    "rollout",
]
__version__ = "0.1.0"
