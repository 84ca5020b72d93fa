"""Head importance (`attnlab.decode.importance`) as one grid: the three kinds of attention side by
side, each a block of layers (0 at the bottom) × heads, every cell coloured by how much the output's
log-probability depends on that head's gate and labelled with the number. With `on_select`, a tap on
a cell hands its (kind, layer, head) to the caller (the explorer adds it to the heads to switch off).
The grid itself is `cells.head_grid`, which head patching (`patching.py`) draws with as well.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import LinearColorMapper
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.cells import decimals, head_grid
from attnlab.viz.cells import head_pick as importance_pick  # its name since it was importance's alone
from attnlab.viz.colors import PALETTE, color_scale
from attnlab.viz.options import check_options
from attnlab.viz.selection import check_on_select
from attnlab.viz.words import say

if TYPE_CHECKING:
    from attnlab.record.importance import HeadImportance

__all__ = ["importance_figure", "importance_pick"]

DARK = 0.55  # from this share of the largest value up a cell is dark enough for white text


def importance_figure(
    importance: HeadImportance,
    *,
    measure: str = "gradient",
    title: str | None = None,
    name: str = "head-importance",
    on_select: Callable[[str, int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
    high: float | None = None,
) -> figure:
    """Every head's importance by `measure` ("gradient": |∂ log P / ∂ gate|; "ablation": the
    log-probability lost with the head off, which `exact=True` measured). `title` None is its own;
    `on_select(kind, layer, head)` is called when a cell is tapped (in a Bokeh server or Panel
    session); `words` replaces any of `viz.words.WORDS` ("importance.*", "kind.*"); `high` tops the
    colour scale (None: the largest |score|), so that two models' grids side by side share one."""
    check_options(title=title)
    check_on_select(on_select, "(kind, layer, head)")
    if not (hasattr(importance, "scores") and isinstance(getattr(importance, "gradient", None), np.ndarray)):
        raise AttnlabError(
            f"importance_figure draws what attnlab's head importance returns, got {type(importance).__name__}"
        )
    scores = importance.scores(measure)
    said = say(words)
    values = scores.ravel()
    top = color_scale(np.abs(values), high)
    low = min(0.0, float(values.min()))  # the exact measure can be negative: a head that hurt this output
    digits = decimals(top)
    return head_grid(
        scores,
        [f"{v:.{digits}f}" for v in values],
        ["white" if v / top >= DARK else "#222222" for v in values],
        LinearColorMapper(palette=list(PALETTE), low=low, high=top),
        title=title or said[f"importance.title_{measure}"],
        name=name,
        words=said,
        axes=(said["importance.layer"], said["importance.head"]),
        tips=[(said[f"importance.{measure}"], "@value{0.00000}")],
        on_select=on_select,
    )
