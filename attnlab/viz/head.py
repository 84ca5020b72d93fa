"""One head as a heatmap: one `image` glyph (not one glyph per cell) with token labels on both
axes, hover (query, key, weight; masked cells say so), a colour bar and the mask's hatch.
`update_*` put another head or trace into the same figure, so a live session sends only data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    CustomJSHover,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.norms import NORMED
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace, check_flag
from attnlab.viz.axes import TOOLS, cell_px, label_room, token_axis
from attnlab.viz.cells import fit_widths, fit_window
from attnlab.viz.colors import (
    PALETTE,
    choice_rows,
    color_scale,
    mask_overlay,
)
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, piece_label, spelled, title_px
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_map, model_head, model_layer
from attnlab.viz.words import kind_title, say

_LABEL_JS = """
const n = labels.length;
let i = Math.floor(special_vars.%s);
if (flip) i = n - 1 - i;
if (i < 0 || i >= n) return "";
return labels[i] + "  (" + i + ")";
"""
_WEIGHT_JS = """
const i = q - 1 - Math.floor(special_vars.y), j = Math.floor(special_vars.x);
if (blocked.length && blocked.includes(i * k + j)) return masked;
return value.toFixed(4);
"""


def heatmap(
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    *,
    mask: bool = True,
    vmax: float | None = 1.0,
    title: str | None = None,
    budget: int = 560,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
    fit: bool = False,
) -> figure:
    """One head's weights: token labels on both axes, hover (query, key, weight), a colour bar,
    and (with `mask`) the forbidden cells hatched. `words` replaces any of `viz.words.WORDS`
    (the title's "head.title", the hover's "head.*"), e.g. in a screen's language; `fit`, as in
    `matrix_figure`."""
    fig = matrix_figure(
        np.zeros((1, 1)), ["?"], ["?"], budget=budget, name=name or f"heatmap-{kind}", words=words, fit=fit
    )
    update_heatmap(
        fig, trace, kind, layer, head, mask=mask, vmax=vmax, title=title, budget=budget, name=name, words=words
    )
    return fig


def update_heatmap(
    fig: figure,
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    *,
    mask: bool = True,
    vmax: float | None = 1.0,
    title: str | None = None,
    budget: int = 560,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Show another head (or trace) in a figure made by `heatmap`, in place: a live session sends
    only the new data instead of a new figure. `words`: the title's template, as in `heatmap`."""
    check_options(title=title, budget=budget, name=name)
    q_labels, k_labels = map(spelled, check_trace(trace, "the trace").labels(kind))
    weights, allowed = head_map(trace, kind, layer, head), trace.mask(kind)
    update_matrix(
        fig,
        weights,
        q_labels,
        k_labels,
        allowed=allowed if check_flag(mask, "mask") else None,
        vmax=color_scale(choice_rows(weights, allowed), vmax),
        title=title or head_title(trace, kind, layer, head, words),
        budget=budget,
    )
    fig.name = name or f"heatmap-{kind}"
    return fig


def head_title(trace: AttentionTrace, kind: str, layer: int, head: int, words: Mapping[str, str] | None = None) -> str:
    """`words`' "head.title" for one head, naming the model's layer (2, where the caller may have
    said -1) and head; a template with other fields is a one-line error, not a KeyError."""
    said = say(words)
    fields = {
        "kind_title": kind_title(kind, said),
        "layer": model_layer(trace, kind, layer),
        "head": model_head(trace, head),
    }
    try:
        return said["head.title"].format(**fields) + off_note(trace, kind, layer, head, said)
    except (KeyError, IndexError, ValueError) as error:
        raise AttnlabError(f"words['head.title'] may use {{kind_title}}, {{layer}} and {{head}}, not {error}") from None


def off_note(trace: AttentionTrace, kind: str, layer: int, head: int, said: Mapping[str, str]) -> str:
    """`said["head.off"]` for a head that was switched off while the trace was recorded (its
    weights are still computed and drawn, but nothing it attends to reached the output), and
    `said["head.normed"]` for a trace whose weights are weighed by what each key writes
    (`attnlab.record.norms`); "" for neither."""
    off = trace.heads_off.get((kind, model_layer(trace, kind, layer)), [])
    note = f" · {said['head.off']}" if model_head(trace, head) in off else ""
    return note + (f" · {said['head.normed']}" if trace.meta.get("weighed") == NORMED else "")


