"""The logit lens as a grid (`attnlab.record.lens`): decoder layers bottom to top, target positions
left to right. Each cell is coloured by the probability that layer gives the piece the model
finally output there and names the layer's own first choice: in the colour of the text when it is
that piece, in red when the layer still prefers another. A column that turns dark low down was
decided early; one that stays pale until the top was decided late. The hover gives the layer's
likeliest pieces with their probabilities; with `on_select`, a tap on a cell hands its (layer,
position) to the caller (the explorer opens that layer's encoder–decoder attention there).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, HoverTool, LinearColorMapper
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.cells import labelled_cells, piece_grid
from attnlab.viz.colors import PALETTE
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.options import check_options
from attnlab.viz.selection import check_on_select, on_tap
from attnlab.viz.table import MOST, check_table_size, html_table
from attnlab.viz.words import say

if TYPE_CHECKING:
    from attnlab.record.lens import Lens

CELL_LABEL = 8  # columns of a cell's piece before it is cut
OTHER = "#c0392b"  # a layer's first choice that is not the piece finally output
DARK = 0.55  # from this probability up a cell is dark enough for white text


def lens_figure(
    lens: Lens,
    *,
    title: str | None = None,
    name: str = "logit-lens",
    on_select: Callable[[int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """The lens of one sentence pair: rows are decoder layers (0 at the bottom), columns the
    positions labelled by the piece output there, at most `cells.VISIBLE` of them at once (drag sideways
    for the rest). `title` None is its own; `on_select(layer, position)` is called when a cell is
    tapped (in a Bokeh server or Panel session); `words` replaces any of `viz.words.WORDS` ("lens.*")."""
    check_options(title=title)
    check_on_select(on_select, "(layer, position)")
    _check_lens(lens, "lens_figure")
    said = say(words)
    n_layers, n = lens.p.shape
    layer, position = np.meshgrid(np.arange(n_layers), np.arange(n), indexing="ij")
    first = [spelled(cell[:1])[0] for row in lens.top for cell in row]  # (a byte alone: "2" for <0x32>)
    shown, inputs = spelled(lens.produced), spelled(lens.inputs)  # (<0x32>: "2")
    produced = [shown[i] for i in position.ravel()]
    p = lens.p.ravel()
    chosen = lens.rank.ravel() == 0
    source = ColumnDataSource(
        {
            "x": position.ravel() + 0.5,
            "y": layer.ravel() + 0.5,
            "p": p,
            "rank": lens.rank.ravel() + 1,  # the hover counts from 1: "2nd choice"
            "layer": layer.ravel(),
            "label": [piece_label(piece, CELL_LABEL) for piece in first],
            "text_color": [
                ("white" if q >= DARK else "#222222") if c else OTHER for q, c in zip(p, chosen, strict=True)
            ],
            "input": [piece_label(inputs[i], None) for i in position.ravel()],
            "produced": [piece_label(piece, None) for piece in produced],
            "top": [
                _likeliest(cell, probs)
                for row, row_p in zip(lens.top, lens.top_p, strict=True)
                for cell, probs in zip(row, row_p, strict=True)
            ],
        }
    )
    title = title or said["lens.title"]
    fig = piece_grid(
        [str(i) for i in range(n_layers)],
        [piece_label(piece) for piece in shown],
        title=title,
        name=name,
        axes=(said["lens.layer"], said["lens.output"]),
        drag=said["lens.drag"],
        tap=on_select is not None,
    )
    mapper = LinearColorMapper(palette=list(PALETTE), low=0.0, high=1.0)
    cells = labelled_cells(fig, source, "p", mapper, "11px", "first-choice")
    fig.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[
                (said["lens.layer"], "@layer"),
                (said["lens.input"], "@input"),
                (said["lens.output"], "@produced"),
                (said["lens.p"], "@p{0.000}"),
                (said["lens.rank"], "@rank"),
                (said["lens.top"], "@top"),
            ],
        )
    )
    fig.add_layout(
        ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=said["lens.p"]), "right"
    )
    on_tap(fig, lambda x, y: lens_pick(x, y, n_layers, n), on_select)
    return use_fonts(fig, said)


def lens_table(lens: Lens, *, words: Mapping[str, str] | None = None, most: int = MOST) -> str:
    """The lens `lens_figure` draws, as a `<table class='attn-weights'>` (`viz.table`): a row a
    decoder layer (0 first), a column an output position headed by its piece; each cell the layer's
    first choice and the probability it gives the piece finally output there, in red where it still
    prefers another, its rank said to a screen reader and its likeliest pieces in the cell's title.
    More than `most` positions is a one-line error."""
    _check_lens(lens, "lens_table")
    said = say(words)
    n_layers, n = lens.p.shape
    check_table_size(n_layers, n, most)
    cells = []
    for layer in range(n_layers):
        row = []
        for position in range(n):
            first = piece_label(spelled(lens.top[layer][position][:1])[0], None)
            p, rank = float(lens.p[layer, position]), int(lens.rank[layer, position]) + 1
            tip = html.escape(
                f"{said['lens.top']}: {_likeliest(lens.top[layer][position], lens.top_p[layer, position])}"
            )
            spoken = html.escape(f"{first} · {said['lens.p']} {p:.3f} · {said['lens.rank']} {rank}")
            color = f" style='color:{OTHER}'" if rank > 1 else ""
            row.append(f"<td{color} title='{tip}' aria-label='{spoken}'>{html.escape(first)} {p:.3f}</td>")
        cells.append(row)
    return html_table(
        said["lens.title"],
        f"{said['lens.layer']} \\ {said['lens.output']}",
        [piece_label(piece, None) for piece in spelled(lens.produced)],
        [str(layer) for layer in range(n_layers)],
        cells,
    )


def _likeliest(pieces: list[str], probs: np.ndarray) -> str:
    """A cell's likeliest pieces with their probabilities, as its hover and its table cell say
    them; each spelled alone (they are alternatives, not a run of bytes that make one character)."""
    return ", ".join(
        f"{piece_label(spelled([piece])[0], None)} {q:.2f}" for piece, q in zip(pieces, probs, strict=True)
    )


def _check_lens(lens: object, name: str) -> None:
    """What `attnlab.logit_lens` returns, or a one-line error naming `name`."""
    arrays = (getattr(lens, field, None) for field in ("p", "rank", "top_p"))
    if not all(isinstance(a, np.ndarray) for a in arrays) or not hasattr(lens, "top"):
        raise AttnlabError(f"{name} draws what attnlab.logit_lens returns, got {type(lens).__name__}")


def lens_pick(x: object, y: object, n_layers: int, n: int) -> tuple[int, int] | None:
    """(layer, position) of the cell under data point (x, y) of a `lens_figure` of `n_layers` ×
    `n`, or None off the grid or for what is not a point (a crafted tap can send a string, NaN)."""
    if not (isinstance(x, Real) and isinstance(y, Real) and 0 <= x < n and 0 <= y < n_layers):
        return None
    return int(y), int(x)
