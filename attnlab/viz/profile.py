"""A corpus profile's statistic as a layers × heads grid: one coloured cell per head (the mean of
the statistic over the profile's sentences, `attnlab.decode.profile.Profile.grid`), its value
written in it, a colour bar beside, the open head framed, a tap opening another. Grids drawn
together (one per kind of attention) take one colour scale, `limits`: with a scale each, the same
yellow was an entropy of 0.9 in one and 2.4 in the next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from numbers import Real

import numpy as np
from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper, Range1d
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.axes import label_room
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.selection import check_on_select, on_tap, pick, within
from attnlab.viz.words import say

CELL_PX = 56
BAR_PX = 70  # the colour bar, its ticks and their room


def profile_grid(
    layers: Sequence[int],
    values: np.ndarray,
    *,
    title: str | None = "",
    selected: tuple[int, int] | None = None,
    on_select: Callable[[int, int], None] | None = None,
    name: str = "profile-grid",
    words: Mapping[str, str] | None = None,
    limits: tuple[float, float] | None = None,
) -> figure:
    """`values` (layers, heads), row r for model layer `layers[r]`, drawn with layer 0 at the
    bottom; NaN cells (a head without the statistic, e.g. AER off cross-attention) are grey.
    `on_select(layer, head)` is called when a cell is tapped (in a Bokeh server or Panel session).
    The layers and heads are named as the overview grid names them ("grid.*" of `viz.words.WORDS`,
    replaced by `words`); `title` None is none. `limits`: the colour scale's (low, high), by
    default the grid's own finite values' (`shared_limits` gives several grids one)."""
    check_options(title=title)
    title = title or ""
    said = say(words)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != len(layers):
        raise AttnlabError(
            f"values must be a (layers, heads) table with a row for each of the {len(layers)} layers named, "
            f"got shape {values.shape}"
        )
    n_layers, n_heads = values.shape
    check_on_select(on_select)
    if selected is not None:  # a layer or head the grid lacks was left unframed without a word
        if isinstance(selected, str) or not isinstance(selected, Sequence) or len(selected) != 2:
            raise AttnlabError(f"selected is (layer, head), got {selected!r}")
        held = [int(layer) for layer in layers]
        selected = within(lambda: (pick(selected[0], held, "layer"), pick(selected[1], range(n_heads), "head")))
    rows, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    low, high = shared_limits([values]) if limits is None else _checked_limits(limits)
    mapper = LinearColorMapper(
        palette=Viridis256, low=low, high=high if high > low else low + 1e-9, nan_color="#dddddd"
    )
    source = ColumnDataSource(
        {
            "x": heads.ravel() + 0.5,
            "y": rows.ravel() + 0.5,
            "value": values.ravel(),
            "label": ["" if not np.isfinite(v) else f"{v:.2f}" for v in values.ravel()],
            "text_color": ["black" if np.isfinite(v) and v > (low + high) / 2 else "white" for v in values.ravel()],
            "layer": [int(layers[r]) for r in rows.ravel()],
            "head": heads.ravel().tolist(),
        }
    )
    layer_names = [said["grid.layer"].format(layer=layer) for layer in layers]
    width = n_heads * CELL_PX + 90 + BAR_PX
    title = wrap_title(title, width - label_room(layer_names) - 20)
    fig = figure(
        width=width,
        height=n_layers * CELL_PX + 70 + TITLE_LINE_PX * title.count("\n"),
        x_range=Range1d(0, n_heads),
        y_range=Range1d(0, n_layers),
        tools="tap",
        toolbar_location=None,
        title=title,
        name=name,
    )
    cells = fig.rect("x", "y", 0.96, 0.96, source=source, fill_color={"field": "value", "transform": mapper},
                     line_color=None)  # fmt: skip
    fig.text("x", "y", text="label", source=source, text_align="center", text_baseline="middle",
             text_font_size="9pt", text_color="text_color")  # fmt: skip
    cell = said["grid.cell"].format(layer="@layer", head="@head")
    fig.add_tools(HoverTool(renderers=[cells], tooltips=[("", cell), ("", "@value{0.000}")]))
    fig.xaxis.ticker = FixedTicker(ticks=[h + 0.5 for h in range(n_heads)])
    fig.xaxis.major_label_overrides = {h + 0.5: said["grid.head"].format(head=h) for h in range(n_heads)}
    fig.yaxis.ticker = FixedTicker(ticks=[r + 0.5 for r in range(n_layers)])
    fig.yaxis.major_label_overrides = {r + 0.5: name for r, name in enumerate(layer_names)}
    bar = ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=4), title=said["grid.mean"])
    fig.add_layout(bar, "right")
    fig.grid.visible = False
    fig.axis.major_tick_line_color = fig.axis.minor_tick_line_color = fig.axis.axis_line_color = None
    if selected is not None:
        fig.rect(x=selected[1] + 0.5, y=held.index(selected[0]) + 0.5, width=1, height=1, fill_color=None,
                 line_color="#d62728", line_width=3, name="selected")  # fmt: skip
    on_tap(fig, lambda x, y: profile_pick(x, y, layers, n_heads), on_select)
    return use_fonts(fig, said)


def shared_limits(tables: Sequence[np.ndarray]) -> tuple[float, float]:
    """(low, high) of every finite value in `tables`: one colour scale for the grids drawn
    together; (0, 1) where there is none."""
    finite = np.concatenate([np.asarray(t, dtype=np.float64).ravel() for t in tables] or [np.zeros(0)])
    finite = finite[np.isfinite(finite)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def _checked_limits(limits: object) -> tuple[float, float]:
    if not (
        isinstance(limits, Sequence)
        and len(limits) == 2
        and all(isinstance(v, Real) and np.isfinite(v) for v in limits)
        and limits[0] <= limits[1]
    ):
        raise AttnlabError(f"limits is (low, high), two finite numbers with low <= high, got {limits!r:.80}")
    return float(limits[0]), float(limits[1])


def profile_pick(x: float | None, y: float | None, layers: Sequence[int], n_heads: int) -> tuple[int, int] | None:
    """(layer, head) under data point (x, y) of a `profile_grid` figure, or None outside it (or
    not a point: a crafted tap can send a string as its x or y)."""
    if not (isinstance(x, Real) and isinstance(y, Real) and 0 <= x < n_heads and 0 <= y < len(layers)):
        return None
    return int(layers[int(y)]), int(x)