def matrix_figure(
    values: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    allowed: np.ndarray | None = None,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    palette: Sequence[str] = PALETTE,
    title: str | None = "",
    budget: int = 560,
    value_name: str | None = None,
    name: str = "heatmap",
    axis_labels: tuple[str, str] | None = None,
    words: Mapping[str, str] | None = None,
    fit: bool = False,
) -> figure:
    """A (q, k) matrix as one `image` glyph, queries top to bottom, keys left to right, with a
    transparent RGBA overlay that hatches the cells `allowed` forbids. The hover names the query,
    the key and `value_name` (default: "weight"); the axes read `axis_labels` (default: key,
    query), all in `words` ("head.*" of `viz.words.WORDS`). With `fit` it narrows with the window
    down to `cells.FIT_PX`, its cells keeping their width and the keys that no longer fit dragged
    into view (`cells.fit_window`; a map of 25 source pieces was 729 px, past a 1024 px window),
    here and after each `update_matrix`; without, it keeps its width (an export, a notebook)."""
    check_options(title=title, budget=budget, name=name)
    said = say(words)
    value_name = said["head.weight"] if value_name is None else value_name
    query, key = said["head.query"], said["head.key"]
    fig = figure(
        x_range=Range1d(0, 1),
        y_range=Range1d(0, 1),
        tools=TOOLS,
        toolbar_location="below",  # under the frame, where nothing else is: above, it ran over a long title
        name=name,
        x_axis_location="above",
    )
    mapper = LinearColorMapper(palette=list(palette), low=vmin, high=1.0)
    # Position and size live in the source with the image, so that an update changes them together.
    cells = fig.image(
        image="image", x="x", y="y", dw="dw", dh="dh", color_mapper=mapper, name="cells",
        source=ColumnDataSource({"image": [np.zeros((1, 1), np.float32)], "x": [0], "y": [0], "dw": [1], "dh": [1]}),
    )  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[(query, "$y{custom}"), (key, "$x{custom}"), (value_name, "@image{custom}")],
            formatters={
                "$y": CustomJSHover(args={"labels": [], "flip": True}, code=_LABEL_JS % "y"),
                "$x": CustomJSHover(args={"labels": [], "flip": False}, code=_LABEL_JS % "x"),
                "@image": CustomJSHover(
                    args={"blocked": [], "q": 1, "k": 1, "masked": said["head.masked"]}, code=_WEIGHT_JS
                ),
            },
        )
    )
    fig.xaxis.ticker, fig.yaxis.ticker = FixedTicker(ticks=[]), FixedTicker(ticks=[])
    for axis in (fig.xaxis[0], fig.yaxis[0]):
        axis.major_tick_line_color = None
        axis.minor_tick_line_color = None
    fig.xaxis.major_label_orientation = math.pi / 2
    fig.xaxis.axis_label, fig.yaxis.axis_label = (key, query) if axis_labels is None else axis_labels
    fig.grid.visible = False
    fig.add_layout(
        ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=value_name), "right"
    )
    update_matrix(fig, values, q_labels, k_labels, allowed=allowed, vmin=vmin, vmax=vmax, title=title, budget=budget)
    if fit:  # the keys' range, whatever map is put in it, all at the figure's own width
        fit_window(fig, None, None, said["grid.drag"].format(axis=fig.xaxis[0].axis_label), cells.data_source)
    return use_fonts(fig, said)


def update_matrix(
    fig: figure,
    values: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    allowed: np.ndarray | None = None,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    title: str | None = "",
    budget: int = 560,
) -> figure:
    """Put another matrix into a figure made by `matrix_figure` (sizes, labels, hover, colours;
    with `fit`, the widths it narrows between); `title` None is none."""
    check_options(title=title, budget=budget)
    title = title or ""
    if np.ndim(values) != 2:  # (a 1-D one failed unpacking its shape)
        raise AttnlabError(f"a map is a (queries, keys) matrix, got one of shape {np.shape(values)}")
    q, k = values.shape
    if not q or not k:  # (bokeh's own refusal of the empty bounds was ten lines about MinMaxBounds)
        raise AttnlabError(f"a map needs at least one query and one key, got a {q}×{k} one")
    if (q, k) != (len(q_labels), len(k_labels)):
        raise AttnlabError(f"a {q}×{k} map needs {q} query and {k} key labels, got {len(q_labels)} and {len(k_labels)}")
    cell_q, cell_k = cell_px(q, budget), cell_px(k, budget)
    room = label_room(list(q_labels) + list(k_labels)) + 16
    # The title starts above the frame (after the query labels) and bokeh clips it at the edge.
    width = max(int(k * cell_k) + 90, max(title_px(line) for line in title.split("\n")) + 40) + room
    lines = TITLE_LINE_PX * title.count("\n")  # (a wrapped title's lines came out of the cells' height)
    fig.update(width=width, height=int(q * cell_q) + room + 100 + lines)  # title above, toolbar below
    if fig.sizing_mode == "stretch_width":  # `fit`: narrows from its new width; its new data refits it
        fit_widths(fig)
    fig.title.text = title
    # Bounds before start/end: BokehJS clamps a new end to the old bounds.
    fig.x_range.bounds, fig.y_range.bounds = (0, k), (0, q)
    fig.x_range.update(start=0, end=k)
    fig.y_range.update(start=0, end=q)
    cells = fig.select_one({"name": "cells"})
    high = float(np.nanmax(values)) if vmax is None and values.size else (vmax if vmax is not None else 1.0)
    cells.glyph.color_mapper.update(low=vmin, high=high if high > vmin else vmin + 1e-9)
    place = {"x": [0], "y": [0], "dw": [k], "dh": [q]}
    cells.data_source.data = {"image": [np.ascontiguousarray(values[::-1], dtype=np.float32)], **place}
    masked = allowed is not None and not allowed.all()
    overlay = fig.select_one({"name": "mask-overlay"})  # present exactly when some cell is forbidden
    if masked and overlay is None:
        fig.image_rgba(image="image", x="x", y="y", dw="dw", dh="dh", name="mask-overlay",
                       source=ColumnDataSource({"image": [mask_overlay(allowed)], **place}))  # fmt: skip
    elif masked:
        overlay.data_source.data = {"image": [mask_overlay(allowed)], **place}
    elif overlay is not None:
        fig.renderers = [r for r in fig.renderers if r is not overlay]
    formatters = fig.select_one(HoverTool).formatters
    formatters["$y"].args = {"labels": [piece_label(s, None) for s in q_labels], "flip": True}  # whole pieces
    formatters["$x"].args = {"labels": [piece_label(s, None) for s in k_labels], "flip": False}
    blocked = np.flatnonzero(~allowed).tolist() if masked else []
    formatters["@image"].args = {**formatters["@image"].args, "blocked": blocked, "q": q, "k": k}  # keeps `masked`
    token_axis(fig.xaxis[0], k_labels, k * cell_k, flip=False)
    token_axis(fig.yaxis[0], q_labels, q * cell_q, flip=True)
    return fig
