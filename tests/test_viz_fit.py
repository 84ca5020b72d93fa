"""Figures that fit their words: the parse tree's words never run into each other nor off its
edges, however long; the lines view of a long trace stays as tall as the heatmap beside it.

Pixels are reckoned from the figures' data, each word as wide as Chromium draws it at 12 px
(`COLUMN_PX` a column of `display_width`), on a frame as wide as its figure.
"""

from __future__ import annotations

import numpy as np
import pytest
from bokeh.models import HoverTool, Text

from attnlab import viz
from attnlab.record.trace import AttentionTrace
from attnlab.viz.labels import LABEL_WIDTH, display_width, piece_label

# Pixels a column of a 12 px word takes in Chromium (FONT_STACK, measured with canvas.measureText):
# English words 5.8-7.4 ("The" 7.4, "committee" 7.2), a CJK character 12 (6 a column).
COLUMN_PX = 7.4
MARGIN_PX = 8  # the least room between two words, and between a word and the frame's edge
# the bundled WSJ parser's trees (checkpoints/wsj-parser) of the sentences that ran together
LONG_WORDS = (
    "(S (NP (XX The) (XX internationalization) (XX committee)) (VP (XX approved) (NP (XX extraordinarily) "
    "(XX comprehensive) (XX recommendations.))))"
)
SHAREHOLDERS = "(S (NP (XX Shareholders)) (VP (XX approved) (NP (XX it)) (NP (XX unanimously.))))"
CHINESE = "(S (NP (XX 我)) (VP (XX 喜欢) (NP (NP (XX 公园) (XX 。)))))"
LONG_CHINESE = (
    "(S (NP (XX 国际标准化) (XX 委员会)) (VP (XX 批准了) (NP (XX 非常全面的建议) (XX 我喜欢在公园里散步。))))"
)
MANY_LONG = "(S " + " ".join(f"(XX recommendation{i})" for i in range(40)) + ")"


def leaf_extents(fig) -> tuple[list[tuple[float, float]], float]:
    """Each word's (left, right) pixels on the frame, left to right, and the frame's width in
    pixels of the whole row (its x range's bounds), from the figure's own data."""
    text = next(r for r in fig.renderers if isinstance(r.glyph, Text)).data_source.data
    words = [(x, t) for x, t, c in zip(text["x"], text["text"], text["color"], strict=True) if c == "#08519c"]
    px = fig.width / (fig.x_range.end - fig.x_range.start)  # (the frame is the figure's width)
    spans = [(x * px - display_width(t) * COLUMN_PX / 2, x * px + display_width(t) * COLUMN_PX / 2) for x, t in words]
    return spans, fig.x_range.bounds[1] * px


@pytest.mark.parametrize(
    "text",
    [LONG_WORDS, SHAREHOLDERS, CHINESE, LONG_CHINESE, MANY_LONG],
    ids=["long-words", "shareholders", "chinese", "long-chinese", "many-long"],
)
def test_tree_words_never_overlap_nor_leave_the_frame(text: str) -> None:
    """At a fixed 64 px a word, "The internationalization committee approved ..." read
    "Thinternationalizcommitteeapprov…" and "unanimously." was cut at the right edge."""
    fig = viz.tree_figure(text)
    spans, row = leaf_extents(fig)
    assert spans[0][0] >= MARGIN_PX and row - spans[-1][1] >= MARGIN_PX, (spans[0], spans[-1], row)
    for (_, right), (left, _) in zip(spans, spans[1:], strict=False):
        assert left - right >= MARGIN_PX, (right, left)
    assert fig.width <= 21 * 64  # a long sentence is dragged sideways, as before, not drawn wider
    # nothing beside the frame (a toolbar on the right took 30 px of a 64 px step's room)
    assert fig.min_border_left == fig.min_border_right == 0 and fig.toolbar_location in ("above", "below")


def test_tree_margins_are_alike_on_both_sides() -> None:
    """One word stands in the middle (it stood at the right edge), and a row that begins and ends
    with the same word has as much room on either side (51 px left, 13 right)."""
    one = viz.tree_figure("(NP (XX Hello))")
    (left, right), row = leaf_extents(one)[0][0], leaf_extents(one)[1]
    assert left == pytest.approx(row - right)
    spans, row = leaf_extents(viz.tree_figure("(S (NP (XX recommendations)) (VP (XX approved) (XX recommendations)))"))
    assert spans[0][0] == pytest.approx(row - spans[-1][1])


