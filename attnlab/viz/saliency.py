"""Gradient saliency (`attnlab.record.saliency`, gradient × input) as one heat map: a row for each
output piece (top to bottom), a column for each source piece, then, after a gap and a grey line,
one for each of the decoder's input pieces (<s> and the output written so far). The two groups are
named under the map. Each cell is that input's share of its row's |saliency| over both groups, so
a row sums to 1 and the left block's darkness says how much the piece depends on the source at all
(`Saliency.source_share`) rather than on the words before it; read alone, attention cannot say
that. A decoder input after the row's own position is one the decoder never sees (the causal
mask): hatched grey, as every view draws a forbidden cell, never a white zero.

Two `image` glyphs, not a glyph per cell: a 200-piece pair stays cheap. The hover names the output
and input pieces (and the input's group), the share and the signed score; the colour bar says what
the colours measure. Long pairs shrink the cells to `budget` pixels a side, and with `fit` the map
narrows with the window, the columns that no longer fit dragged into view (`cells.fit_window`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    CustomJSHover,
    FixedTicker,
    HoverTool,
    LinearAxis,
    LinearColorMapper,
    Range1d,
    Span,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.axes import cell_px, label_room, label_stride
from attnlab.viz.cells import FIT_PX, fit_window, fitted_title
from attnlab.viz.colors import MASK_LIGHT, PALETTE, mask_overlay
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.options import check_options
from attnlab.viz.words import say

if TYPE_CHECKING:
    from attnlab.record.saliency import Saliency

BAR_PX = 130  # the cells' height at least: the colour bar runs along it, and its title was cut on a short map
GAP_PX = 14  # the gap between the source's columns and the decoder inputs', at least (a line runs down it)
MASKED = "#{:02x}{:02x}{:02x}".format(*MASK_LIGHT)  # under the hatch: the colour of a share below 0
UNSEEN = -1.0  # the share of a decoder input the row cannot see (bokeh writes a NaN's hover as "NaN", unformatted)
# The hover's input piece: the column's piece and its group, "" in the gap. `groups` are
# [(first column, labels, group name)], the source's and the decoder inputs'.
_INPUT_JS = """
const x = special_vars.x;
for (const [start, labels, name] of groups) {
  const i = Math.floor(x - start);
  if (i >= 0 && i < labels.length) return labels[i] + "  (" + name + ", " + i + ")";
}
return "";
"""
_OUTPUT_JS = """
const i = labels.length - 1 - Math.floor(special_vars.y);
return i >= 0 && i < labels.length ? labels[i] + "  (" + i + ")" : "";
"""
_SHARE_JS = "return value < 0 ? masked : value.toFixed(3);"
_SCORE_JS = 'return (value >= 0 ? "+" : "") + value.toPrecision(3);'


def saliency_figure(
    s: Saliency,
    *,
    title: str | None = None,
    name: str = "saliency",
    words: Mapping[str, str] | None = None,
    budget: int = 480,
    fit: bool = False,
    scale: float | None = None,
) -> figure:
    """The saliency of every source and decoder-input piece for every output piece of `s`, each
    cell its share of the row's |saliency| (a row sums to 1 over both groups). `title` None is its
    own (it says when the map is SmoothGrad's, and over how many copies); `words` replaces any of
    `viz.words.WORDS` ("saliency.*", "grid.drag"); `budget` is the pixels the rows, and the
    columns, may take before the cells shrink (at most 28 px, at least 3; rows and columns apart); with `fit` it
    narrows with the window down to `cells.FIT_PX` (a served page), without it keeps its width
    (an export, a notebook); `scale` is the share where the colours end (None: this map's largest,
    `saliency_scale`), so that two models' maps side by side read on one scale."""
    check_options(title=title, budget=budget, name=name)
    if scale is not None and (isinstance(scale, bool) or not (isinstance(scale, int | float) and 0 < scale <= 1)):
        raise AttnlabError(f"scale (the share the colours reach) is a number in (0, 1], got {scale!r}")
    shares, allowed = _shares(s)
    said = say(words)
    n_rows, n_source = shares[0].shape
    n_inputs = shares[1].shape[1]
    source, inputs, produced = spelled(s.source), spelled(s.inputs), spelled(s.produced)
    room = label_room([*source, *inputs, *produced]) + 16
    columns_px = min(budget, FIT_PX - room - 90 - GAP_PX)  # a short pair fits a 1024 px window without dragging
    # rows and columns sized apart, as every grid's (`cell_px`): square cells made a long source's 37 rows a 130 px strip
    row, column = cell_px(n_rows, budget), cell_px(n_source + n_inputs, columns_px)
    gap = max(1.0, GAP_PX / column)  # in columns
    start = n_source + gap  # the decoder inputs' first column
    width = start + n_inputs
    own = said["saliency.title_smooth"].format(samples=s.samples) if s.samples else said["saliency.title"]
    wrapped, title_width, title_lines = fitted_title(title or own, int(width * column), FIT_PX - room - 90)
    fig = figure(
        width=max(int(width * column), title_width) + room + 90,  # (the colour bar's 90; the title starts at the cells)
        height=max(int(n_rows * row), BAR_PX) + room + 90 + title_lines,  # (a few rows: cells taller than wide)
        x_range=Range1d(0, width, bounds=(0, width)),
        y_range=Range1d(0, n_rows, bounds=(0, n_rows)),
        tools="xpan,reset,save",  # xpan: the columns a narrow window hides (`fit_window`)
        active_drag="xpan",
        toolbar_location="below",
        x_axis_location="above",
        title=wrapped,
        name=name,
    )
    top = scale or _top(shares)  # where the colours end
    mapper = LinearColorMapper(palette=list(PALETTE), low=0.0, high=top, low_color=MASKED)
    scores = (s.source_scores, s.target_scores)  # (exactly 0 where the row cannot see)
    cells = []
    for group, share, score, x in zip(("source", "inputs"), shares, scores, (0.0, start), strict=True):
        columns = {
            "image": [np.ascontiguousarray(share[::-1], np.float32)],  # (bokeh draws row 0 at the bottom)
            "score": [np.ascontiguousarray(score[::-1], np.float64)],  # (the hover reads it at the image's index)
        }
        block = fig.image(
            image="image", x=x, y=0, dw=share.shape[1], dh=n_rows, color_mapper=mapper, name=f"cells-{group}",
            source=ColumnDataSource(columns),
        )  # fmt: skip
        cells.append(block)
    if not allowed.all():  # the decoder inputs a row cannot see: hatched as every view's forbidden cells
        fig.image_rgba(image=[mask_overlay(allowed)], x=start, y=0, dw=n_inputs, dh=n_rows, name="mask-overlay")
    fig.add_layout(Span(location=n_source + gap / 2, dimension="height", line_color="#888888", line_width=1))
    groups = [(0.0, _whole(source), said["saliency.source"]), (start, _whole(inputs), said["saliency.inputs"])]
    fig.add_tools(
        HoverTool(
            renderers=cells,
            tooltips=[
                (said["saliency.output"], "$y{custom}"),
                (said["saliency.input"], "$x{custom}"),
                (said["saliency.share"], "@image{custom}"),
                (said["saliency.score"], "@score{custom}"),
            ],
            formatters={
                "$x": CustomJSHover(args={"groups": groups}, code=_INPUT_JS),
                "$y": CustomJSHover(args={"labels": _whole(produced)}, code=_OUTPUT_JS),
                "@image": CustomJSHover(args={"masked": said["saliency.masked"]}, code=_SHARE_JS),
                "@score": CustomJSHover(code=_SCORE_JS),
            },
        )
    )
    _piece_ticks(fig, [(0.0, source), (start, inputs)], column)
    rows = {n_rows - i - 0.5: piece_label(produced[i]) for i in range(0, n_rows, label_stride(n_rows, n_rows * row))}
    fig.yaxis.ticker = FixedTicker(ticks=list(rows))
    fig.yaxis.major_label_overrides = rows
    names = LinearAxis(
        ticker=FixedTicker(ticks=[n_source / 2, start + n_inputs / 2]), axis_line_color=None,
        major_tick_line_color=None, minor_tick_line_color=None, major_label_text_font_style="bold",
        major_label_overrides={n_source / 2: said["saliency.source"], start + n_inputs / 2: said["saliency.inputs"]},
    )  # fmt: skip
    fig.add_layout(names, "below")  # each group's name under its columns
    for axis in (fig.xaxis[0], fig.yaxis[0]):
        axis.major_tick_line_color = axis.minor_tick_line_color = None
        axis.major_label_text_font_size = "10px" if min(row, column) < 16 else "11px"
    fig.xaxis[0].major_label_orientation = math.pi / 2
    fig.xaxis[0].axis_label, fig.yaxis[0].axis_label = said["saliency.input"], said["saliency.output"]
    fig.grid.visible = False
    bar = ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=said["saliency.share"])
    fig.add_layout(bar, "right")
    if fit:
        fit_window(fig, width, width, said["grid.drag"].format(axis=said["saliency.input"]))
    return use_fonts(fig, said)


