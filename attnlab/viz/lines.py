"""One head as lines, as bertviz's head view draws it (Vig, 2019): the queries in a column on the
left, the keys on the right, and a line from each query to each key it reads, as dark as its
weight. The heatmap shows every weight at once; the lines show where a word looks: point at a
word and only its lines stay (a query's to the keys it reads, a key's from the queries that read
it), with the mouse or with the arrow keys on the figure's Tab stop. Every head of a layer can be drawn at once, each in its colour; a click on a head's name hides
its lines or shows them again, in the browser (bertviz's head toggles). `update_lines` puts another
head or trace into the same figure, so a live session sends only new data. A long column keeps
within the heatmap's budget (`ROWS_PX`): its rows closer, its words thinned to what fits; every
line is still drawn, and pointing at a row names its word.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, CustomJS, HoverTool, Range1d, TapTool, Title
from bokeh.palettes import Category20
from bokeh.plotting import figure

from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.axes import label_room, label_stride
from attnlab.viz.colors import PALETTE, choice_rows, color_scale
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import head_title
from attnlab.viz.labels import TITLE_LINE_PX, piece_label, spelled, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_ids, head_map, model_layer
from attnlab.viz.words import kind_title, say

ROW_PX = 20  # pixels between two tokens of a column, while the column fits in `ROWS_PX`
# the most pixels a column's tokens span, the heatmap's default budget: at `ROW_PX` a 100-piece
# output drew a 2,152 px figure beside a 700 px heatmap (a parser's input + 300 pieces, 6,000)
ROWS_PX = 560
SPAN_PX = 160  # pixels between the two columns, where the lines run (narrow: it stands beside the heatmap)
LEAST = 0.01  # the smallest weight drawn as a line (a 60-token map is 3,600 weights, most near 0)
PER_ROW = 8  # head names side by side between the columns (big's 16 take two rows)
NAME_PX = 30  # pixels each name in a row needs ("H15" in bold, and a gap): 8 widen the span to 240
OFF_ALPHA = 0.25  # a hidden head's name: faint, there to be clicked again
COLOR = PALETTE[-2]  # one head's lines: the heatmap's dark end
# every head of a layer: each in its own, as bertviz draws them (Category10, then its light twins for 16 heads)
HEAD_COLORS = Category20[20][0::2] + Category20[20][1::2]
# each column: its words' alignment and where they stand (the lines run from x 0 to 1), its header
SIDES = {"q": ("right", -0.02, "head.query"), "k": ("left", 1.02, "head.key")}
# The lines shown: the pointed-at word's alone (every line when none is) of the heads not hidden.
# Each side's hover remembers its word on the lines' source (both tools report each move, the side
# not pointed at with nothing); a click on a head's name flips its entry of `on` (kept on `heads`).
_SHOW_JS = """
const q = lines.data.q, k = lines.data.k, h = lines.data.h, w = lines.data.w, on = heads.data.on;
const alpha = new Array(w.length);
for (let n = 0; n < w.length; n++) {
  const mine = lines.q_at != null ? q[n] == lines.q_at : lines.k_at != null ? k[n] == lines.k_at : true;
  alpha[n] = mine && (on.length == 0 || on[h[n]]) ? w[n] : 0;
}
lines.data = {...lines.data, alpha: alpha};
"""
_POINT_JS = "const at = cb_data.index.indices;\nlines[side] = at.length ? at[0] : null;\n" + _SHOW_JS
_FLIP_JS = f"""
const flipped = [...heads.data.on];
flipped[head] = flipped[head] ? 0 : 1;
heads.data = {{...heads.data, on: flipped, alpha: flipped.map(shown => shown ? 1 : {OFF_ALPHA})}};
"""
_TOGGLE_JS = f"""
const at = chips.selected.indices;
if (!at.length) return;
chips.selected.indices = [];
const head = at[0];
{_FLIP_JS}{_SHOW_JS}"""
# The same from the keyboard, on the figure's own Tab stop (the mouse was the only way): ↑ ↓ point
# at the next or previous word of a column, ← → go to the queries or the keys, Esc shows every
# line, a digit hides or shows that head; what is pointed at is read out (a live region).
_KEYS_JS = f"""
setTimeout(() => {{  // after the layout pass that called it: a view looked up inside it could be one going away
const view = typeof Bokeh !== "undefined" && Bokeh.index ? Bokeh.index.find_one(fig) : null;
const el = view?.canvas_view?.events_el;
if (el && !el.attnLines) {{
  el.attnLines = true;
  let said = document.querySelector(".attn-lines-said");  // one for the page, outside BokehJS's own elements
  if (!said) {{
    said = document.createElement("div");
    said.setAttribute("aria-live", "polite");
    said.className = "attn-lines-said";
    said.style.cssText = "position:fixed;width:1px;height:1px;overflow:hidden;clip-path:inset(50%)";
    document.body.append(said);
  }}
  el.addEventListener("keydown", (e) => {{
    if (e.ctrlKey || e.altKey || e.metaKey) return;
    const count = (s) => tokens[s].data.word.length;
    let side = lines.k_at != null && lines.q_at == null ? "k" : "q", at = lines[side + "_at"], head = null;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {{
      const step = e.key === "ArrowDown" ? 1 : -1;
      at = at == null ? (step > 0 ? 0 : count(side) - 1) : Math.max(0, Math.min(count(side) - 1, at + step));
    }} else if (e.key === "ArrowLeft" || e.key === "ArrowRight") {{
      side = e.key === "ArrowRight" ? "k" : "q";
      at = Math.min(at ?? 0, count(side) - 1);
    }} else if (e.key === "Escape" && (lines.q_at != null || lines.k_at != null)) {{
      at = null;
    }} else if (/^[1-9]$/.test(e.key) && Number(e.key) <= heads.data.on.length) {{
      head = Number(e.key) - 1;
    }} else return;
    e.preventDefault();
    e.stopPropagation();
    if (head != null) {{
      {_FLIP_JS}
      said.textContent = words[heads.data.on[head] ? "shown" : "hidden"].replace("{{head}}", heads.data.label[head]);
    }} else {{
      lines.q_at = side === "q" ? at : null;
      lines.k_at = side === "k" ? at : null;
      said.textContent = at == null ? words.every : words.pointed.replace("{{side}}", words[side])
        .replace("{{n}}", at + 1).replace("{{count}}", count(side)).replace("{{word}}", tokens[side].data.word[at]);
    }}
    {_SHOW_JS}
  }});
}}
}}, 0);
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
    columns = ("x0", "y0", "x1", "y1", "q", "k", "h", "w", "alpha", "color")
    lines = ColumnDataSource(dict.fromkeys(columns, []))
    fig.segment(
        "x0", "y0", "x1", "y1", source=lines, line_color="color", line_alpha="alpha", line_width=2, name="lines"
    )
    # every head's name in its colour (faint while hidden), over an invisible box a click finds
    heads = ColumnDataSource(dict.fromkeys(("x", "y", "label", "color", "on", "alpha"), []))
    fig.text("x", "y", text="label", text_color="color", text_alpha="alpha", source=heads, text_align="center",
             text_baseline="middle", text_font_size="11px", text_font_style="bold", name="heads")  # fmt: skip
    chips = ColumnDataSource({"x": [], "y": []})
    boxes = fig.rect("x", "y", width=0.1, height=1, source=chips, fill_alpha=0, line_alpha=0, name="head-boxes")
    toggle = CustomJS(args={"lines": lines, "heads": heads, "chips": chips}, code=_TOGGLE_JS)
    said = say(words)
    fig.add_tools(TapTool(renderers=[boxes], callback=toggle, description=said["lines.tool_heads"]))
    columns = {}
    for side, (align, at, _header) in SIDES.items():
        tokens = columns[side] = ColumnDataSource({"y": [], "label": [], "word": []})
        fig.text(
            at, "y", text="label", source=tokens, text_align=align, text_baseline="middle", text_font_size="12px",
            name=f"{side}-tokens",
        )  # fmt: skip
        fig.text(
            at, 1, text=value(""), text_align=align, text_baseline="middle", text_font_size="12px", text_font_style="bold",
            text_color="#666666", name=f"{side}-header",
        )  # fmt: skip
        # each word's box, invisible, where pointing at the word finds it and names it whole (its
        # label may be cut or thinned out) above or below it, off the lines (sized in `update_lines`)
        spots = fig.rect(at, "y", width=1, height=1, source=tokens, fill_alpha=0, line_alpha=0, name=f"{side}-spots")
        point = CustomJS(args={"lines": lines, "heads": heads, "side": f"{side}_at"}, code=_POINT_JS)
        fig.add_tools(
            HoverTool(renderers=[spots], tooltips=[("", "@word")], attachment="vertical",
                      callback=point, description=said[f"lines.tool_{side}"])
        )  # fmt: skip
    spoken = {"q": said["head.query"], "k": said["head.key"], "every": said["lines.every_line"]}
    spoken |= {"pointed": said["lines.pointed"], "hidden": said["lines.head_hidden"], "shown": said["lines.head_shown"]}
    keys = CustomJS(
        args={"fig": fig, "lines": lines, "heads": heads, "tokens": columns, "words": spoken}, code=_KEYS_JS
    )
    fig.js_on_change("inner_width", keys)  # (once laid out: the canvas the keys go to exists)
    update_lines(fig, trace, kind, layer, head, vmax=vmax, title=title, name=name, words=words)
    return use_fonts(fig, said)


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
    """Show another head (or every head, or trace) in a figure made by `lines_figure`, in place:
    sizes, rows and labels follow the new trace (a long one's closer rows, back to `ROW_PX`)."""
    check_options(title=title)
    said = say(words)
    q_words, k_words = map(spelled, check_trace(trace, "the trace").labels(kind))
    q_labels, k_labels = ([piece_label(label) for label in labels] for labels in (q_words, k_words))
    heads = head_ids(trace) if head is None else [head]
    weights = np.stack([head_map(trace, kind, layer, h) for h in heads])  # (heads, queries, keys)
    top = color_scale(choice_rows(weights, trace.mask(kind)), vmax)
    # each column as wide as its widest word or header (a one-letter source cut "query" short)
    rooms = [
        label_room([*labels, said[header]]) + 8
        for labels, (*_, header) in zip((q_labels, k_labels), SIDES.values(), strict=True)
    ]
    # each column's y from a token to the next (1: `ROW_PX`), on its own, as the heatmap sizes its
    # rows and columns: a parser's 300 output pieces do not squeeze its 20 input words
    pitches = [min(1.0, ROWS_PX / ROW_PX / max(len(labels) - 1, 1)) for labels in (q_labels, k_labels)]
    span = max((len(labels) - 1) * pitch for labels, pitch in zip((q_labels, k_labels), pitches, strict=True))
    named = [] if head is not None else [f"H{h}" for h in heads]  # (short, as the circuit names heads)
    name_rows = -(-len(named) // PER_ROW)  # the first row beside the columns' headers, the others above it
    per_row = -(-len(named) // max(name_rows, 1))  # as many in each row, so that the names stand in columns
    unit = max(SPAN_PX, NAME_PX * per_row)  # pixels a unit of x (the columns stand at 0 and 1)
    if head is None:
        own = said["lines.every_head"].format(kind_title=kind_title(kind, said), layer=model_layer(trace, kind, layer))
    else:
        own = head_title(trace, kind, layer, head, said)
    title = wrap_title(title or own, unit + sum(rooms))
    hint = wrap_title(said["lines.hint" if head is not None else "lines.hint_every"], unit + sum(rooms))
    body = round((span + 1 + max(name_rows, 1)) * ROW_PX)  # the columns, their headers, the names
    fig.update(
        width=unit + sum(rooms) + 20, height=body + TITLE_LINE_PX * (title.count("\n") + hint.count("\n") + 2) + 50
    )
    fig.title.text, fig.name = title, name or f"lines-{kind}"
    fig.select_one({"name": "hint"}).text = hint
    fig.x_range.update(start=-rooms[0] / unit, end=1 + rooms[1] / unit)
    fig.y_range.update(start=-span - 0.5, end=0.5 + max(name_rows, 1))
    h, q, k = np.nonzero(weights >= LEAST)
    shown = np.minimum(weights[h, q, k] / top, 1.0)
    colors = [COLOR] if head is not None else [HEAD_COLORS[i % len(HEAD_COLORS)] for i in range(len(heads))]
    fig.select_one({"name": "lines"}).data_source.data = {
        "x0": [0.0] * len(q), "y0": (-q * pitches[0]).tolist(), "x1": [1.0] * len(k), "y1": (-k * pitches[1]).tolist(),
        "q": q.tolist(), "k": k.tolist(), "h": h.tolist(), "w": shown.tolist(), "alpha": shown.tolist(),
        "color": [colors[i] for i in h],
    }  # fmt: skip
    step = 0.84 / (per_row - 1) if per_row > 1 else 0.84
    spots = {
        "x": [0.5 + (i % per_row - (per_row - 1) / 2) * step for i in range(len(named))],
        "y": [float(name_rows - i // per_row) for i in range(len(named))],
    }
    fig.select_one({"name": "heads"}).data_source.data = {
        **spots, "label": named, "color": colors[: len(named)], "on": [1] * len(named), "alpha": [1.0] * len(named)
    }  # fmt: skip
    boxes = fig.select_one({"name": "head-boxes"})
    boxes.data_source.data, boxes.glyph.width = spots, step
    sides = zip(SIDES.items(), (q_words, k_words), (q_labels, k_labels), rooms, pitches, strict=True)
    for (side, (align, at, header)), whole, labels, room, pitch in sides:
        stride = label_stride(len(labels), len(labels) * pitch * ROW_PX)  # every `stride`-th word labelled
        tokens = fig.select_one({"name": f"{side}-tokens"})
        tokens.data_source.data = {
            "y": (-np.arange(len(labels)) * pitch).tolist(),
            "label": [label if i % stride == 0 else "" for i, label in enumerate(labels)],
            "word": [piece_label(word, None) for word in whole],
        }
        tokens.glyph.text_font_size = "12px" if pitch * ROW_PX >= 16 else "10px"  # (as `axes.token_axis`)
        fig.select_one({"name": f"{side}-header"}).glyph.text = value(said[header])
        spots = fig.select_one({"name": f"{side}-spots"}).glyph
        spots.update(x=at + room / unit / 2 * (-1 if align == "right" else 1), width=room / unit, height=pitch)
    return fig
