"""attnlab.decode — a trained model put to use: greedy and beam search with the key/value cache
(§6.1), the tree constraint for parsing (§6.3), `attnlab.load()` and the `Model` it returns
(translate, parse, score, record), head ablation's effect on a sentence, sacreBLEU/chrF and
bracket F1, and the `translate`, `parse`, `record` and `evaluate` commands.

May import: `attnlab.model`, `attnlab.record`, `attnlab.data` and `attnlab.errors`; never the
training loop or a screen.
"""

from attnlab.decode.api import DEFAULTS, Model, Result
from attnlab.decode.loading import load
from attnlab.decode.search import Hypothesis, Stepper, beam_search, generate, greedy_search, length_penalty
from attnlab.decode.stepper import TransformerStepper

__all__ = [
    "DEFAULTS",
    "Hypothesis",
    "Model",
    "Result",
    "Stepper",
    "TransformerStepper",
    "beam_search",
    "generate",
    "greedy_search",
    "length_penalty",
    "load",
]
