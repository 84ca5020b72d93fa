"""A bracketed parse tree drawn top-down: words at the bottom, constituents above the words they
span (for the parser's output, §6.3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bokeh.models import (
    ColumnDataSource,
    HoverTool,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.data.treebank import Tree, leaves, parse
from attnlab.errors import AttnlabError
from attnlab.viz.cells import FIT_PX, fit_window
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import TITLE_LINE_PX, display_width, piece_label, short_label, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.words import say

LEAF_PX = 64  # the least pixels from a word's centre to the next's: closer, short words' preterminals ran together
# Pixels a column of a 12 px word takes (`display_width`; a CJK character is two): Chromium measured
# English words at 5.8-7.4 a column, CJK characters at 6; a word of capitals (~8.5) eats into `GAP_PX`.
COLUMN_PX = 7.5
GAP_PX = 12  # the least pixels between two words, and between the first or the last word and the edge
SHOWN = 21  # steps of `LEAF_PX` at once (1,344 px); a longer sentence is dragged sideways
LEAST_PX = 320  # the narrowest figure: a one-word tree's title and toolbar
LEVEL_PX = 44  # pixels between two levels of the tree


def leaf_steps(labels: Sequence[str]) -> tuple[list[float], float]:
    """Each word's x and the row's end, in steps of `LEAF_PX` from the left edge, by the words'
    widths as drawn (`labels`): centres at least a step apart and `GAP_PX` between two words and
    between an outer word and either edge. At a fixed step a long word ran over its neighbours
    ("Thinternationalizcommittee"), and the last word, a step from the right edge, was cut there."""
    halves = [display_width(label) * COLUMN_PX / 2 for label in labels]
    xs: list[float] = []
    for i, half in enumerate(halves):
        xs.append(max(LEAF_PX / 2, half + GAP_PX) if i == 0 else xs[-1] + max(LEAF_PX, halves[i - 1] + GAP_PX + half))
    end = xs[-1] + max(LEAF_PX / 2, halves[-1] + GAP_PX) if xs else LEAF_PX
    return [x / LEAF_PX for x in xs], end / LEAF_PX


def tree_figure(text: str, title: str | None = None, words: Mapping[str, str] | None = None) -> figure:
    """A bracketed tree drawn top-down: words at the bottom, constituents above the words they span.
    A chain of one label over itself is one node, "S ×43": an undertrained parser (a training
    timeline's early steps) nests dozens, and drawn level by level they ran off the page.
    Words stand as far apart as they are wide (`leaf_steps`), at least `LEAF_PX`; a word longer
    than 14 columns is cut with "…" and shown whole on hover (`labels.piece_label`). At most
    `SHOWN` steps at once, fewer in a narrow window: a longer sentence is dragged sideways (55
    words squeezed into 1,400 px read "Tycwomaintlbrigrec", 40 into a 1,024 px window's 674
    "smalhousenear"). The title is `title`, else `words`' "tree.title" ("parse tree"), saying so
    when it is dragged ("tree.drag"), on as many lines as the narrowest window needs."""
    if not isinstance(text, str):
        raise AttnlabError(f"a tree is drawn from its bracketed text, got {type(text).__name__}")
    check_options(title=title)
    said = say(words)
    title = said["tree.title"] if title is None else title
    try:
        trees = parse(text)
    except AttnlabError:
        trees = []
    if not trees:
        raise AttnlabError(f"not a bracketed tree: {short_label(text, 60)!r}")
    root = trees[0] if len(trees) == 1 else Tree("", list(trees))
    whole = leaves(root)
    shown_words = [piece_label(word) for word in whole]
    xs, end = leaf_steps(shown_words)
    nodes: list[tuple[float, int, str]] = []  # x, depth, label of constituents
    edges: list[tuple[float, int, float, int]] = []  # x0, depth0, x1, depth1 (-1: the word row)
    placed = 0  # words placed so far

    def place(node: Tree, depth: int) -> float:
        """Lay out `node` (children first); returns its x, the mean of its children's."""
        nonlocal placed
        label, chain = node.label or "ROOT", 1
        while len(node.children) == 1 and isinstance(node.children[0], Tree) and node.children[0].label == node.label:
            node, chain = node.children[0], chain + 1
        children: list[tuple[float, int]] = []  # (x, depth; -1 = the word row)
        for child in node.children:
            if isinstance(child, str):  # words hang on the bottom row, under their preterminal
                children.append((xs[placed], -1))
                placed += 1
            else:
                children.append((place(child, depth + 1), depth + 1))
        # (a constituent over no words stands where the next word does, or last in the row)
        x = sum(cx for cx, _ in children) / len(children) if children else xs[placed] if placed < len(xs) else end - 0.5
        edges.extend((x, depth, cx, cd) for cx, cd in children)
        nodes.append((x, depth, f"{label} ×{chain}" if chain > 1 else label))
        return x

    place(root, 0)
    depth = max(d for _, d, _ in nodes) + 1  # the word row
    edges = [(x0, d0, x1, depth if d1 < 0 else d1) for x0, d0, x1, d1 in edges]
    shown = min(end, SHOWN)
    width = max(LEAST_PX, math.ceil(shown * LEAF_PX))
    if end > SHOWN:
        title = said["tree.drag"].format(title=title, n=len(whole))
    title = wrap_title(title, min(width, FIT_PX))  # (bokeh cuts a title at the canvas's edge)
    fig = figure(
        width=width, height=100 + LEVEL_PX * (depth + 1) + TITLE_LINE_PX * title.count("\n"),  # (100: title, toolbar)
        y_range=Range1d(depth + 0.6, -0.6), x_range=Range1d(0, shown, bounds=(0, end)),
        tools="xpan,wheel_zoom,reset,save", active_drag="xpan", title=title, name="tree",
        toolbar_location="below", min_border_left=0, min_border_right=0,  # (a step is `LEAF_PX` of the frame)
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
            "x": [n[0] for n in nodes] + xs,
            "y": [n[1] for n in nodes] + [depth] * len(xs),
            "text": [n[2] for n in nodes] + shown_words,
            "color": ["#333333"] * len(nodes) + ["#08519c"] * len(xs),
        }
    )
    fig.text(x="x", y="y", text="text", source=labels, text_align="center", text_baseline="middle", text_color="color",
             text_font_size="12px", background_fill_color="white")  # fmt: skip
    # each word's box, invisible, where pointing at the word shows it whole
    spots = ColumnDataSource(
        {
            "x": xs,
            "y": [depth] * len(xs),
            "width": [(display_width(w) * COLUMN_PX + GAP_PX) / LEAF_PX for w in shown_words],
            "word": [piece_label(word, None) for word in whole],
        }
    )
    boxes = fig.rect("x", "y", width="width", height=0.5, source=spots, fill_alpha=0, line_alpha=0, name="words")
    fig.add_tools(HoverTool(renderers=[boxes], tooltips=[("", "@word")]))
    fig.axis.visible = False
    fig.grid.visible = False
    fit_window(fig, shown, end)  # narrower than its `SHOWN` steps, it shows fewer, as far apart
    return use_fonts(fig, said)
