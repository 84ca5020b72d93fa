"""A grid of coloured cells, each labelled with a word or a number: layers × pieces
(`piece_grid`: the logit lens, a layer's first choice at each position; residual-stream
patching, each layer's output at each position), and blocks of layers (0 at the bottom) × columns
side by side (`block_grid`): every head of a model with one number each (`head_grid`: head
importance, head patching), the three kinds of attention side by side, a tap on a cell naming its
head; and each decoder head and feed-forward layer's share of one output piece's logit (direct
logit attribution)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any

import numpy as np
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    CustomJS,
    Div,
    FixedTicker,
    GlyphRenderer,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.record.trace import KINDS
from attnlab.viz.axes import label_room, token_axis
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, title_px, wrap_title
from attnlab.viz.selection import on_tap
from attnlab.viz.words import kind_title

CELL = 44  # pixels a side of a head's cell
GAP = 1  # cells between two kinds' blocks
PIECE_W, LAYER_H = 64, 30  # pixels of a layers × pieces cell: room for a piece of ~8 columns
VISIBLE = 16  # pieces shown at once; a longer row is dragged sideways (cells never shrink)
TITLE_MIN_PX = 480  # a title is wrapped to its cells' width, but not narrower than this
FIT_PX = 660  # the widest a figure fits beside the 350 px inputs in a 1024 px window, with their margins
# The columns a grid shows as its frame narrows: as many as its own width showed, less those the
# lost pixels held (so cells keep their width), from where the view was dragged to; the x axis
# says "drag" while some are hidden. Run when the figure is laid out and after a reset. `n` and
# `shown` null: the x range's bounds, all shown at its own width (a figure redrawn in place).
# Bokeh's own stop of the Tab key in a figure (its events layer) is named by the title and the
# axis, and while columns are hidden ← → move a column there, Page Up / Page Down a window's
# width, Home / End to either end (dragging was the only way to them); those keys then stop
# there, so the page's ← → do not also walk the heads.
_FIT_JS = """
const all = n ?? r.bounds[1], own = shown ?? all;
const lost = Math.max(0, fig.max_width - fig.outer_width);
const k = Math.min(all, own * fig.inner_width / (fig.inner_width + lost));
const start = Math.max(0, Math.min(r.start, all - k));
r.setv({start: start, end: start + k});
const hidden = k < all - 0.01;
axis.axis_label = hidden ? drag : plain;
const view = typeof Bokeh !== "undefined" && Bokeh.index ? Bokeh.index.find_one(fig) : null;
const keys = view?.canvas_view?.events_el;
if (keys) {
  keys.setAttribute("role", "img");
  keys.setAttribute("aria-label", [fig.title?.text, axis.axis_label].filter(Boolean).join(". ").replace(/\\s+/g, " "));
  if (!keys.attnKeys) {
    keys.attnKeys = true;
    keys.addEventListener("keydown", (e) => {
      const [low, high] = r.bounds, width = r.end - r.start;
      const step = {ArrowLeft: -1, ArrowRight: 1, PageUp: -width, PageDown: width, Home: -high, End: high}[e.key];
      if (step === undefined || e.ctrlKey || e.altKey || e.metaKey || width >= high - low - 0.01) return;
      e.preventDefault();
      e.stopPropagation();
      const to = Math.max(low, Math.min(r.start + step, high - width));
      r.setv({start: to, end: to + width});
    });
  }
}
"""


def fitted_title(title: str, cells_px: int, most: int = 10**6) -> tuple[str, int, int]:
    """(`title` wrapped onto lines as wide as the cells but at most `most` pixels, the widest
    line's pixels, the pixels its extra lines take): a one-line title set the figure's width, and
    a Spanish residual grid of eight pieces ran 1,100 px wide, its cells stretched, past a 1400 px
    window."""
    wrapped = wrap_title(title, min(max(cells_px, TITLE_MIN_PX), most))
    return wrapped, max(title_px(line) for line in wrapped.split("\n")), TITLE_LINE_PX * wrapped.count("\n")


def fit_window(
    fig: figure, shown: float | None, n: float | None, drag: str | None = None, redrawn: ColumnDataSource | None = None
) -> figure:
    """Let a grid of `n` columns, `shown` of them in its own width, narrow with the window down to
    `FIT_PX` (the logit lens of 14 pieces was 1,006 px, the head importance of four heads 746:
    past a 1024 px window): its cells keep their width, and the columns that no longer fit are
    dragged into view; `drag`, the x axis's label while some are hidden. Its title must fit in
    `FIT_PX` (`fitted_title`'s `most`). A figure redrawn in place (a head's map) gives `n` and
    `shown` None, all of its x range's bounds at its own width, and the source whose new data is
    a redraw (`redrawn`): that refits it, and its updater sets `fit_widths` with its new width."""
    fit_widths(fig)
    fig.sizing_mode = "stretch_width"
    axis = fig.xaxis[0]
    args = {"fig": fig, "r": fig.x_range, "axis": axis, "shown": shown, "n": n}
    fit = CustomJS(args={**args, "plain": axis.axis_label or "", "drag": drag or axis.axis_label or ""}, code=_FIT_JS)
    fig.js_on_change("inner_width", fit)
    fig.js_on_event("reset", fit)
    if redrawn is not None:
        redrawn.js_on_change("data", fit)
    return fig


def fit_widths(fig: figure) -> None:
    """The widths `fit_window` narrows `fig` between: its own, and at least `FIT_PX`."""
    fig.max_width, fig.min_width = fig.width, min(fig.width, FIT_PX)


def one_width(figures: Sequence[Any]) -> list[Any]:
    """`figures` drawn side by side over the same cells (two models' maps or readings of one
    output) made as wide as the widest, Divs and Nones left as they are: a frame stretches to its
    title, and the short "A − B" title drew the difference with narrower cells than A's and B's,
    B's longer logit-lens title ("…, read on the output of A") B's cells wider than A's, hard to line
    up. A figure that narrows with the window (`fit_window`) narrows from its new width."""
    drawn = [f for f in figures if f is not None and not isinstance(f, Div)]
    widest = max((f.width for f in drawn), default=0)
    for fig in drawn:
        fig.width = widest
        if fig.sizing_mode == "stretch_width":
            fit_widths(fig)
    return list(figures)


def decimals(top: float, least: int = 2, most: int = 4) -> int:
    """Decimals that write the largest |value|, `top`, with two significant digits, from `least`
    to `most`: a parser's head importances (0.003-0.03) all read 0.00-0.03 at two."""
    if not np.isfinite(top) or top <= 0:
        return least
    return int(min(most, max(least, 1 - np.floor(np.log10(top)))))


def share_label(value: float, digits: int = 2) -> str:
    """A share as a cell shows it: `digits` decimals, "–" where nothing was patched (NaN), and no
    minus on a value that rounds to zero ("-0.00" read as a small share the other way where nothing moved)."""
    return "–" if np.isnan(value) else f"{0:.{digits}f}" if round(value, digits) == 0 else f"{value:.{digits}f}"


def labelled_cells(
    fig: figure, source: ColumnDataSource, value: str, mapper: LinearColorMapper, font_size: str, text_name: str
) -> GlyphRenderer:
    """Unit cells at the source's (x, y), filled by its `value` column through `mapper`, with its
    `label` column written on them in its `text_color`; the cells' renderer (named "cells", which
    the hover and the tests read) and the text's (`text_name`)."""
    cells = fig.rect(
        x="x", y="y", width=1, height=1, source=source, line_color="white",
        fill_color={"field": value, "transform": mapper}, name="cells",
    )  # fmt: skip
    fig.text(
        x="x", y="y", text="label", source=source, text_align="center", text_baseline="middle",
        text_font_size=font_size, text_color="text_color", name=text_name,
    )  # fmt: skip
    return cells


def piece_grid(
    layers: Sequence[str],
    pieces: Sequence[str],
    *,
    title: str,
    name: str,
    axes: tuple[str, str],
    drag: str,
    tap: bool = False,
) -> figure:
    """An empty figure for a grid of `layers` (their names, the first at the bottom) × `pieces`
    (as the top axis shows them: made by a `labels.py` helper), `PIECE_W` (or the widest piece's
    label) × `LAYER_H` pixels a cell and at most `VISIBLE` pieces at once, fewer in a narrow window
    (`fit_window`; drag sideways for the rest). `axes` are the (layers, pieces) axis words;
    `drag`, with fields {output} (the pieces' word) and {n}, is the pieces' axis word when they do
    not all fit; `tap` adds the tap tool. Cells sit at (position + 0.5, layer + 0.5)."""
    n_layers, n = len(layers), len(pieces)
    shown = min(n, VISIBLE)
    tools = "xpan,xwheel_zoom,reset,save"
    # a wider cell for a wide piece ("▁man→▁woman" ran into its neighbours on a 64 px cell), but at
    # most 16 px wider: a 14-piece logit lens must still fit beside the inputs in a 1400 px window
    cell_w = int(np.clip(label_room(pieces), PIECE_W, PIECE_W + 16))
    title, title_width, title_lines = fitted_title(title, shown * cell_w, FIT_PX - 110)
    fig = figure(
        width=max(shown * cell_w, title_width) + 110,  # (the title starts where the cells do)
        height=n_layers * LAYER_H + label_room(pieces) + 16 + 110 + title_lines,
        x_range=Range1d(0, shown, bounds=(0, n)),
        y_range=Range1d(0, n_layers, bounds=(0, n_layers)),
        tools=f"tap,{tools}" if tap else tools,
        active_drag="xpan",
        toolbar_location="below",
        x_axis_location="above",
        title=title,
        name=name,
    )
    token_axis(fig.xaxis[0], pieces, n * cell_w, flip=False, label=str)
    fig.yaxis.ticker = FixedTicker(ticks=[i + 0.5 for i in range(n_layers)])
    fig.yaxis.major_label_overrides = {i + 0.5: layer for i, layer in enumerate(layers)}
    layer_word, piece_word = axes
    fig.xaxis.axis_label = piece_word if n <= VISIBLE else drag.format(output=piece_word, n=n)
    fig.yaxis.axis_label = layer_word
    fig.grid.visible = False
    return fit_window(fig, shown, n, drag.format(output=piece_word, n=n))


def head_grid(
    values: np.ndarray,
    labels: Sequence[str],
    text_color: Sequence[str],
    mapper: LinearColorMapper,
    *,
    title: str,
    name: str,
    words: Mapping[str, str],
    axes: tuple[str, str],
    tips: list[tuple[str, str]],
    columns: Mapping[str, Sequence[Any]] | None = None,
    on_select: Callable[[str, int, int], None] | None = None,
) -> figure:
    """Every head's number in `values` (kinds in `KINDS` order, layers, heads) as a cell coloured
    through `mapper` and labelled with `labels` (flat, in `values`' order) in `text_color`. The
    kinds' names from `words` (as `say` returns them) above their blocks, `axes` the (layer, head)
    axis words, `tips` the hover's rows after the head's kind, layer and head (the first names the
    value, as the colour bar's title; bokeh fields of
    `value` or of `columns`, more flat source columns), a colour bar of `mapper` on the right, and
    `on_select(kind, layer, head)` called when a cell is tapped (in a Bokeh server or Panel session)."""
    n_kinds, n_layers, n_heads = values.shape
    kind, layer, head = (a.ravel() for a in np.meshgrid(*map(np.arange, values.shape), indexing="ij"))
    source = ColumnDataSource(
        {
            "x": kind * (n_heads + GAP) + head + 0.5,  # (`block_starts` of equal blocks)
            "y": layer + 0.5,
            "value": values.ravel(),
            "label": list(labels),
            "text_color": list(text_color),
            "kind": [kind_title(KINDS[k], words) for k in kind],
            "layer": layer,
            "head": head,
            **(columns or {}),
        }
    )
    heads = [str(h) for h in range(n_heads)]
    layer_word, head_word = axes
    fig = block_grid(
        source,
        [(words[f"kind_name.{KINDS[k]}"], heads) for k in range(n_kinds)],
        n_layers,
        mapper,
        title=title,
        name=name,
        axes=axes,
        tooltips=[("", "@kind"), (layer_word, "@layer"), (head_word, "@head"), *tips],
        value=tips[0][0],
        tap=on_select is not None,
        drag=words["grid.drag"],
    )
    on_tap(fig, lambda x, y: head_pick(x, y, n_layers, n_heads), on_select)
    return use_fonts(fig, words)


def block_starts(widths: Sequence[int]) -> list[int]:
    """The x of each block's first column, for blocks of `widths` columns `GAP` columns apart."""
    return [sum(widths[:i]) + GAP * i for i in range(len(widths))]


def block_grid(
    source: ColumnDataSource,
    blocks: Sequence[tuple[str, Sequence[str]]],
    n_layers: int,
    mapper: LinearColorMapper,
    *,
    title: str,
    name: str,
    axes: tuple[str, str],
    tooltips: list[tuple[str, str]],
    value: str,
    tap: bool = False,
    drag: str = "{axis}",
) -> figure:
    """Blocks of columns side by side, `GAP` columns apart, each `n_layers` rows (0 at the bottom)
    of `CELL`-pixel cells: `blocks` are (the name written above the block, its columns' tick
    labels). `source` holds the cells (`labelled_cells`' columns, the value in "value"), a block's
    column c at layer l at (`block_starts`[block] + c + 0.5, l + 0.5); `axes` are the (layer,
    column) axis words, `tooltips` the hover's rows; a colour bar of `mapper` on the right, titled
    `value` (what the colours measure: the grids of patching and importance had a bare one); `tap`
    adds the tap tool; `drag` (field {axis}, the columns' word) is the x axis's label while a narrow
    window hides some columns (`fit_window`). Fonts are the caller's to set, once it has added its
    own parts."""
    widths = [len(ticks) for _, ticks in blocks]
    starts = block_starts(widths)
    width = starts[-1] + widths[-1]
    title, title_width, title_lines = fitted_title(title, width * CELL, FIT_PX - 130)
    fig = figure(
        width=max(width * CELL, title_width) + 130,  # (the title starts where the cells do)
        height=n_layers * CELL + 120 + title_lines,
        x_range=Range1d(0, width, bounds=(0, width)),
        y_range=Range1d(0, n_layers + 0.8),
        tools="tap,xpan,save" if tap else "xpan,save",  # xpan: the blocks a narrow window hides (`fit_window`)
        active_drag="xpan",
        toolbar_location=None,
        title=title,
        name=name,
    )
    cells = labelled_cells(fig, source, "value", mapper, "10px", "values")
    fig.text(  # each block's name, above it
        x=[s + w / 2 for s, w in zip(starts, widths, strict=True)], y=[n_layers + 0.4] * len(blocks),
        text=[block for block, _ in blocks], text_align="center", text_baseline="middle",
        text_font_size="12px", name="kinds",
    )  # fmt: skip
    layer_word, column_word = axes
    fig.add_tools(HoverTool(renderers=[cells], tooltips=tooltips))
    bar = ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=value)
    fig.add_layout(bar, "right")
    centres = [s + c + 0.5 for s, w in zip(starts, widths, strict=True) for c in range(w)]
    fig.xaxis.ticker = FixedTicker(ticks=centres)
    fig.xaxis.major_label_overrides = dict(zip(centres, [t for _, ticks in blocks for t in ticks], strict=True))
    fig.xaxis.axis_label = column_word
    fig.yaxis.ticker = FixedTicker(ticks=[i + 0.5 for i in range(n_layers)])
    fig.yaxis.major_label_overrides = {i + 0.5: str(i) for i in range(n_layers)}
    fig.yaxis.axis_label = layer_word
    fig.grid.visible = False
    return fit_window(fig, width, width, drag.format(axis=column_word))


def head_pick(x: object, y: object, n_layers: int, n_heads: int) -> tuple[str, int, int] | None:
    """(kind, layer, head) of the cell under data point (x, y) of a `head_grid` of `n_layers` ×
    `n_heads` per kind, or None between blocks, off the grid, or for what is not a point (a
    crafted tap can send a string, NaN)."""
    if not (
        isinstance(x, Real) and isinstance(y, Real) and 0 <= y < n_layers and 0 <= x < len(KINDS) * (n_heads + GAP)
    ):
        return None
    block, column = divmod(int(x), n_heads + GAP)
    if block >= len(KINDS) or column >= n_heads:
        return None
    return KINDS[block], int(y), column
