"""Plots of attention: functions that take an `AttentionTrace` (and options) and return bokeh
figures, plus figure export (PNG, SVG, standalone HTML) that needs no browser and no network.

The explorer (`apps/explorer.py`) and the notebook widgets are thin layers over these functions;
nothing here imports Panel. Long inputs stay cheap: a heatmap is one `image` glyph (not one glyph
per cell), the layers × heads grid is one figure holding every head as an RGBA thumbnail
(down-sampled past `GRID_SIDE` tokens), and axis labels are thinned to what fits.

Conventions: rows are queries (top to bottom), columns are keys (left to right), weights are
drawn on a fixed 0..1 scale unless `vmax=None` (scale to the map's maximum). Cells a mask
forbade (the causal mask, padding) are hatched grey, never confused with a real zero, which is
white.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from bokeh.embed import file_html
from bokeh.events import Tap
from bokeh.layouts import column, row
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    CustomJSHover,
    DataTable,
    Div,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    LinearColorMapper,
    NumberFormatter,
    Range1d,
    Span,
    StringFormatter,
    TableColumn,
)
from bokeh.palettes import Blues256, Category10, RdBu11
from bokeh.plotting import figure
from bokeh.resources import INLINE

from attnlab.errors import AttnlabError
from attnlab.trace import AttentionTrace

PALETTE = tuple(reversed(Blues256))  # 0 -> white, 1 -> dark blue
DIFF_PALETTE = tuple(RdBu11)  # negative blue, 0 white, positive red
MASK_LIGHT, MASK_DARK = (224, 224, 224), (150, 150, 150)  # hatch of forbidden cells
KIND_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (masked)",
    "cross": "encoder–decoder attention",
}
KIND_COLORS = {"encoder": Category10[3][0], "decoder": Category10[3][1], "cross": Category10[3][2]}
GRID_SIDE = 48  # grid thumbnails are block-averaged down to at most this many rows/columns
LABEL_PX = 13  # vertical room one axis label needs
TOOLS = "pan,wheel_zoom,box_zoom,reset,save"


# -- arrays -----------------------------------------------------------------------------------------
def head_map(trace: AttentionTrace, kind: str, layer: int, head: int) -> np.ndarray:
    """(q, k) weights of one head, with a clear error for a head the trace does not hold."""
    weights = trace.attention(kind, layer)
    if not 0 <= head < weights.shape[0]:
        raise AttnlabError(f"head {head} does not exist: this trace holds {weights.shape[0]} heads")
    return weights[head]


def downsample(array: np.ndarray, max_side: int) -> np.ndarray:
    """Block-average the last two axes so neither exceeds `max_side` (blocks of ceil(n / max_side))."""
    q, k = array.shape[-2:]
    fq, fk = math.ceil(q / max_side), math.ceil(k / max_side)
    if fq == 1 and fk == 1:
        return array
    pad = [(0, 0)] * (array.ndim - 2) + [(0, -q % fq), (0, -k % fk)]
    padded = np.pad(array.astype(np.float64), pad, constant_values=np.nan)  # partial blocks average real cells only
    blocks = padded.reshape(padded.shape[:-2] + (padded.shape[-2] // fq, fq, padded.shape[-1] // fk, fk))
    return np.nanmean(blocks, axis=(-1, -3))


def colorize(weights: np.ndarray, vmin: float = 0.0, vmax: float = 1.0, palette: Sequence[str] = PALETTE) -> np.ndarray:
    """(q, k) values -> (q, k, 3) uint8 through a bokeh palette (as LinearColorMapper maps them)."""
    table = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in palette], dtype=np.uint8)
    span = (vmax - vmin) or 1.0
    index = np.clip((np.nan_to_num(weights, nan=vmin) - vmin) / span * len(palette), 0, len(palette) - 1).astype(int)
    return table[index]


def hatch(rgb: np.ndarray, allowed: np.ndarray | None, cell: int) -> np.ndarray:
    """Upsample (q, k, 3) by `cell` pixels per cell and hatch the forbidden cells."""
    pixels = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    if allowed is None or allowed.all():
        return pixels
    blocked = np.repeat(np.repeat(~allowed, cell, axis=0), cell, axis=1)
    yy, xx = np.indices(blocked.shape)
    stripes = (yy + xx) % max(3, cell // 2) == 0
    pixels = pixels.copy()
    pixels[blocked & stripes] = MASK_DARK
    pixels[blocked & ~stripes] = MASK_LIGHT
    return pixels


def _rgba(rgb: np.ndarray, alpha: np.ndarray | None = None) -> np.ndarray:
    """(h, w, 3) uint8 -> (h, w) uint32 for `image_rgba`, rows flipped (bokeh draws row 0 at the bottom)."""
    h, w = rgb.shape[:2]
    out = np.empty((h, w, 4), dtype=np.uint8)
    out[..., :3] = rgb
    out[..., 3] = 255 if alpha is None else alpha
    return np.ascontiguousarray(out[::-1]).view(np.uint32).reshape(h, w)


def _mask_overlay(allowed: np.ndarray) -> np.ndarray:
    """RGBA hatch over forbidden cells, transparent elsewhere, at a few pixels per cell."""
    q, k = allowed.shape
    cell = int(np.clip(400 // max(q, k), 1, 6))
    rgb = hatch(np.full((q, k, 3), 255, np.uint8), allowed, cell)
    blocked = np.repeat(np.repeat(~allowed, cell, axis=0), cell, axis=1)
    return _rgba(rgb, np.where(blocked, 255, 0).astype(np.uint8))


# -- axes with token labels ---------------------------------------------------------------------------
def _stride(n: int, pixels: float) -> int:
    return max(1, math.ceil(n * LABEL_PX / max(pixels, 1)))


def _token_axis(axis: Any, labels: Sequence[str], pixels: float, flip: bool) -> None:
    """Numeric axis whose ticks sit at cell centres and read as the tokens (thinned to fit)."""
    n = len(labels)
    ticks = list(range(0, n, _stride(n, pixels)))
    position = [(n - 1 - i if flip else i) + 0.5 for i in ticks]
    if isinstance(axis.ticker, FixedTicker):
        axis.ticker.ticks = position
    else:
        axis.ticker = FixedTicker(ticks=position)
    axis.major_label_overrides = {p: _short(labels[i]) for p, i in zip(position, ticks, strict=True)}
    axis.major_label_text_font_size = "10px" if pixels / max(n, 1) < 16 else "11px"
    axis.major_tick_line_color = None
    axis.minor_tick_line_color = None


def _short(label: str, width: int = 14) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


_LABEL_JS = """
const n = labels.length;
let i = Math.floor(special_vars.%s);
if (flip) i = n - 1 - i;
if (i < 0 || i >= n) return "";
return labels[i] + "  (" + i + ")";
"""
_WEIGHT_JS = """
const i = q - 1 - Math.floor(special_vars.y), j = Math.floor(special_vars.x);
if (blocked.length && blocked.includes(i * k + j)) return "masked (score −∞, weight 0)";
return value.toFixed(4);
"""


def _cell_px(n: int, budget: int = 560) -> float:
    """Pixels per row (or column): rows and columns are sized separately, so a long output
    does not squeeze a short source."""
    return float(np.clip(budget / max(n, 1), 3, 28))


# -- one head -----------------------------------------------------------------------------------------
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
) -> figure:
    """One head's weights: token labels on both axes, hover (query, key, weight), a colour bar,
    and (with `mask`) the forbidden cells hatched."""
    fig = matrix_figure(np.zeros((1, 1)), ["?"], ["?"], budget=budget, name=name or f"heatmap-{kind}")
    update_heatmap(fig, trace, kind, layer, head, mask=mask, vmax=vmax, title=title, budget=budget, name=name)
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
) -> figure:
    """Show another head (or trace) in a figure made by `heatmap`, in place: a live session sends
    only the new data instead of a new figure."""
    q_labels, k_labels = trace.labels(kind)
    update_matrix(
        fig,
        head_map(trace, kind, layer, head),
        q_labels,
        k_labels,
        allowed=trace.mask(kind) if mask else None,
        vmax=vmax,
        title=title or f"{KIND_TITLES[kind]} · layer {layer} · head {head}",
        budget=budget,
    )
    fig.name = name or f"heatmap-{kind}"
    return fig


def matrix_figure(
    values: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    allowed: np.ndarray | None = None,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    palette: Sequence[str] = PALETTE,
    title: str = "",
    budget: int = 560,
    value_name: str = "weight",
    name: str = "heatmap",
    axis_labels: tuple[str, str] = ("key", "query"),
) -> figure:
    """A (q, k) matrix as one `image` glyph, queries top to bottom, keys left to right, with a
    transparent RGBA overlay that hatches the cells `allowed` forbids."""
    fig = figure(
        x_range=Range1d(0, 1),
        y_range=Range1d(0, 1),
        tools=TOOLS,
        toolbar_location="above",
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
            tooltips=[("query", "$y{custom}"), ("key", "$x{custom}"), (value_name, "@image{custom}")],
            formatters={
                "$y": CustomJSHover(args={"labels": [], "flip": True}, code=_LABEL_JS % "y"),
                "$x": CustomJSHover(args={"labels": [], "flip": False}, code=_LABEL_JS % "x"),
                "@image": CustomJSHover(args={"blocked": [], "q": 1, "k": 1}, code=_WEIGHT_JS),
            },
        )
    )
    fig.xaxis.ticker, fig.yaxis.ticker = FixedTicker(ticks=[]), FixedTicker(ticks=[])
    for axis in (fig.xaxis[0], fig.yaxis[0]):
        axis.major_tick_line_color = None
        axis.minor_tick_line_color = None
    fig.xaxis.major_label_orientation = math.pi / 2
    fig.xaxis.axis_label, fig.yaxis.axis_label = axis_labels
    fig.grid.visible = False
    fig.add_layout(
        ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=value_name), "right"
    )
    update_matrix(fig, values, q_labels, k_labels, allowed=allowed, vmin=vmin, vmax=vmax, title=title, budget=budget)
    return fig


def update_matrix(
    fig: figure,
    values: np.ndarray,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    *,
    allowed: np.ndarray | None = None,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    title: str = "",
    budget: int = 560,
) -> figure:
    """Put another matrix into a figure made by `matrix_figure` (sizes, labels, hover, colours)."""
    q, k = values.shape
    if (q, k) != (len(q_labels), len(k_labels)):
        raise AttnlabError(f"a {q}×{k} map needs {q} query and {k} key labels, got {len(q_labels)} and {len(k_labels)}")
    cell_q, cell_k = _cell_px(q, budget), _cell_px(k, budget)
    label_room = 7 * max((len(_short(s)) for s in list(q_labels) + list(k_labels)), default=4) + 16
    fig.update(width=int(k * cell_k) + label_room + 90, height=int(q * cell_q) + label_room + 70)
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
                       source=ColumnDataSource({"image": [_mask_overlay(allowed)], **place}))  # fmt: skip
    elif masked:
        overlay.data_source.data = {"image": [_mask_overlay(allowed)], **place}
    elif overlay is not None:
        fig.renderers = [r for r in fig.renderers if r is not overlay]
    formatters = fig.select_one(HoverTool).formatters
    formatters["$y"].args = {"labels": list(q_labels), "flip": True}
    formatters["$x"].args = {"labels": list(k_labels), "flip": False}
    blocked = np.flatnonzero(~allowed).tolist() if masked else []
    formatters["@image"].args = {"blocked": blocked, "q": q, "k": k}
    _token_axis(fig.xaxis[0], k_labels, k * cell_k, flip=False)
    _token_axis(fig.yaxis[0], q_labels, q * cell_q, flip=True)
    return fig


# -- layers × heads -----------------------------------------------------------------------------------
GAP = 0.12  # between thumbnails, in thumbnail widths


def grid(
    trace: AttentionTrace,
    kind: str,
    *,
    selected: tuple[int, int] | None = None,
    mask: bool = True,
    vmax: float | None = 1.0,
    on_select: Callable[[int, int], None] | None = None,
) -> figure:
    """Small multiples, one row per layer and one column per head, in a single figure.

    Each thumbnail is an RGBA image (weights coloured, forbidden cells hatched), block-averaged
    to at most `GRID_SIDE` tokens a side. `on_select(layer, head)` is called when a thumbnail is
    tapped (in a Bokeh server or Panel session).
    """
    fig = figure(tools="tap,reset,save", toolbar_location=None, x_range=Range1d(0, 1), y_range=Range1d(0, 1))
    renderer = fig.image_rgba(image="image", x="x", y="y", dw=1, dh=1, source=ColumnDataSource(), name="thumbnails")
    fig.add_tools(HoverTool(renderers=[renderer], tooltips=[("", "@name")]))
    fig.xaxis.ticker, fig.yaxis.ticker = FixedTicker(ticks=[]), FixedTicker(ticks=[])
    fig.grid.visible = False
    fig.axis.major_tick_line_color = None
    fig.axis.minor_tick_line_color = None
    fig.axis.axis_line_color = None
    if on_select is not None:

        def tapped(event: Tap) -> None:
            geometry = fig.tags[0]
            picked = grid_pick(event.x, event.y, geometry["layers"], geometry["n_heads"])
            if picked is not None:
                on_select(*picked)

        fig.on_event(Tap, tapped)
    return update_grid(fig, trace, kind, selected=selected, mask=mask, vmax=vmax)


def update_grid(
    fig: figure,
    trace: AttentionTrace,
    kind: str,
    *,
    selected: tuple[int, int] | None = None,
    mask: bool = True,
    vmax: float | None = 1.0,
    cell_px: int = 96,
) -> figure:
    """Show another kind (or trace, or selection) in a figure made by `grid`, in place."""
    layers, n_heads = list(trace.layers[kind]), trace.n_heads
    allowed = downsample(trace.mask(kind).astype(float), GRID_SIDE) > 0 if mask else None
    images, xs, ys, names = [], [], [], []
    for row_index, layer in enumerate(layers):
        weights = trace.attention(kind, layer)
        for head in range(n_heads):
            small = downsample(weights[head], GRID_SIDE)
            scale = vmax if vmax is not None else max(float(small.max()), 1e-9)
            images.append(_rgba(hatch(colorize(small, 0.0, scale), allowed, max(1, cell_px // max(small.shape)))))
            xs.append(head * (1 + GAP))
            ys.append((len(layers) - 1 - row_index) * (1 + GAP))
            names.append(f"layer {layer} · head {head}")
    fig.select_one({"name": "thumbnails"}).data_source.data = {"image": images, "x": xs, "y": ys, "name": names}
    frame = fig.select_one({"name": "selected"})  # the red frame around the open head, when it is shown
    if selected is not None and selected[0] in layers and 0 <= selected[1] < n_heads:
        x = selected[1] * (1 + GAP) + 0.5
        y = (len(layers) - 1 - layers.index(selected[0])) * (1 + GAP) + 0.5
        if frame is None:
            fig.rect(x=x, y=y, width=1 + GAP / 2, height=1 + GAP / 2, fill_color=None, line_color="#d62728",
                     line_width=3, name="selected")  # fmt: skip
        else:
            frame.glyph.update(x=x, y=y)
    elif frame is not None:
        fig.renderers = [r for r in fig.renderers if r is not frame]
    fig.update(
        width=int(n_heads * cell_px * (1 + GAP)) + 80,
        height=int(len(layers) * cell_px * (1 + GAP)) + 60,
        name=f"grid-{kind}",
        tags=[{"layers": layers, "n_heads": n_heads}],
    )
    fig.title.text = f"{KIND_TITLES[kind]}: layers × heads (click one to open it)"
    fig.x_range.update(start=-GAP, end=n_heads * (1 + GAP))
    fig.y_range.update(start=-GAP, end=len(layers) * (1 + GAP))
    fig.xaxis.ticker.ticks = [h * (1 + GAP) + 0.5 for h in range(n_heads)]
    fig.xaxis.major_label_overrides = {h * (1 + GAP) + 0.5: f"head {h}" for h in range(n_heads)}
    fig.yaxis.ticker.ticks = [(len(layers) - 1 - r) * (1 + GAP) + 0.5 for r in range(len(layers))]
    fig.yaxis.major_label_overrides = {
        (len(layers) - 1 - r) * (1 + GAP) + 0.5: f"layer {layer}" for r, layer in enumerate(layers)
    }
    return fig


def grid_pick(
    x: float | None, y: float | None, layers: Sequence[int], n_heads: int, gap: float = GAP
) -> tuple[int, int] | None:
    """(layer, head) under data point (x, y) of a `grid` figure, or None between thumbnails."""
    if x is None or y is None:
        return None
    column_index, fx = divmod(x, 1 + gap)
    row_from_bottom, fy = divmod(y, 1 + gap)
    if fx > 1 or fy > 1 or not 0 <= column_index < n_heads or not 0 <= row_from_bottom < len(layers):
        return None
    return layers[len(layers) - 1 - int(row_from_bottom)], int(column_index)


# -- masks and Eq. (1) ------------------------------------------------------------------------------------
def mask_figure(trace: AttentionTrace, kind: str, budget: int = 360) -> figure:
    """The mask that shaped `kind`: allowed cells white, forbidden ones hatched."""
    q_labels, k_labels = trace.labels(kind)
    allowed = trace.mask(kind)
    what = {
        "encoder": "padding mask (one sentence: nothing padded)",
        "decoder": "causal mask (i sees keys ≤ i)",
        "cross": "padding mask (one sentence: nothing padded)",
    }[kind]
    if kind != "decoder" and not allowed.all():
        what = "padding mask: padded keys forbidden"
    return matrix_figure(
        allowed.astype(np.float32), q_labels, k_labels, allowed=allowed, vmax=1.0, palette=("#ffffff", "#ffffff"),
        title=f"{kind}: {what}", budget=budget, value_name="allowed", name=f"mask-{kind}",
    )  # fmt: skip


def computation_figure(
    parts: dict[str, np.ndarray], query: int, q_labels: Sequence[str], k_labels: Sequence[str], title: str = ""
) -> Any:
    """Eq. (1) for one query row: QKᵀ/√d_k, the masked scores (−∞ shown as such), the softmax,
    and the weighted sum of the value vectors, all on one key axis.

    `parts` holds (q, k) `scores`, `allowed`, `weights` and (k, d_v) `v`, (q, d_v) `out` (see
    `attnlab.explore.attention_parts`).
    """
    scores, allowed, weights = parts["scores"][query], parts["allowed"][query], parts["weights"][query]
    k = len(k_labels)
    width = int(np.clip(k * 26, 360, 900)) + 80
    keys = np.arange(k) + 0.5
    x_range = Range1d(0, k)
    finite = scores[allowed] if allowed.any() else np.zeros(1)
    low, high = float(min(finite.min(), 0.0)), float(max(finite.max(), 0.0))
    pad = 0.1 * (high - low or 1.0)

    def bars(values: np.ndarray, name: str, color: str, y_range: Range1d, heading: str) -> figure:
        fig = figure(
            width=width,
            height=150,
            x_range=x_range,
            y_range=y_range,
            tools="hover,save",
            toolbar_location=None,
            title=heading,
            name=name,
        )
        source = ColumnDataSource(
            {"x": keys, "top": values, "key": list(k_labels), "text": [f"{v:.3f}" for v in values]}
        )
        fig.vbar(x="x", top="top", width=0.8, color=color, source=source)
        fig.select_one(HoverTool).tooltips = [("key", "@key"), ("value", "@text")]
        _token_axis(fig.xaxis[0], k_labels, width - 80, flip=False)
        fig.xaxis.major_label_orientation = math.pi / 2
        fig.xgrid.visible = False
        return fig

    score_range = Range1d(low - pad, high + pad)
    raw = bars(
        scores, "eq1-scores", "#6b6ecf", score_range, f"{title} · query {query} ({q_labels[query]}): scores q·kⱼ/√d_k"
    )
    masked_values = np.where(allowed, scores, np.nan)
    masked = bars(
        np.nan_to_num(masked_values, nan=0.0),
        "eq1-masked",
        "#6b6ecf",
        score_range,
        "masked scores: forbidden keys set to −∞",
    )
    blocked = np.flatnonzero(~allowed)
    if blocked.size:
        masked.text(
            x=keys[blocked],
            y=[low - pad / 2] * blocked.size,
            text=["−∞"] * blocked.size,
            text_align="center",
            text_color="#d62728",
            text_font_size="12px",
        )
    soft = bars(
        weights,
        "eq1-softmax",
        "#2171b5",
        Range1d(0, max(1e-6, float(weights.max())) * 1.1),
        "softmax: attention weights (sum 1)",
    )
    v = parts["v"]  # (k, d_v)
    contributions = weights[:, None] * v  # (k, d_v), rows sum to the output
    bound = float(np.abs(contributions).max()) or 1.0
    contrib = matrix_figure(
        contributions.T, [f"v[{d}]" for d in range(v.shape[1])], list(k_labels), vmin=-bound, vmax=bound,
        palette=DIFF_PALETTE, title="weighted values aⱼ·vⱼ (columns), summed over keys →", budget=420,
        value_name="aⱼ·vⱼ", name="eq1-values", axis_labels=("key j", "dimension of v"),
    )  # fmt: skip
    out = parts["out"][query]  # (d_v,)
    bound_out = float(np.abs(out).max()) or 1.0
    result = matrix_figure(
        out[:, None], [f"v[{d}]" for d in range(out.size)], ["Σ"], vmin=-bound_out, vmax=bound_out,
        palette=DIFF_PALETTE, title="output", budget=420, value_name="output", name="eq1-output",
        axis_labels=("", ""),
    )  # fmt: skip
    result.width = 190
    return column(raw, masked, soft, row(contrib, result), name="eq1")


# -- head statistics ----------------------------------------------------------------------------------
STAT_COLUMNS = ("entropy", "distance", "self", "prev", "next", "first", "eos", "max")


def stats_source(rows: Sequence[dict]) -> ColumnDataSource:
    """`attnlab.stats.head_stats` rows as one source that the table and the scatter share
    (selecting a head in one selects it in the other)."""
    data: dict[str, list] = {name: [r[name] for r in rows] for name in ("kind", "layer", "head", *STAT_COLUMNS)}
    data["label"] = [f"{r['kind']} L{r['layer']} H{r['head']}" for r in rows]
    data["color"] = [KIND_COLORS[r["kind"]] for r in rows]
    return ColumnDataSource(data)


def stats_table(source: ColumnDataSource, height: int = 320) -> DataTable:
    """Sortable table (click a header), one row per head."""
    number = NumberFormatter(format="0.000")
    columns = [TableColumn(field="kind", title="kind", formatter=StringFormatter(), width=70)]
    columns += [TableColumn(field=name, title=name, width=45) for name in ("layer", "head")]
    columns += [TableColumn(field=name, title=name, formatter=number, width=65) for name in STAT_COLUMNS]
    return DataTable(
        source=source,
        columns=columns,
        width=720,
        height=height,
        sortable=True,
        index_position=None,
        selectable=True,
        name="stats-table",
    )


def stats_scatter(source: ColumnDataSource, x: str = "entropy", y: str = "distance") -> figure:
    """One dot per head, coloured by kind; tap a dot to select that head."""
    fig = figure(
        width=460,
        height=360,
        tools="tap,box_select,wheel_zoom,pan,reset,save",
        title=f"heads: {x} vs {y}",
        name="stats-scatter",
    )
    renderer = fig.scatter(
        x=x,
        y=y,
        source=source,
        color="color",
        legend_field="kind",
        size=10,
        alpha=0.8,
        selection_color="#d62728",
        nonselection_alpha=0.3,
    )
    fig.add_tools(
        HoverTool(renderers=[renderer], tooltips=[("head", "@label"), (x, f"@{x}{{0.000}}"), (y, f"@{y}{{0.000}}")])
    )
    fig.xaxis.axis_label, fig.yaxis.axis_label = x, y
    fig.legend.location = "top_left"
    return fig


# -- training timeline --------------------------------------------------------------------------------
def diff_figure(
    trace: AttentionTrace, reference: AttentionTrace, kind: str, layer: int, head: int, budget: int = 420
) -> figure:
    """weights(trace) − weights(reference) for one head (e.g. a training step minus the final model)."""
    now, final = head_map(trace, kind, layer, head), head_map(reference, kind, layer, head)
    if now.shape != final.shape:
        raise AttnlabError(f"the traces differ in shape ({now.shape} vs {final.shape}): not the same sentence pair")
    q_labels, k_labels = trace.labels(kind)
    return matrix_figure(
        now - final, q_labels, k_labels, allowed=trace.mask(kind), vmin=-1.0, vmax=1.0, palette=DIFF_PALETTE,
        title=f"difference to the final model · layer {layer} · head {head}", budget=budget, value_name="Δ weight", name="timeline-diff",
    )  # fmt: skip


def timeline_curve(
    steps: Sequence[int], values: dict[str, Sequence[float]], current: int | None = None, stat: str = "entropy"
) -> figure:
    """A head statistic across training steps, one line per head; a vertical line at `current`."""
    fig = figure(
        width=460,
        height=260,
        tools="save,reset,wheel_zoom",
        title=f"{stat} of each head across training",
        name="timeline-curve",
    )
    palette = Category10[10]
    items = []
    for i, (label, ys) in enumerate(values.items()):
        line = fig.line(list(steps), list(ys), color=palette[i % 10], line_width=2)
        dots = fig.scatter(list(steps), list(ys), color=palette[i % 10], size=5)
        items.append(LegendItem(label=label, renderers=[line, dots]))
    fig.add_layout(Legend(items=items, label_text_font_size="9px"), "right")
    if current is not None:
        fig.add_layout(Span(location=current, dimension="height", line_color="#d62728", line_dash="dashed"))
    fig.xaxis.axis_label, fig.yaxis.axis_label = "training step", stat
    return fig


# -- ablation -----------------------------------------------------------------------------------------
def token_delta_figure(tokens: Sequence[str], before: Sequence[float], after: Sequence[float]) -> figure:
    """Per-token log-probability of the original output, with all heads and with heads switched off."""
    n = len(tokens)
    width = int(np.clip(n * 30, 360, 900)) + 80
    fig = figure(
        width=width,
        height=240,
        x_range=Range1d(0, n),
        tools="hover,save",
        toolbar_location=None,
        title="log-probability of each original output token",
        name="ablation-tokens",
    )
    x = np.arange(n) + 0.5
    source = ColumnDataSource({"x": x, "before": list(before), "after": list(after), "token": list(tokens)})
    bars_before = fig.vbar(x="x", top="before", width=0.38, source=source, color="#9ecae1")
    bars_after = fig.vbar(x=np.asarray(x) + 0.2, top=list(after), width=0.38, color="#d62728")
    fig.add_layout(
        Legend(
            items=[
                LegendItem(label="all heads", renderers=[bars_before]),
                LegendItem(label="heads off", renderers=[bars_after]),
            ]
        ),
        "right",
    )
    fig.select_one(HoverTool).tooltips = [
        ("token", "@token"),
        ("all heads", "@before{0.000}"),
        ("heads off", "@after{0.000}"),
    ]
    _token_axis(fig.xaxis[0], tokens, width - 80, flip=False)
    fig.xaxis.major_label_orientation = math.pi / 2
    return fig


# -- parse trees --------------------------------------------------------------------------------------
def tree_figure(text: str, title: str = "parse tree") -> figure:
    """A bracketed tree drawn top-down: words at the bottom, constituents above the words they span."""
    from attnlab.treebank import Tree, parse

    try:
        trees = parse(text)
    except AttnlabError:
        trees = []
    if not trees:
        raise AttnlabError(f"not a bracketed tree: {_short(text, 60)!r}")
    root = trees[0] if len(trees) == 1 else Tree("", list(trees))
    nodes: list[tuple[float, int, str]] = []  # x, depth, label of constituents
    edges: list[tuple[float, int, float, int]] = []  # x0, depth0, x1, depth1 (-1: the word row)
    words: list[str] = []

    def place(node: Tree, depth: int) -> float:
        """Lay out `node` (children first); returns its x, the mean of its children's."""
        children: list[tuple[float, int]] = []  # (x, depth; -1 = the word row)
        for child in node.children:
            if isinstance(child, str):  # words hang on the bottom row, under their preterminal
                words.append(child)
                children.append((float(len(words) - 1), -1))
            else:
                children.append((place(child, depth + 1), depth + 1))
        x = sum(cx for cx, _ in children) / len(children) if children else float(len(words))
        edges.extend((x, depth, cx, cd) for cx, cd in children)
        nodes.append((x, depth, node.label or "ROOT"))
        return x

    place(root, 0)
    leaves = len(words)
    depth = max(d for _, d, _ in nodes) + 1  # the word row
    edges = [(x0, d0, x1, depth if d1 < 0 else d1) for x0, d0, x1, d1 in edges]
    width = int(np.clip(leaves * 64, 320, 1400))
    fig = figure(
        width=width, height=70 + 44 * (depth + 1), x_range=Range1d(-0.8, max(leaves, 1) - 0.2), y_range=Range1d(depth + 0.6, -0.6),
        tools="pan,wheel_zoom,reset,save", toolbar_location="right", title=title, name="tree",
    )  # fmt: skip
    fig.segment(
        x0=[e[0] for e in edges],
        y0=[e[1] for e in edges],
        x1=[e[2] for e in edges],
        y1=[e[3] for e in edges],
        color="#999999",
    )
    labels = ColumnDataSource(
        {
            "x": [n[0] for n in nodes] + list(range(leaves)),
            "y": [n[1] for n in nodes] + [depth] * leaves,
            "text": [n[2] for n in nodes] + words,
            "color": ["#333333"] * len(nodes) + ["#08519c"] * leaves,
        }
    )
    fig.text(x="x", y="y", text="text", source=labels, text_align="center", text_baseline="middle", text_color="color",
             text_font_size="12px", background_fill_color="white")  # fmt: skip
    fig.axis.visible = False
    fig.grid.visible = False
    return fig


