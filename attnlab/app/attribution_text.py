"""Direct logit attribution (`attnlab.record.logit_attribution`) in the reader's language: the
output pieces offered to choose one, what its logit may be read against, the piece the figures
open on, and the line with what the figures do not draw (the embedding, position and bias shares)
and the sum; the same words under the explorer's Logit lens tab and in the notebook explorer.
"""

from __future__ import annotations

import numpy as np

from attnlab.app.i18n import text
from attnlab.app.patching_text import word
from attnlab.record.logit_attribution import LogitAttribution


def piece_options(pieces: list[str], lang: str) -> dict[str, int]:
    """{label: position} of each output piece, labelled as the patching box labels them."""
    return {text("ablation.patch_read_piece", lang, position=i, piece=word(pieces, i)): i for i in range(len(pieces))}


def against_options(lang: str) -> dict[str, str]:
    """{label: `against`} of what a logit may be read against."""
    return {text("attribution.mean", lang): "mean", text("attribution.runner_up", lang): "runner-up"}


def first_position(attribution: LogitAttribution) -> int:
    """The piece the figures open on: the one with the largest logit, the model's surest choice,
    rather than the first piece (most often an article)."""
    return int(np.argmax(attribution.logit))


def parts_line(attribution: LogitAttribution, position: int, lang: str) -> str:
    """The shares the figures leave out, and all the shares summed against the model's own logit,
    less what it is read against, as the grid's title says (it read "= the model's logit" alone)."""
    if attribution.against == "mean":
        less = text("attribution.less_mean", lang)
    else:
        less = text("attribution.less_piece", lang, piece=word(attribution.contrast, position))
    return text(
        "attribution.line", lang, embedding=float(attribution.embedding[position]),
        position=float(attribution.position[position]), bias=float(attribution.bias[position]),
        total=float(attribution.total[position]), logit=float(attribution.logit[position]), less=less,
    )  # fmt: skip
