"""Head importance (`attnlab.decode.importance`) as one grid: the three kinds of attention side by
side, each a block of layers (0 at the bottom) × heads, every cell coloured by how much the output's
log-probability depends on that head's gate and labelled with the number. With `on_select`, a tap on
a cell hands its (kind, layer, head) to the caller (the explorer adds it to the heads to switch off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper, Range1d
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.trace import KINDS
from attnlab.viz.cells import labelled_cells
from attnlab.viz.colors import PALETTE
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import title_px
from attnlab.viz.options import check_options
from attnlab.viz.selection import check_on_select, on_tap
from attnlab.viz.words import kind_title, say

if TYPE_CHECKING:
    from attnlab.record.importance import HeadImportance

CELL = 44  # pixels a side
GAP = 1  # cells between two kinds' blocks
DARK = 0.55  # from this share of the largest value up a cell is dark enough for white text


def importance_figure(
    importance: HeadImportance,
    *,
    measure: str = "gradient",
    title: str | None = None,
    name: str = "head-importance",
    on_select: Callable[[str, int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Every head's importance by `measure` ("gradient": |∂ log P / ∂ gate|; "ablation": the
    log-probability lost with the head off, which `exact=True` measured). `title` None is its own;
    `on_select(kind, layer, head)` is called when a cell is tapped (in a Bokeh server or Panel
    session); `words` replaces any of `viz.words.WORDS` ("importance.*", "kind.*")."""
    check_options(title=title)
    check_on_select(on_select, "(kind, layer, head)")
    if not (hasattr(importance, "scores") and isinstance(getattr(importance, "gradient", None), np.ndarray)):
        raise AttnlabError(
            f"importance_figure draws what attnlab's head importance returns, got {type(importance).__name__}"
        )
    scores = importance.scores(measure)
    said = say(words)
    n_kinds, n_layers, n_heads = scores.shape
    kind, layer, head = (a.ravel() for a in np.meshgrid(*map(np.arange, scores.shape), indexing="ij"))
    values = scores.ravel()
    top = max(float(np.abs(values).max()), 1e-12)
    source = ColumnDataSource(
        {
            "x": kind * (n_heads + GAP) + head + 0.5,
            "y": layer + 0.5,
            "value": values,
            "label": [f"{v:.2f}" for v in values],
            "text_color": ["white" if v / top >= DARK else "#222222" for v in values],
            "kind": [kind_title(KINDS[k], said) for k in kind],
            "layer": layer,
            "head": head,
        }
    )
    title = title or said[f"importance.title_{measure}"]
    width = n_kinds * (n_heads + GAP) - GAP
    fig = figure(
        width=max(width * CELL + 130, title_px(title) + 40),
        height=n_layers * CELL + 120,
        x_range=Range1d(0, width),
        y_range=Range1d(0, n_layers + 0.8),
        tools="tap,save" if on_select else "save",
        toolbar_location=None,
        title=title,
        name=name,
    )
    low = min(0.0, float(values.min()))  # the exact measure can be negative: a head that hurt this output
    mapper = LinearColorMapper(palette=list(PALETTE), low=low, high=top)
    cells = labelled_cells(fig, source, "value", mapper, "10px", "values")
    fig.text(  # each block's kind, above it
        x=[k * (n_heads + GAP) + n_heads / 2 for k in range(n_kinds)], y=[n_layers + 0.4] * n_kinds,
        text=[said[f"kind_name.{KINDS[k]}"] for k in range(n_kinds)], text_align="center",
        text_baseline="middle", text_font_size="12px", name="kinds",
    )  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[
                ("", "@kind"),
                (said["importance.layer"], "@layer"),
                (said["importance.head"], "@head"),
                (said[f"importance.{measure}"], "@value{0.000}"),
            ],
        )
    )
    fig.add_layout(ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5)), "right")
    centres = [k * (n_heads + GAP) + h + 0.5 for k in range(n_kinds) for h in range(n_heads)]
    fig.xaxis.ticker = FixedTicker(ticks=centres)
    fig.xaxis.major_label_overrides = {x: str(h) for x, h in zip(centres, [*range(n_heads)] * n_kinds, strict=True)}
    fig.xaxis.axis_label = said["importance.head"]
    fig.yaxis.ticker = FixedTicker(ticks=[i + 0.5 for i in range(n_layers)])
    fig.yaxis.major_label_overrides = {i + 0.5: str(i) for i in range(n_layers)}
    fig.yaxis.axis_label = said["importance.layer"]
    fig.grid.visible = False
    on_tap(fig, lambda x, y: importance_pick(x, y, n_layers, n_heads), on_select)
    return use_fonts(fig)


def importance_pick(x: object, y: object, n_layers: int, n_heads: int) -> tuple[str, int, int] | None:
    """(kind, layer, head) of the cell under data point (x, y) of an `importance_figure` of
    `n_layers` × `n_heads` per kind, or None between blocks, off the grid, or for what is not a
    point (a crafted tap can send a string, NaN)."""
    if not (
        isinstance(x, Real) and isinstance(y, Real) and 0 <= y < n_layers and 0 <= x < len(KINDS) * (n_heads + GAP)
    ):
        return None
    block, column = divmod(int(x), n_heads + GAP)
    if block >= len(KINDS) or column >= n_heads:
        return None
    return KINDS[block], int(y), column
