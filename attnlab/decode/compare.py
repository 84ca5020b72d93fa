"""Two models on one sentence: what each translates it to, with its attention, and the second
model's attention while it reads the first one's output (teacher-forced), which is what makes a
head-by-head difference map possible. The second model may be the first with heads switched off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnlab.decode.api import Model, Result
from attnlab.errors import AttnlabError
from attnlab.record.ablation import ablate
from attnlab.record.importance import check_model


@dataclass
class Comparison:
    """The outputs and traces of two models on one input."""

    text: str
    first: Result  # the first model's own decoding (trace recorded)
    second: Result  # the second model's own decoding
    second_on_first: Result  # the second model teacher-forced on the first one's output
    heads_off: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # ablated in the second

    @property
    def same_output(self) -> bool:
        return self.first.text == self.second.text


def mismatch(first: Model, second: Model) -> str:
    """Why two models cannot be compared head by head: "task" (a translator and a parser),
    "vocabulary" (their pieces differ, so no map of one lines up with the other's), or "" when
    they can. Sizes may differ: each shows the heads it has."""
    if first.task != second.task:
        return "task"
    for side in ("tokenizer", "target_tokenizer"):
        a, b = getattr(first, side), getattr(second, side)
        if a is not b and _pieces(a) != _pieces(b):
            return "vocabulary"
    return ""


def _pieces(tokenizer: Any) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.get_piece_size())]


def compare(
    first: Model,
    second: Model,
    text: str,
    beam: int | None = None,
    heads_off: dict[tuple[str, int], list[int]] | None = None,
    alpha: float | None = None,
) -> Comparison:
    """Translate (or parse) `text` with both models, with the same beam and length penalty α
    (default: the task's); `heads_off` switches heads off in the second (pass the same model
    twice to see what those heads do)."""
    check_model(first, "compare"), check_model(second, "compare")  # (None was an AttributeError)
    why = mismatch(first, second)
    if why == "task":
        raise AttnlabError(f"cannot compare a {first.task} model with a {second.task} model")
    if why == "vocabulary":  # the second would be teacher-forced on pieces it does not have
        raise AttnlabError("cannot compare models with different vocabularies: no map of one lines up with the other's")
    heads_off = heads_off or {}
    a = first.translate(text, beam=beam, alpha=alpha, record=True, truncate=True)
    with ablate(second.model, heads_off):
        b = second.translate(text, beam=beam, alpha=alpha, record=True, truncate=True)
        forced = second.score(text, a, record=True, truncate=True)  # its pieces, not its text encoded again
    return Comparison(text, a, b, forced, heads_off)
