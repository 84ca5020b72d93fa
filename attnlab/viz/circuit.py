"""A circuit (`attnlab.record.circuit`) drawn on the model's own architecture, as the paper's
Figure 1 draws it: the encoder's tower on the left, the decoder's on the right, layer 0 at the
bottom, each layer's sub-layers one above the other (self-attention, then encoder-decoder
attention in the decoder, then the feed-forward layer), a head as a dot of its sub-layer's row
and the output at the top of the decoder.

Every head and feed-forward layer is a faint dot, so the skeleton shows where the circuit sits;
the circuit's own nodes are drawn solid and named, each dot sized by the total share of that node
patched alone; a node no path above the threshold touches (a sender whose paths all fell under
it) is left out, and with none left the output is drawn alone. Each path is a curve from a node to
what it reaches (a later head, a feed-forward layer, or the output for its direct share), as wide
as its share of the difference, blue where it moves the log-probability the way the patching
direction asks and red the other way, its arrowhead at the receiving end; a hover on a curve gives
the share, on a node its total and direct share.

A node's label goes beside its dot, clear of it, where its box (estimated from its text,
`COLUMN_EM` a column) meets no other label, dot, row or tower name: right of the dot where that is
free, else above, left, below or on a diagonal. (At a fixed 8 px right and 6 px up, the labels of
the large dots near the output, the top layers' feed-forward layers and heads, sat on the dots.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from bokeh.models import Arrow, ColumnDataSource, HoverTool, Label, Range1d, VeeHead
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.circuit import OUTPUT, Circuit
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, display_width, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.words import kind_name, say

UP, DOWN = "#2166ac", "#b2182b"  # the patching grids' blue and red, at their darker end
FAINT = "#cfcfcf"
STEP = 40  # pixels between two heads' dots
GAP = 4  # head steps between the two towers: room for the decoder's row names
MARGIN = 3.5  # head steps left of the encoder: room for its row names
MOST_WIDTH = 10  # pixels of the widest curve (the largest |share|)
ROWS = {"encoder": ("encoder", "ffn"), "decoder": ("decoder", "cross", "ffn")}  # a layer's sub-layers, bottom up
LABEL_PX, ROW_PX, TOWER_PX = 10, 9, 12  # font sizes: a node's label, a row's name, a tower's name
COLUMN_EM = 0.7  # a label's width a column (a CJK character: two), in ems, from above: DejaVu Sans
# draws "H0" 13.9 px wide at 10 px, "FFN" 19, "output" 33, "输出" 20 (this estimate: 14, 21, 42, 28)
LINE_EM = 1.2  # a label's height, in ems
PAD = 3  # pixels between a dot's edge and its label
# where a label may go around its dot, in this order: its offset from the dot's centre, across and
# down the screen, in (radius + PAD)s, and the text's align and baseline there
SPOTS = (
    (1, 0, "left", "middle"),
    (0, -1, "center", "bottom"),
    (-1, 0, "right", "middle"),
    (0, 1, "center", "top"),
    (0.8, -0.8, "left", "bottom"),
    (-0.8, -0.8, "right", "bottom"),
    (0.8, 0.8, "left", "top"),
    (-0.8, 0.8, "right", "top"),
)
Box = tuple[float, float, float, float]  # (left, top, right, bottom) in screen pixels
# behind a row's or a node's name: the curves pass under it (they struck through "masked self-attn L2")
UNDER_CURVES = {"background_fill_color": "white", "background_fill_alpha": 0.8}


def circuit_figure(
    circuit: Circuit, *, title: str | None = None, name: str = "circuit", words: Mapping[str, str] | None = None
) -> figure:
    """`circuit` on the model's architecture (see the module's docstring); `words` replaces any of
    `viz.words.WORDS` ("circuit.*", "kind_name.*")."""
    if not isinstance(circuit, Circuit):
        raise AttnlabError(f"circuit_figure draws what attnlab.record.circuit returns, got {type(circuit).__name__}")
    check_options(title=title)
    said = say(words)
    _, layers, heads = circuit.total.share.shape
    place = _places(layers, heads)
    right = 2 * heads + GAP - 1  # the decoder's last head
    width, height = round(STEP * (right + MARGIN + 1.5)), 120 * layers + 100
    fig = figure(
        name=name,
        width=width,
        height=height,
        title=wrap_title(title or said["circuit.title"].format(threshold=circuit.threshold), width),
        x_range=Range1d(-MARGIN, right + 1.5),
        y_range=Range1d(-0.6, layers + 0.5),
        tools="",
        toolbar_location=None,
    )
    fig.axis.visible = fig.grid.visible = False
    fig.outline_line_color = None
    _skeleton(fig, place, layers, heads, said)
    top = max((abs(share) for *_, share in circuit.edges), default=1.0) or 1.0
    curves = {"xs": [], "ys": [], "color": [], "width": [], "tip": []}
    for start, end, share in circuit.edges:
        xs, ys = _curve(place[start], place[end])
        curves["xs"].append(xs)
        curves["ys"].append(ys)
        curves["color"].append(UP if share >= 0 else DOWN)
        curves["width"].append(1 + (MOST_WIDTH - 1) * abs(share) / top)
        curves["tip"].append(
            said["circuit.path_tip"].format(start=_named(start, said), end=_named(end, said), share=share)
        )
        fig.add_layout(
            Arrow(
                end=VeeHead(size=9, fill_color=curves["color"][-1], line_color=curves["color"][-1]),
                x_start=xs[-3], y_start=ys[-3], x_end=xs[-1], y_end=ys[-1],
                line_color=curves["color"][-1], line_alpha=0.0,
            )
        )  # fmt: skip
    lines = fig.multi_line(
        "xs",
        "ys",
        line_color="color",
        line_width="width",
        line_alpha=0.7,
        source=ColumnDataSource(curves),
        name="paths",
    )
    fig.add_tools(HoverTool(renderers=[lines], tooltips=[(said["circuit.path"], "@tip")], line_policy="interp"))
    _nodes(fig, circuit, place, said, layers, heads)
    if not circuit.edges:  # (a bare skeleton read as a figure still drawing)
        empty = wrap_title(said["circuit.empty"].format(threshold=circuit.threshold), width - 80)
        fig.add_layout(Label(x=(right - MARGIN) / 2, y=layers / 2, text=empty, text_align="center", name="empty"))
    use_fonts(fig, said)
    return fig


def _places(layers: int, heads: int) -> dict[Any, tuple[float, float]]:
    """(x, y) of every head, feed-forward layer and the output: the encoder's heads at x 0 … h−1,
    the decoder's `GAP` steps after them, a feed-forward layer in the middle of its tower; a sub-layer's row
    a fraction of a layer above the one before it."""
    place: dict[Any, tuple[float, float]] = {}
    for side, left in (("encoder", 0), ("decoder", heads + GAP)):
        rows = ROWS[side]
        for layer in range(layers):
            for r, row in enumerate(rows):
                y = layer + r / len(rows)
                if row == "ffn":
                    place[("ffn", side, layer)] = (left + (heads - 1) / 2, y)
                else:
                    place.update({(row, layer, h): (left + h, y) for h in range(heads)})
    place[OUTPUT] = (heads + GAP + (heads - 1) / 2, layers)
    return place


def _curve(start: tuple[float, float], end: tuple[float, float], points: int = 24) -> tuple[list[float], list[float]]:
    """A quadratic Bézier from `start` to `end`, bowed sideways so that it passes beside the dots
    of the rows between them rather than through them."""
    (x0, y0), (x1, y1) = start, end
    bow = 0.35 + 0.15 * abs(y1 - y0)
    cx, cy = (x0 + x1) / 2 + (bow if x1 >= x0 else -bow), (y0 + y1) / 2
    t = np.linspace(0.0, 1.0, points)
    xs = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1
    ys = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1
    return xs.tolist(), ys.tolist()


def _skeleton(
    fig: figure, place: dict[Any, tuple[float, float]], layers: int, heads: int, said: dict[str, str]
) -> None:
    """Every component as a faint dot, each row named on the left of its tower, the towers named below."""
    xs, ys = zip(*(xy for node, xy in place.items() if node != OUTPUT), strict=True)
    fig.scatter(list(xs), list(ys), size=7, color=FAINT, name="skeleton")
    names = _names(layers, heads, said)
    for x, y, text in names["towers"]:
        fig.add_layout(Label(x=x, y=y, text=text, text_align="center", text_font_size=f"{TOWER_PX}px"))
    for x, y, text in names["rows"]:
        fig.add_layout(
            Label(
                x=x, y=y, text=text, text_align="right", text_baseline="middle", text_font_size=f"{ROW_PX}px",
                text_color="#888888", **UNDER_CURVES,
            )
        )  # fmt: skip


def _names(layers: int, heads: int, said: dict[str, str]) -> dict[str, list[tuple[float, float, str]]]:
    """(x, y, text) of each tower's name, centred below it, and of each row's, right of x, left of its tower."""
    names: dict[str, list[tuple[float, float, str]]] = {"towers": [], "rows": []}
    for side, left in (("encoder", 0), ("decoder", heads + GAP)):
        names["towers"].append((left + (heads - 1) / 2, -0.5, said[f"circuit.{side}"]))
        for layer in range(layers):
            for r, row in enumerate(ROWS[side]):
                names["rows"].append(
                    (left - 0.5, layer + r / len(ROWS[side]), f"{said[f'circuit.row_{row}']} L{layer}")
                )
    return names


def _nodes(
    fig: figure, circuit: Circuit, place: dict[Any, tuple[float, float]], said: dict[str, str], layers: int, heads: int
) -> None:
    """The circuit's nodes: solid dots, each followed node's sized by its total share, each named
    beside it where its label meets no other (`_spots`)."""
    top = max((abs(total) for total, _ in circuit.shares.values()), default=1.0) or 1.0
    data: dict[str, list[Any]] = {"x": [], "y": [], "size": [], "label": [], "tip": []}
    for node in circuit.nodes:
        x, y = place[node]
        data["x"].append(x)
        data["y"].append(y)
        if node in circuit.shares:
            total, direct = circuit.shares[node]
            data["size"].append(9 + 13 * abs(total) / top)
            data["tip"].append(said["circuit.node"].format(name=_named(node, said), total=total, direct=direct))
        else:  # the output, or a node reached after `most` were followed
            data["size"].append(14 if node == OUTPUT else 9)
            data["tip"].append(_named(node, said))
        data["label"].append(_short(node, said))
    data |= _spots(fig, data, place, _names(layers, heads, said))
    dots = fig.scatter("x", "y", size="size", color="#333333", source=ColumnDataSource(data), name="nodes")
    fig.text(
        "x", "y", text="label", x_offset="dx", y_offset="dy", text_align={"field": "align"},
        text_baseline={"field": "baseline"}, text_font_size=f"{LABEL_PX}px", source=ColumnDataSource(data),
        name="labels", **UNDER_CURVES,
    )  # fmt: skip
    fig.add_tools(HoverTool(renderers=[dots], tooltips=[(said["circuit.part"], "@tip")]))


def _named(node: Any, said: dict[str, str]) -> str:
    """A node in full: "cross L1 H1", "decoder FFN L2", "output"."""
    if node == OUTPUT:
        return said["circuit.output"]
    if node[0] == "ffn":
        return f"{said[f'circuit.{node[1]}']} {said['circuit.ffn']} L{node[2]}"
    return f"{kind_name(node[0], said)} L{node[1]} H{node[2]}"


def _short(node: Any, said: dict[str, str]) -> str:
    """A node's label beside its dot: its head ("H1") or what it is, the row saying the rest."""
    if node == OUTPUT:
        return said["circuit.output"]
    return f"{said['circuit.ffn']}" if node[0] == "ffn" else f"H{node[2]}"


