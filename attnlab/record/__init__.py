"""attnlab.record — what the model's heads did: the recorder that consumes the named hook points
(`encoder.layers.3.self_attn`, ...), `AttentionTrace` (the one contract every view, the CLI and
the notebooks read; saved and loaded losslessly), head statistics, attention rollout (the flow from the
input tokens through the layers), the logit lens (what each decoder layer would output), direct logit attribution (what each decoder part wrote into each output piece's logit), head importance (how much an output depends on each head), activation patching (which heads, and which layers at which positions, carry a change of the input), path patching (which of a head's effect reaches the output directly and which through each later head or feed-forward layer) and the circuit of a change (the heads that move most and their paths), ablation (heads switched off through the same hook points), attention weighed by what each key writes (‖αf(x)‖, Kobayashi et al. 2020), gradient saliency (which input pieces each output's probability depends on, gradient × input), and
Eq. (1) recomputed step by step for one head.

May import: `attnlab.model` and `attnlab.errors` only. Recording costs one flag check per
attention call when off.
"""

import sys
import types
from typing import Any

from attnlab.record.ablation import ablate
from attnlab.record.circuit import Circuit, trace_circuit
from attnlab.record.importance import HeadImportance, trace_importance
from attnlab.record.lens import Lens, logit_lens
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution
from attnlab.record.norms import norm_trace
from attnlab.record.patching import HeadPatching, trace_patching
from attnlab.record.paths import PathPatching, trace_path_patching
from attnlab.record.recorder import Recording, hook_point, model_info, record, weights_hash
from attnlab.record.residual import ResidualPatching, trace_residual_patching
from attnlab.record.rollout import rollout
from attnlab.record.saliency import Saliency, saliency
from attnlab.record.stats import COLUMNS, head_stats, sentence_stats
from attnlab.record.trace import KINDS, AttentionTrace

__all__ = [
    "COLUMNS",
    "KINDS",
    "AttentionTrace",
    "Circuit",
    "HeadImportance",
    "HeadPatching",
    "Lens",
    "PathPatching",
    "LogitAttribution",
    "Recording",
    "ResidualPatching",
    "Saliency",
    "ablate",
    "head_stats",
    "hook_point",
    "logit_attribution",
    "logit_lens",
    "norm_trace",
    "model_info",
    "record",
    "rollout",
    "saliency",
    "sentence_stats",
    "trace_circuit",
    "trace_importance",
    "trace_path_patching",
    "trace_patching",
    "trace_residual_patching",
    "weights_hash",
]


class _Room(types.ModuleType):
    """`attnlab.record(model)` records (README: `with attnlab.record(model) as rec`), and
    `attnlab.record` is this room, whose modules `import attnlab.record.stats as stats` reaches:
    the package's attribute had been the function, so that import, and `attnlab.record.norm_trace`,
    failed with "cannot import name 'stats' from 'record' (unknown location)"."""

    def __call__(self, *args: Any, **kwargs: Any) -> Recording:
        return record(*args, **kwargs)


sys.modules[__name__].__class__ = _Room
