"""Every head of one kind at once: layers × heads thumbnails in a single figure (RGBA images,
block-averaged past `GRID_SIDE` tokens), the open head framed, a tap opening another.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from numbers import Real

from bokeh.models import (
    ColumnDataSource,
    FixedTicker,
    HoverTool,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace, check_flag
from attnlab.viz.axes import label_room
from attnlab.viz.colors import (
    choice_rows,
    color_scale,
    colorize,
    downsample,
    hatch,
    rgba,
)
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, wrap_title
from attnlab.viz.selection import check_on_select, head_ids, model_head, model_layer, on_tap, within
from attnlab.viz.words import kind_title, say

GRID_SIDE = 48  # grid thumbnails are block-averaged down to at most this many rows/columns


GAP = 0.12  # between thumbnails, in thumbnail widths
# {grid figure: its layers and heads}, which a tap reads: kept on the server, since a browser can
# set any property of a figure, its `tags` too (crafted ones picked a layer the grid lacks; [] was an
# IndexError)
_GEOMETRY: weakref.WeakKeyDictionary[figure, dict[str, list[int]]] = weakref.WeakKeyDictionary()


def grid(
    trace: AttentionTrace,
    kind: str,
    *,
    selected: tuple[int, int] | None = None,
    mask: bool = True,
    vmax: float | None = 1.0,
    on_select: Callable[[int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Small multiples, one row per layer and one column per head, in a single figure.

    Each thumbnail is an RGBA image (weights coloured, forbidden cells hatched), block-averaged
    to at most `GRID_SIDE` tokens a side; columns are named by the model's head ids (a trace may
    hold a subset of the heads). `on_select(layer, head)` is called when a thumbnail is tapped
    (in a Bokeh server or Panel session). `words` replaces any of `viz.words.WORDS` ("grid.*":
    the title, the layers' and heads' names, the hover).
    """
    fig = figure(tools="tap,reset,save", toolbar_location=None, x_range=Range1d(0, 1), y_range=Range1d(0, 1))
    renderer = fig.image_rgba(image="image", x="x", y="y", dw=1, dh=1, source=ColumnDataSource(), name="thumbnails")
    fig.add_tools(HoverTool(renderers=[renderer], tooltips=[("", "@name")]))
    fig.xaxis.ticker, fig.yaxis.ticker = FixedTicker(ticks=[]), FixedTicker(ticks=[])
    fig.grid.visible = False
    fig.axis.major_tick_line_color = None
    fig.axis.minor_tick_line_color = None
    fig.axis.axis_line_color = None
    check_on_select(on_select)
    on_tap(fig, lambda x, y: grid_pick(x, y, _GEOMETRY[fig]["layers"], _GEOMETRY[fig]["heads"]), on_select)
    return use_fonts(update_grid(fig, trace, kind, selected=selected, mask=mask, vmax=vmax, words=words), words)


def update_grid(
    fig: figure,
    trace: AttentionTrace,
    kind: str,
    *,
    selected: tuple[int, int] | None = None,
    mask: bool = True,
    vmax: float | None = 1.0,
    cell_px: int = 96,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Show another kind (or trace, or selection) in a figure made by `grid`, in place; `selected`
    is (layer, the model's head id)."""
    said = say(words)
    if selected is not None and (isinstance(selected, str) or not isinstance(selected, Sequence) or len(selected) != 2):
        raise AttnlabError(f"selected is (layer, head), got {selected!r}")  # (0,) was an IndexError, 0 a TypeError
    full_mask = check_trace(trace, "the trace").mask(
        kind
    )  # first: the trace's one-line error for a kind it lacks, as `heatmap` gives
    if selected is not None:  # a layer or head the grid lacks was left unframed without a word
        selected = within(lambda: (model_layer(trace, kind, selected[0]), model_head(trace, selected[1])))
    layers, heads = list(trace.layers[kind]), head_ids(trace)
    n_heads = len(heads)
    allowed = downsample(full_mask.astype(float), GRID_SIDE) > 0 if check_flag(mask, "mask") else None
    images, xs, ys, names = [], [], [], []
    for row_index, layer in enumerate(layers):
        weights = trace.attention(kind, layer)
        for column, head in enumerate(heads):
            small = downsample(weights[column], GRID_SIDE)
            scale = color_scale(downsample(choice_rows(weights[column], full_mask), GRID_SIDE), vmax)
            images.append(rgba(hatch(colorize(small, 0.0, scale), allowed, max(1, cell_px // max(small.shape)))))
            xs.append(column * (1 + GAP))
            ys.append((len(layers) - 1 - row_index) * (1 + GAP))
            names.append(said["grid.cell"].format(layer=layer, head=head))
    fig.select_one({"name": "thumbnails"}).data_source.data = {"image": images, "x": xs, "y": ys, "name": names}
    frame = fig.select_one({"name": "selected"})  # the red frame around the open head, when it is shown
    if selected is not None:
        x = heads.index(selected[1]) * (1 + GAP) + 0.5
        y = (len(layers) - 1 - layers.index(selected[0])) * (1 + GAP) + 0.5
        if frame is None:
            fig.rect(x=x, y=y, width=1 + GAP / 2, height=1 + GAP / 2, fill_color=None, line_color="#d62728",
                     line_width=3, name="selected")  # fmt: skip
        else:
            frame.glyph.update(x=x, y=y)
    elif frame is not None:
        fig.renderers = [r for r in fig.renderers if r is not frame]
    width = int(n_heads * cell_px * (1 + GAP)) + 80
    layer_names = [said["grid.layer"].format(layer=layer) for layer in layers]
    title = wrap_title(
        said["grid.title"].format(kind_title=kind_title(kind, said)), width - label_room(layer_names) - 20
    )
    _GEOMETRY[fig] = {"layers": layers, "heads": heads}
    fig.update(
        width=width,
        height=int(len(layers) * cell_px * (1 + GAP)) + 60 + TITLE_LINE_PX * title.count("\n"),
        name=f"grid-{kind}",
        tags=[{"layers": layers, "heads": heads}],
    )
    fig.title.text = title
    fig.x_range.update(start=-GAP, end=n_heads * (1 + GAP))
    fig.y_range.update(start=-GAP, end=len(layers) * (1 + GAP))
    fig.xaxis.ticker.ticks = [c * (1 + GAP) + 0.5 for c in range(n_heads)]
    fig.xaxis.major_label_overrides = {
        c * (1 + GAP) + 0.5: said["grid.head"].format(head=h) for c, h in enumerate(heads)
    }
    fig.yaxis.ticker.ticks = [(len(layers) - 1 - r) * (1 + GAP) + 0.5 for r in range(len(layers))]
    fig.yaxis.major_label_overrides = {
        (len(layers) - 1 - r) * (1 + GAP) + 0.5: name for r, name in enumerate(layer_names)
    }
    return fig


def grid_pick(
    x: float | None, y: float | None, layers: Sequence[int], heads: Sequence[int], gap: float = GAP
) -> tuple[int, int] | None:
    """(layer, head id) under data point (x, y) of a `grid` figure of `layers` × `heads` (its
    tags), or None between thumbnails or off the grid: outside it, or not a point (a crafted tap
    can send a string or a list as its x or y)."""
    if not (isinstance(x, Real) and isinstance(y, Real)):
        return None
    column_index, fx = divmod(x, 1 + gap)
    row_from_bottom, fy = divmod(y, 1 + gap)
    if fx > 1 or fy > 1 or not 0 <= column_index < len(heads) or not 0 <= row_from_bottom < len(layers):
        return None
    return layers[len(layers) - 1 - int(row_from_bottom)], heads[int(column_index)]
