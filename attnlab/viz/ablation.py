"""What switching heads off did: each original output token's log-probability with all heads
and with the chosen heads off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from bokeh.models import (
    ColumnDataSource,
    HoverTool,
    Legend,
    LegendItem,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.axes import token_axis
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.words import say


def token_delta_figure(
    tokens: Sequence[str], before: Sequence[float], after: Sequence[float], words: Mapping[str, str] | None = None
) -> figure:
    """Per-token log-probability of the original output, with all heads and with heads switched
    off; `words` replaces the title's, the legend's and the hover's ("ablation.*" of `viz.words.WORDS`).
    Lengths that differ are one line (bars were drawn against the wrong tokens, without a word)."""
    if not len(tokens) == len(before) == len(after):
        counted = f"{len(tokens)} token{'' if len(tokens) == 1 else 's'}, {len(before)} before and {len(after)} after"
        raise AttnlabError(f"token_delta_figure needs one log-probability per token, before and after: got {counted}")
    said = say(words)
    n = len(tokens)
    width = int(np.clip(n * 30, 360, 900)) + 80
    fig = figure(
        width=width,
        height=240,
        x_range=Range1d(0, n),
        tools="hover,save",
        toolbar_location=None,
        title=said["ablation.title"],
        name="ablation-tokens",
    )
    x = np.arange(n) + 0.5
    tokens = spelled(tokens)  # byte pieces by the character they spell
    # side by side about the tick (the second bar, at x + 0.2 and as wide, hid half the first)
    source = ColumnDataSource(
        {"left": x - 0.2, "right": x + 0.2, "before": list(before), "after": list(after)}
        | {"token": [piece_label(t, None) for t in tokens]}
    )
    bars_before = fig.vbar(x="left", top="before", width=0.38, source=source, color="#9ecae1")
    bars_after = fig.vbar(x="right", top="after", width=0.38, source=source, color="#d62728")
    fig.add_layout(
        Legend(
            items=[
                LegendItem(label=said["ablation.before"], renderers=[bars_before]),
                LegendItem(label=said["ablation.after"], renderers=[bars_after]),
            ]
        ),
        "right",
    )
    fig.select_one(HoverTool).tooltips = [
        (said["ablation.token"], "@token"),
        (said["ablation.before"], "@before{0.000}"),
        (said["ablation.after"], "@after{0.000}"),
    ]
    token_axis(fig.xaxis[0], tokens, width - 80, flip=False)
    fig.xaxis.major_label_orientation = math.pi / 2
    return use_fonts(fig, said)