def saliency_scale(s: Saliency) -> float:
    """The largest share of any cell of `s`: where `saliency_figure`'s colours end by default."""
    return _top(_shares(s)[0])


def _top(shares: tuple[np.ndarray, np.ndarray]) -> float:
    return max(*(float(share.max(initial=0.0)) for share in shares), 1e-9)


def _shares(s: object) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """The two groups' shares (`UNSEEN` for the decoder inputs a row cannot see), and which decoder inputs
    each row sees; or one line: what is not a `Saliency`, scores that do not match its pieces."""
    arrays = [getattr(s, a, None) for a in ("source_scores", "target_scores")]
    pieces = [getattr(s, a, None) for a in ("source", "inputs", "produced")]
    if not (all(isinstance(a, np.ndarray) for a in arrays) and all(isinstance(p, list) for p in pieces)):
        raise AttnlabError(f"saliency_figure draws what attnlab.record.saliency returns, got {type(s).__name__}")
    source, inputs, produced = map(len, pieces)
    if arrays[0].shape != (produced, source) or arrays[1].shape != (produced, inputs) or not produced:
        raise AttnlabError(
            f"saliency_figure draws scores of shape (output, source) and (output, inputs), {produced} × {source} and "
            f"{produced} × {inputs} here, got {arrays[0].shape} and {arrays[1].shape}"
        )
    bad = next((t for a in arrays for t in range(produced) if not np.isfinite(a[t]).all()), None)
    if bad is not None:  # (drawn as a row of no saliency, and the hover wrote "NaN")
        raise AttnlabError(f"saliency_figure draws finite scores; output piece {bad} has NaN or infinity")
    magnitude = [np.abs(a.astype(np.float64)) for a in arrays]  # (integer scores: numpy's casting error)
    total = magnitude[0].sum(1, keepdims=True) + magnitude[1].sum(1, keepdims=True)
    shares = [np.divide(m, total, out=np.zeros_like(m), where=total > 0) for m in magnitude]
    allowed = np.tril(np.ones((produced, inputs), bool))  # row t reads the decoder's inputs 0..t
    return (shares[0], np.where(allowed, shares[1], UNSEEN)), allowed


def _piece_ticks(fig: figure, groups: Sequence[tuple[float, Sequence[str]]], side: float) -> None:
    """The top axis's ticks: each group's pieces at their columns' centres, thinned to fit."""
    overrides: dict[float, str] = {}
    for start, pieces in groups:
        n = len(pieces)
        for i in range(0, n, label_stride(n, n * side)):
            overrides[start + i + 0.5] = piece_label(pieces[i])
    fig.xaxis[0].ticker = FixedTicker(ticks=list(overrides))
    fig.xaxis[0].major_label_overrides = overrides


def _whole(pieces: Sequence[str]) -> list[str]:
    """Pieces whole, as the hover names them."""
    return [piece_label(p, None) for p in pieces]
