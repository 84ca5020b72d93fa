"""A bracketed parse tree drawn top-down: words at the bottom, constituents above the words they
span (for the parser's output, §6.3).
"""

from __future__ import annotations

from collections.abc import Mapping

from bokeh.models import (
    ColumnDataSource,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.data.treebank import Tree, parse
from attnlab.errors import AttnlabError
from attnlab.viz.cells import fit_window
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import short_label
from attnlab.viz.options import check_options
from attnlab.viz.words import say

LEAF_PX = 64  # pixels a word: closer, a long sentence's words and its preterminals ran together
SHOWN = 21  # words at once (1,344 px); a longer sentence is dragged sideways
LEFT = 0.8  # word steps left of the first word: x runs from 0, as `cells.fit_window` reads a range


def tree_figure(text: str, title: str | None = None, words: Mapping[str, str] | None = None) -> figure:
    """A bracketed tree drawn top-down: words at the bottom, constituents above the words they span.
    A chain of one label over itself is one node, "S ×43": an undertrained parser (a training
    timeline's early steps) nests dozens, and drawn level by level they ran off the page.
    At most `SHOWN` words at once, `LEAF_PX` apart, fewer in a narrow window: a longer sentence is
    dragged sideways (55 words squeezed into 1,400 px read "Tycwomaintlbrigrec", 40 into a 1,024 px
    window's 674 "smalhousenear"). The title is `title`, else `words`'
    "tree.title" ("parse tree"), saying so when it is dragged ("tree.drag")."""
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
    nodes: list[tuple[float, int, str]] = []  # x, depth, label of constituents
    edges: list[tuple[float, int, float, int]] = []  # x0, depth0, x1, depth1 (-1: the word row)
    words: list[str] = []

    def place(node: Tree, depth: int) -> float:
        """Lay out `node` (children first); returns its x, the mean of its children's."""
        label, chain = node.label or "ROOT", 1
        while len(node.children) == 1 and isinstance(node.children[0], Tree) and node.children[0].label == node.label:
            node, chain = node.children[0], chain + 1
        children: list[tuple[float, int]] = []  # (x, depth; -1 = the word row)
        for child in node.children:
            if isinstance(child, str):  # words hang on the bottom row, under their preterminal
                words.append(child)
                children.append((len(words) - 1 + LEFT, -1))
            else:
                children.append((place(child, depth + 1), depth + 1))
        x = sum(cx for cx, _ in children) / len(children) if children else len(words) + LEFT
        edges.extend((x, depth, cx, cd) for cx, cd in children)
        nodes.append((x, depth, f"{label} ×{chain}" if chain > 1 else label))
        return x

    place(root, 0)
    leaves = len(words)
    depth = max(d for _, d, _ in nodes) + 1  # the word row
    edges = [(x0, d0, x1, depth if d1 < 0 else d1) for x0, d0, x1, d1 in edges]
    shown = min(max(leaves, 1), SHOWN)
    fig = figure(
        width=max(320, shown * LEAF_PX), height=70 + 44 * (depth + 1), y_range=Range1d(depth + 0.6, -0.6),
        x_range=Range1d(0, shown, bounds=(0, max(leaves, 1))), tools="xpan,wheel_zoom,reset,save",
        active_drag="xpan", toolbar_location="right", name="tree",
        title=title if leaves <= SHOWN else said["tree.drag"].format(title=title, n=leaves),
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
            "x": [n[0] for n in nodes] + [i + LEFT for i in range(leaves)],
            "y": [n[1] for n in nodes] + [depth] * leaves,
            "text": [n[2] for n in nodes] + words,
            "color": ["#333333"] * len(nodes) + ["#08519c"] * leaves,
        }
    )
    fig.text(x="x", y="y", text="text", source=labels, text_align="center", text_baseline="middle", text_color="color",
             text_font_size="12px", background_fill_color="white")  # fmt: skip
    fig.axis.visible = False
    fig.grid.visible = False
    fit_window(fig, shown, max(leaves, 1))  # narrower than its 21 words, it shows fewer, as far apart
    return use_fonts(fig)