# -- export (no browser, no network) ------------------------------------------------------------------
def _font(size: int) -> Any:
    """DejaVu Sans when the system has it (it draws sentencepiece's ▁ and most scripts), else
    Pillow's own font, which lacks ▁ (`_png_label` spells it _ then)."""
    from PIL import ImageFont

    for name in ("DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the bitmap font
        return ImageFont.load_default()


def _png_label(text: str, font: Any) -> str:
    if "DejaVu" in str(getattr(font, "path", "")):
        return text
    return text.replace("\u2581", "_").replace("–", "-")


def heatmap_png(
    trace: AttentionTrace, kind: str, layer: int, head: int, *, mask: bool = True, vmax: float | None = 1.0
) -> bytes:
    """The head heatmap as a PNG drawn with Pillow: cells, hatched mask, token labels, colour bar."""
    from PIL import Image, ImageDraw

    weights = head_map(trace, kind, layer, head)
    q_labels, k_labels = trace.labels(kind)
    q, k = weights.shape
    cell = int(np.clip(720 // max(q, k, 1), 2, 28))
    font = _font(max(8, min(13, cell)))
    stride_q, stride_k = _stride(q, q * cell), _stride(k, k * cell)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    q_text = [_png_label(_short(s), font) for s in q_labels]
    k_text = [_png_label(_short(s), font) for s in k_labels]
    text_w = max((measure.textlength(s, font=font) for s in q_text + k_text), default=10)
    left, top, bar = int(text_w) + 12, int(text_w) + 40, 70
    width, height = left + k * cell + bar, top + q * cell + 16
    scale = vmax if vmax is not None else max(float(weights.max()), 1e-9)
    cells = hatch(colorize(weights, 0.0, scale), trace.mask(kind) if mask else None, cell)
    image = Image.new("RGB", (width, height), "white")
    image.paste(Image.fromarray(cells), (left, top))
    draw = ImageDraw.Draw(image)
    title_font = _font(14)
    title = _png_label(f"{KIND_TITLES[kind]} · layer {layer} · head {head}", title_font)
    draw.text((6, 6), title, fill="black", font=title_font)
    for i in range(0, q, stride_q):
        label = q_text[i]
        draw.text(
            (left - 6 - measure.textlength(label, font=font), top + i * cell + cell / 2),
            label,
            fill="black",
            font=font,
            anchor="lm",
        )
    column_labels = Image.new("RGB", (top - 30, k * cell), "white")  # drawn sideways, then rotated
    column_draw = ImageDraw.Draw(column_labels)
    for j in range(0, k, stride_k):
        column_draw.text((4, j * cell + cell / 2), k_text[j], fill="black", font=font, anchor="lm")
    image.paste(column_labels.rotate(90, expand=True), (left, 30))
    ramp = colorize(np.linspace(scale, 0.0, 200)[:, None].repeat(12, 1), 0.0, scale)
    image.paste(Image.fromarray(ramp), (left + k * cell + 12, top))
    for value, y in ((scale, top), (0.0, top + 199)):
        draw.text((left + k * cell + 28, y), f"{value:.2f}", fill="black", font=font, anchor="lm")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def heatmap_svg(
    trace: AttentionTrace, kind: str, layer: int, head: int, *, mask: bool = True, vmax: float | None = 1.0
) -> str:
    """The head heatmap as SVG: vector text; cells as rects (or, past 10,000 cells, an embedded image)."""
    weights = head_map(trace, kind, layer, head)
    q_labels, k_labels = trace.labels(kind)
    q, k = weights.shape
    cell = float(np.clip(720 / max(q, k, 1), 2, 24))
    font = max(7.0, min(12.0, cell * 0.8))
    left = top = 8 + 0.62 * font * max((len(_short(s)) for s in list(q_labels) + list(k_labels)), default=4)
    top += 24
    width, height = left + k * cell + 80, top + q * cell + 12
    scale = vmax if vmax is not None else max(float(weights.max()), 1e-9)
    allowed = trace.mask(kind) if mask else np.ones((q, k), bool)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">',
        '<defs><pattern id="masked" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#e0e0e0"/><line x1="0" y1="0" x2="0" y2="6" stroke="#969696" stroke-width="2"/></pattern>'
        '<linearGradient id="bar" x1="0" y1="1" x2="0" y2="0">'
        + "".join(f'<stop offset="{i / 10:.1f}" stop-color="{PALETTE[min(255, int(i * 25.6))]}"/>' for i in range(11))
        + "</linearGradient></defs>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="6" y="18" font-size="14">{html.escape(KIND_TITLES[kind])} · layer {layer} · head {head}</text>',
    ]
    rgb = colorize(weights, 0.0, scale)
    if q * k <= 10_000:
        for i in range(q):
            for j in range(k):
                fill = "url(#masked)" if not allowed[i, j] else "#" + bytes(rgb[i, j]).hex()
                parts.append(
                    f'<rect x="{left + j * cell:.2f}" y="{top + i * cell:.2f}" width="{cell:.2f}" height="{cell:.2f}" fill="{fill}"><title>{weights[i, j]:.4f}</title></rect>'
                )
    else:
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(hatch(rgb, allowed, 4)).save(buffer, format="PNG")
        data = base64.b64encode(buffer.getvalue()).decode()
        parts.append(
            f'<image x="{left}" y="{top}" width="{k * cell}" height="{q * cell}" preserveAspectRatio="none" style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>'
        )
    for i in range(0, q, _stride(q, q * cell)):
        parts.append(
            f'<text x="{left - 4:.1f}" y="{top + (i + 0.5) * cell:.1f}" font-size="{font:.1f}" text-anchor="end" dominant-baseline="middle">{html.escape(_short(q_labels[i]))}</text>'
        )
    for j in range(0, k, _stride(k, k * cell)):
        x, y = left + (j + 0.5) * cell, top - 4
        parts.append(
            f'<text transform="translate({x:.1f},{y:.1f}) rotate(-90)" font-size="{font:.1f}" dominant-baseline="middle">{html.escape(_short(k_labels[j]))}</text>'
        )
    bar_x = left + k * cell + 14
    parts.append(f'<rect x="{bar_x:.1f}" y="{top:.1f}" width="12" height="200" fill="url(#bar)" stroke="#999"/>')
    parts.append(f'<text x="{bar_x + 16:.1f}" y="{top + 8:.1f}" font-size="10">{scale:.2f}</text>')
    parts.append(f'<text x="{bar_x + 16:.1f}" y="{top + 200:.1f}" font-size="10">0.00</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def standalone_html(layout: Any, title: str = "attnlab") -> str:
    """One self-contained HTML file (bokeh's JavaScript inlined): opens offline, anywhere."""
    return file_html(layout, INLINE, title)


def summary_div(trace: AttentionTrace) -> Div:
    """Source, output and model identity as a small HTML block (for the standalone page)."""
    meta = trace.meta
    text = html.escape(str(meta.get("text", " ".join(trace.src_tokens))))
    output = html.escape(str(meta.get("output", " ".join(trace.tgt_tokens))))
    model = trace.model.get("checkpoint") or "model"
    return Div(
        text=f"<h2>attnlab</h2><p><b>input</b>: {text}</p><p><b>output</b>: {output}</p><p><small>{html.escape(str(model))} · weights {trace.model.get('weights_sha256', '?')}</small></p>"
    )