def test_tree_cuts_only_long_words_and_shows_them_whole_on_hover() -> None:
    fig = viz.tree_figure(LONG_CHINESE)
    text = next(r for r in fig.renderers if isinstance(r.glyph, Text)).data_source.data
    shown = [t for t, c in zip(text["text"], text["color"], strict=True) if c == "#08519c"]
    whole = ["国际标准化", "委员会", "批准了", "非常全面的建议", "我喜欢在公园里散步。"]
    assert shown == [piece_label(w) for w in whole] and shown[:4] == whole[:4]  # 6-14 columns: whole
    assert shown[4].endswith("…") and display_width(shown[4]) <= LABEL_WIDTH  # 20 columns: cut
    hover = next(h for h in fig.select({"type": HoverTool}) if h.tooltips == [("", "@word")])
    assert hover.renderers[0].data_source.data["word"] == whole


def cross_trace(n_tgt: int, n_src: int = 20, n_heads: int = 2) -> AttentionTrace:
    """A parser's trace by hand: `n_tgt` output pieces reading `n_src` input pieces."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n_heads, n_tgt, n_src)) * 3
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return AttentionTrace(
        src_tokens=[f"▁w{i}" for i in range(n_src - 1)] + ["</s>"],
        tgt_tokens=[f"(NP{i}" for i in range(n_tgt - 1)] + ["</s>"],
        maps={"cross": [(weights / weights.sum(-1, keepdims=True)).astype(np.float32)]},
    )


def lines_state(fig) -> dict[str, object]:
    """What `update_lines` sets that a shorter trace must set back."""
    sides = [(fig.select_one({"name": f"{s}-tokens"}), fig.select_one({"name": f"{s}-spots"})) for s in ("q", "k")]
    return {
        "height": fig.height,
        "y": (fig.y_range.start, fig.y_range.end),
        "tokens": [(dict(t.data_source.data), t.glyph.text_font_size, spots.glyph.height) for t, spots in sides],
        "lines": dict(fig.select_one({"name": "lines"}).data_source.data),
    }


def test_lines_of_a_long_trace_stay_within_the_heatmaps_height() -> None:
    """20 px a piece drew a 100-piece output 2,152 px tall, a parser's 300 pieces over 6,000: the
    rows now close up within 560 px (the heatmap's budget), every line still drawn, the words
    thinned to one each 13 px (each whole on hover) while the 20 input words keep their 20 px, and
    an update back to a short trace is as a new figure of it (the explorer edits the figure in place)."""
    from attnlab.viz.lines import LEAST

    short, long = cross_trace(8), cross_trace(300)
    fig = viz.lines_figure(short, "cross", 0, None)
    fresh = lines_state(fig)
    viz.update_lines(fig, long, "cross", 0, None)
    row_px = 20  # pixels a unit of y, as the figure's height is reckoned
    # the tokens within 560 px, their headers' and the names' row above them, and the titles
    assert (fig.y_range.end - fig.y_range.start) * row_px <= 560 + 2 * row_px and fig.height <= 800
    data, weights = fig.select_one({"name": "lines"}).data_source.data, long.attention("cross", 0)
    assert len(data["q"]) == int((weights >= LEAST).sum())  # every line
    assert min(data["y0"]) >= fig.y_range.start and max(data["y0"]) <= 0 and min(data["y1"]) >= fig.y_range.start
    queries, keys = (fig.select_one({"name": f"{side}-tokens"}).data_source.data for side in ("q", "k"))
    labelled = [y for y, label in zip(queries["y"], queries["label"], strict=True) if label]
    assert 20 < len(labelled) < 300 and min(-np.diff(labelled)) * row_px >= 13  # thinned to what fits
    assert queries["word"] == [piece_label(t, None) for t in long.tgt_tokens]  # (each whole on hover)
    assert all(keys["label"]) and keys["y"] == [-float(i) for i in range(20)]  # the 20 input words as before
    assert [queries["y"][q] for q in data["q"]] == data["y0"] and [keys["y"][k] for k in data["k"]] == data["y1"]
    viz.update_lines(fig, short, "cross", 0, None)
    assert lines_state(fig) == fresh


def test_the_lines_toolbar_says_what_its_tools_do() -> None:
    """Its two tools' tips named them by code ("lines-heads", "lines-q"), which a keyboard's focus
    and a pointer showed; they are the figure's words, in the page's language."""
    from bokeh.models import HoverTool, TapTool

    from attnlab.app.words import figure_words

    spanish = figure_words("es")
    fig = viz.lines_figure(cross_trace(4, 5), "cross", 0, 0, words=spanish)
    tips = {tool.description for tool in fig.tools if isinstance(tool, TapTool | HoverTool) and tool.callback}
    assert tips == {spanish["lines.tool_heads"], spanish["lines.tool_q"], spanish["lines.tool_k"]}, tips
    assert all(not tip.startswith("lines-") for tip in tips)
