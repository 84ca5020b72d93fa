"""Axes whose ticks read as tokens: labels thinned to what fits, long pieces shortened with an
ellipsis (`labels.piece_label`: by display width, never inside a character; the whole piece is in
the view's hover), and row/column sizes computed separately so a long output does not squeeze a
short source.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from bokeh.models import (
    FixedTicker,
)

from attnlab.viz.labels import display_width, piece_label

LABEL_PX = 13  # vertical room one axis label needs
TOOLS = "pan,wheel_zoom,box_zoom,reset,save"


def label_stride(n: int, pixels: float) -> int:
    return max(1, math.ceil(n * LABEL_PX / max(pixels, 1)))


def token_axis(
    axis: Any, labels: Sequence[str], pixels: float, flip: bool, label: Callable[[str], str] = piece_label
) -> None:
    """Numeric axis whose ticks sit at cell centres and read as the tokens (thinned to fit), each
    shown by `label` (`str` for labels a `labels.py` helper already made)."""
    n = len(labels)
    ticks = list(range(0, n, label_stride(n, pixels)))
    position = [(n - 1 - i if flip else i) + 0.5 for i in ticks]
    if isinstance(axis.ticker, FixedTicker):
        axis.ticker.ticks = position
    else:
        axis.ticker = FixedTicker(ticks=position)
    axis.major_label_overrides = {p: label(labels[i]) for p, i in zip(position, ticks, strict=True)}
    axis.major_label_text_font_size = "10px" if pixels / max(n, 1) < 16 else "11px"
    axis.major_tick_line_color = None
    axis.minor_tick_line_color = None


def label_room(labels: Sequence[str], column_px: float = 7) -> int:
    """Pixels the widest shown label needs (a CJK character counts two columns)."""
    return int(column_px * max((display_width(piece_label(s)) for s in labels), default=4))


def cell_px(n: int, budget: int = 560) -> float:
    """Pixels per row (or column): rows and columns are sized separately, so a long output
    does not squeeze a short source."""
    return float(np.clip(budget / max(n, 1), 3, 28))
