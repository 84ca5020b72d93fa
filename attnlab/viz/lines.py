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
from bokeh.plotting import figure

from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.axes import label_room
from attnlab.viz.colors import PALETTE, choice_rows, color_scale
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import head_title
from attnlab.viz.labels import TITLE_LINE_PX, piece_label, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_map
from attnlab.viz.words import say

ROW_PX = 20  # pixels between two tokens of a column
SPAN_PX = 160  # pixels between the two columns, where the lines run (narrow: it stands beside the heatmap)
LEAST = 0.01  # the smallest weight drawn as a line (a 60-token map is 3,600 weights, most near 0)
COLOR = PALETTE[-2]  # the lines' colour: the heatmap's dark end
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
    head: int,
    *,
    vmax: float | None = 1.0,
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """One head's weights as lines from the queries (left) to the keys (right), each as dark as
    its weight over `vmax` (None: the head's largest, as "scale to max" does), those under `LEAST`
    left out; pointing at a word keeps its lines alone. `words` replaces any of `viz.words.WORDS`
    (the title's "head.title", the line under it "lines.hint", the columns' "head.query" and
    "head.key")."""
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
    lines = ColumnDataSource({"x0": [], "y0": [], "x1": [], "y1": [], "q": [], "k": [], "w": [], "alpha": []})
    fig.segment("x0", "y0", "x1", "y1", source=lines, line_color=COLOR, line_alpha="alpha", line_width=2, name="lines")
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
    head: int,
    *,
    vmax: float | None = 1.0,
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """Show another head (or trace) in a figure made by `lines_figure`, in place."""
    check_options(title=title)
    said = say(words)
    q_labels, k_labels = (
        [piece_label(label) for label in labels] for labels in check_trace(trace, "the trace").labels(kind)
    )
    weights = head_map(trace, kind, layer, head)
    top = color_scale(choice_rows(weights, trace.mask(kind)), vmax)
    rooms = [label_room(labels) + 8 for labels in (q_labels, k_labels)]
    unit = SPAN_PX  # pixels a unit of x (the columns stand at 0 and 1)
    rows = max(len(q_labels), len(k_labels))
    title = wrap_title(title or head_title(trace, kind, layer, head, said), unit + sum(rooms))
    hint = wrap_title(said["lines.hint"], unit + sum(rooms))
    fig.update(
        width=unit + sum(rooms) + 20,
        height=(rows + 1) * ROW_PX + TITLE_LINE_PX * (title.count("\n") + hint.count("\n") + 2) + 50,
    )
    fig.title.text, fig.name = title, name or f"lines-{kind}"
    fig.select_one({"name": "hint"}).text = hint
    fig.x_range.update(start=-rooms[0] / unit, end=1 + rooms[1] / unit)
    fig.y_range.update(start=-rows + 0.5, end=1.5)
    q, k = np.nonzero(weights >= LEAST)
    shown = np.minimum(weights[q, k] / top, 1.0)
    fig.select_one({"name": "lines"}).data_source.data = {
        "x0": [0.0] * len(q), "y0": (-q).tolist(), "x1": [1.0] * len(k), "y1": (-k).tolist(),
        "q": q.tolist(), "k": k.tolist(), "w": shown.tolist(), "alpha": shown.tolist(),
    }  # fmt: skip
    for (side, (align, at, header)), labels, room in zip(SIDES.items(), (q_labels, k_labels), rooms, strict=True):
        fig.select_one({"name": f"{side}-tokens"}).data_source.data = {
            "y": (-np.arange(len(labels))).tolist(),
            "label": labels,
        }
        fig.select_one({"name": f"{side}-header"}).glyph.text = value(said[header])
        spots = fig.select_one({"name": f"{side}-spots"}).glyph
        spots.update(x=at + room / unit / 2 * (-1 if align == "right" else 1), width=room / unit)
    return fig