def _pixels_per_unit(fig: figure) -> tuple[float, float]:
    """Pixels a unit of x and of y takes in `fig`'s frame, estimated: the figure less bokeh's 5 px
    borders and its title's lines (4.1 units of y in 460 px measured 105 px a unit in Chromium)."""
    lines = fig.title.text.count("\n") + 1
    across = (fig.width - 10) / (fig.x_range.end - fig.x_range.start)
    up = (fig.height - 10 - TITLE_LINE_PX * lines - 4) / (fig.y_range.end - fig.y_range.start)
    return across, up


def _text_box(x: float, y: float, text: str, font_px: float, align: str, baseline: str) -> Box:
    """The box `text` takes in pixels, drawn at screen (x, y) with that align and baseline."""
    width, height = COLUMN_EM * font_px * display_width(text), LINE_EM * font_px
    left = x - {"left": 0, "center": width / 2, "right": width}[align]
    top = y - {"top": 0, "middle": height / 2, "bottom": height}[baseline]
    return left, top, left + width, top + height


def _overlap(a: Box, b: Box) -> float:
    """The area two boxes share (0: none; touching is none)."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _spots(
    fig: figure, data: dict[str, list[Any]], place: dict[Any, tuple[float, float]], names: dict[str, list]
) -> dict[str, list[Any]]:
    """Each node label's offset ("dx", "dy") from its dot, "align" and "baseline": the first of
    `SPOTS` whose box meets no dot (the skeleton's included), no row or tower name, no label placed
    before it and stays in the frame; where none is free, the one that overlaps least."""
    across, up = _pixels_per_unit(fig)
    x0, y1 = fig.x_range.start, fig.y_range.end

    def screen(x: float, y: float) -> tuple[float, float]:
        return (x - x0) * across, (y1 - y) * up

    def dot(x: float, y: float, size: float) -> Box:
        sx, sy = screen(x, y)
        return sx - size / 2, sy - size / 2, sx + size / 2, sy + size / 2

    taken = [dot(x, y, 7) for x, y in place.values()]  # (the skeleton's dots, and the output's place)
    taken += [dot(x, y, size) for x, y, size in zip(data["x"], data["y"], data["size"], strict=True)]
    taken += [_text_box(*screen(x, y), text, ROW_PX, "right", "middle") for x, y, text in names["rows"]]
    taken += [_text_box(*screen(x, y), text, TOWER_PX, "center", "bottom") for x, y, text in names["towers"]]
    frame = (0.0, 0.0, (fig.x_range.end - x0) * across, (y1 - fig.y_range.start) * up)
    spots: dict[str, list[Any]] = {"dx": [], "dy": [], "align": [], "baseline": []}
    for x, y, size, label in zip(data["x"], data["y"], data["size"], data["label"], strict=True):
        sx, sy = screen(x, y)
        reach = size / 2 + PAD
        best, least = None, float("inf")
        for across_by, down_by, align, baseline in SPOTS:
            dx, dy = across_by * reach, down_by * reach
            box = _text_box(sx + dx, sy + dy, label, LABEL_PX, align, baseline)
            inside = box[0] >= frame[0] and box[1] >= frame[1] and box[2] <= frame[2] and box[3] <= frame[3]
            crowded = sum(_overlap(box, other) for other in taken) + (0.0 if inside else 1e6)
            if crowded < least:
                best, least = (dx, dy, align, baseline, box), crowded
            if crowded == 0:
                break
        *spot, box = best
        for column, value in zip(spots, spot, strict=True):
            spots[column].append(value)
        taken.append(box)
    return spots
