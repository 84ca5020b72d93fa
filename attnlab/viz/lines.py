"""One head as lines, as bertviz's head view draws it (Vig, 2019): the queries in a column on the
left, the keys on the right, and a line from each query to each key it reads, as dark as its
weight. The heatmap shows every weight at once; the lines show where a word looks: point at a
word and only its lines stay (a query's to the keys it reads, a key's from the queries that read
it). `update_lines` puts another head or trace into the same figure, so a live session sends only
new data.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, CustomJS, HoverTool, Range1d, Title
from bokeh.palettes import Category10
from bokeh.plotting import figure

from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.axes import label_room
from attnlab.viz.colors import PALETTE, choice_rows, color_scale
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import head_title
from attnlab.viz.labels import TITLE_LINE_PX, piece_label, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_ids, head_map, model_layer
from attnlab.viz.words import kind_title, say

ROW_PX = 20  # pixels between two tokens of a column
SPAN_PX = 160  # pixels between the two columns, where the lines run (narrow: it stands beside the heatmap)
LEAST = 0.01  # the smallest weight drawn as a line (a 60-token map is 3,600 weights, most near 0)
COLOR = PALETTE[-2]  # one head's lines: the heatmap's dark end
HEAD_COLORS = Category10[10]  # every head of a layer: each in its own, as bertviz draws them
# each column: its words' alignment and where they stand (the lines run from x 0 to 1), its header
SIDES = {"q": ("right", -0.02, "head.query"), "k": ("left", 1.02, "head.key")}
# The pointed-at word's lines alone, or every line when none is: each side's hover remembers its
# word on the lines' source (both tools report each move, the side not pointed at with nothing).
_POINT_JS = """
const at = cb_data.index.indices;
lines[side] = at.length ? at[0] : null;
const q = lines.data.q, k = lines.data.k, w = lines.data.w, alpha = new Array(w.length);
for (let n = 0; n < w.length; n++) {
  const mine = lines.q_at != null ? q[n] == lines.q_at : lines.k_at != null ? k[n] == lines.k_at : true;
  alpha[n] = mine ? w[n] : 0;
}
lines.data = {...lines.data, alpha: alpha};
"""


def lines_figure(
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int | None,
    *,
    vmax: float | None = 1.0,
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """One head's weights as lines from the queries (left) to the keys (right), each as dark as
    its weight over `vmax` (None: the largest, as "scale to max" does), those under `LEAST` left
    out; `head` None draws every head of the layer, each in its colour (named between the
    columns' headers). Pointing at a word keeps its lines alone. `words` replaces any of
    `viz.words.WORDS` (the title's "head.title" or "lines.every_head", the line under it
    "lines.hint", the columns' "head.query" and "head.key")."""
    fig = figure(
        tools="save",
        toolbar_location="below",
        x_range=Range1d(0, 1),
        y_range=Range1d(0, 1),
        name=name or f"lines-{kind}",
    )
    fig.axis.visible = fig.grid.visible = False
    fig.outline_line_color = None
    fig.add_layout(Title(text="", text_font_size="11px", text_font_style="italic", name="hint"), "above")
    columns = ("x0", "y0", "x1", "y1", "q", "k", "w", "alpha", "color")
    lines = ColumnDataSource(dict.fromkeys(columns, []))
    fig.segment(
        "x0", "y0", "x1", "y1", source=lines, line_color="color", line_alpha="alpha", line_width=2, name="lines"
    )
    heads = ColumnDataSource({"x": [], "label": [], "color": []})  # every head's name in its colour
    fig.text("x", 1, text="label", text_color="color", source=heads, text_align="center", text_baseline="middle",
             text_font_size="11px", text_font_style="bold", name="heads")  # fmt: skip
    for side, (align, at, _header) in SIDES.items():
        tokens = ColumnDataSource({"y": [], "label": []})
        fig.text(
            at, "y", text="label", source=tokens, text_align=align, text_baseline="middle", text_font_size="12px",
            name=f"{side}-tokens",
        )  # fmt: skip
        fig.text(
            at, 1, text=value(""), text_align=align, text_baseline="middle", text_font_size="12px", text_font_style="bold",
            text_color="#666666", name=f"{side}-header",
        )  # fmt: skip
        # each word's box, invisible, where pointing at the word finds it (sized in `update_lines`)
        spots = fig.rect(at, "y", width=1, height=1, source=tokens, fill_alpha=0, line_alpha=0, name=f"{side}-spots")
        point = CustomJS(args={"lines": lines, "side": f"{side}_at"}, code=_POINT_JS)
        fig.add_tools(HoverTool(renderers=[spots], tooltips=None, callback=point, description=f"lines-{side}"))
    update_lines(fig, trace, kind, layer, head, vmax=vmax, title=title, name=name, words=words)
    return use_fonts(fig)


def update_lines(
    fig: figure,
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int | None,
    *,
    vmax: float | None = 1.0,
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Show another head (or every head, or trace) in a figure made by `lines_figure`, in place."""
    check_options(title=title)
    said = say(words)
    q_labels, k_labels = (
        [piece_label(label) for label in labels] for labels in check_trace(trace, "the trace").labels(kind)
    )
    heads = head_ids(trace) if head is None else [head]
    weights = np.stack([head_map(trace, kind, layer, h) for h in heads])  # (heads, queries, keys)
    top = color_scale(choice_rows(weights, trace.mask(kind)), vmax)
    rooms = [label_room(labels) + 8 for labels in (q_labels, k_labels)]
    unit = SPAN_PX  # pixels a unit of x (the columns stand at 0 and 1)
    rows = max(len(q_labels), len(k_labels))
    if head is None:
        own = said["lines.every_head"].format(kind_title=kind_title(kind, said), layer=model_layer(trace, kind, layer))
    else:
        own = head_title(trace, kind, layer, head, said)
    title = wrap_title(title or own, unit + sum(rooms))
    hint = wrap_title(said["lines.hint"], unit + sum(rooms))
    fig.update(
        width=unit + sum(rooms) + 20,
        height=(rows + 1) * ROW_PX + TITLE_LINE_PX * (title.count("\n") + hint.count("\n") + 2) + 50,
    )
    fig.title.text, fig.name = title, name or f"lines-{kind}"
    fig.select_one({"name": "hint"}).text = hint
    fig.x_range.update(start=-rooms[0] / unit, end=1 + rooms[1] / unit)
    fig.y_range.update(start=-rows + 0.5, end=1.5)
    h, q, k = np.nonzero(weights >= LEAST)
    shown = np.minimum(weights[h, q, k] / top, 1.0)
    colors = [COLOR] if head is not None else [HEAD_COLORS[i % len(HEAD_COLORS)] for i in range(len(heads))]
    fig.select_one({"name": "lines"}).data_source.data = {
        "x0": [0.0] * len(q), "y0": (-q).tolist(), "x1": [1.0] * len(k), "y1": (-k).tolist(),
        "q": q.tolist(), "k": k.tolist(), "w": shown.tolist(), "alpha": shown.tolist(),
        "color": [colors[i] for i in h],
    }  # fmt: skip
    named = [] if head is not None else [f"H{h}" for h in heads]  # (short, as the circuit names heads: 8 fit)
    fig.select_one({"name": "heads"}).data_source.data = {
        "x": np.linspace(0.08, 0.92, len(named)).tolist() if len(named) > 1 else [0.5] * len(named),
        "label": named,
        "color": colors[: len(named)],
    }
    for (side, (align, at, header)), labels, room in zip(SIDES.items(), (q_labels, k_labels), rooms, strict=True):
        fig.select_one({"name": f"{side}-tokens"}).data_source.data = {
            "y": (-np.arange(len(labels))).tolist(),
            "label": labels,
        }
        fig.select_one({"name": f"{side}-header"}).glyph.text = value(said[header])
        spots = fig.select_one({"name": f"{side}-spots"}).glyph
        spots.update(x=at + room / unit / 2 * (-1 if align == "right" else 1), width=room / unit)
    return fig
