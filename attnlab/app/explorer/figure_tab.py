"""A tab of one figure beside a few lines on how to read it (under it when the window is narrow),
and under them a box that shows the figure's numbers as a table: the Attention rollout and Logit
lens tabs. A subclass gives its text, its pane's class and its table's label; its `draw` puts a
figure of the store's run in `figure` and calls `draw_table`, and its `table_size` and
`table_html` give the table. `explanation` is the text's pane, which the lens tab's attribution
section uses too.

The table is what a screen reader can read of a figure (a canvas says nothing) and every exact
value at once, as the Heads tab's is for a head (`viz.table`); a map too big to read that way is
one line, not a table of thousands of cells.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.viz.table import MOST, STYLE

TABLE_CSS = ":host { max-height: 420px; overflow: auto; }" + STYLE  # (it scrolls in its own box)


def table_pane(css: str) -> pn.pane.HTML:
    """A pane for a `viz.table` table, hidden until asked for: as wide as the view, the table
    scrolling inside it (a rollout of 75 pieces made a 1024 px page 3,645 px wide)."""
    return pn.pane.HTML("", css_classes=[css], stylesheets=[TABLE_CSS], sizing_mode="stretch_width", visible=False)


class FigureTab(pn.viewable.Viewer):
    """One figure, its explanation, and its numbers as a table on request."""

    def __init__(self, store: Store, about: str, css: str, table_label: str) -> None:
        """`about`: the explanation in the page's language; `css`: the figure pane's class (the
        table box's is `{css}-as-table`, the table's `{css}-table`); `table_label`: the box's."""
        super().__init__()
        self.store = store
        self.figure = pn.pane.Bokeh(None, css_classes=[css])
        self.text = explanation(about, css)
        self.as_table = pn.widgets.Checkbox(label=table_label, css_classes=[f"{css}-as-table"])
        self.table = table_pane(f"{css}-table")
        self.as_table.param.watch(lambda _event: self.draw_table(), "value")
        beside = pn.FlexBox(self.figure, self.text, align_items="flex-start")
        self.layout = pn.Column(beside, self.as_table, self.table, sizing_mode="stretch_width")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw_table(self) -> None:
        """The figure's numbers under it while the box is ticked (after each `draw`, and when the
        box is ticked), or a line saying the map is too big for a table."""
        self.table.visible = self.as_table.value
        if not self.as_table.value or self.figure.object is None:
            return
        rows, columns = self.table_size()
        if max(rows, columns) > MOST:
            said = text("figure.table_too_big", self.store.lang, size=f"{rows}×{columns}", most=MOST)
            self.table.object = f"<p class='attn-muted'>{html.escape(said)}</p>"
        else:
            self.table.object = self.table_html()

    def table_size(self) -> tuple[int, int]:
        """The rows and columns of the figure drawn."""
        raise NotImplementedError

    def table_html(self) -> str:
        """The figure drawn, as a `viz.table` table."""
        raise NotImplementedError


def explanation(about: str, css: str) -> pn.pane.HTML:
    """How to read a figure, for a `FlexBox` beside it: at least 300 px beside the figure, as wide
    as the row leaves up to 640, and up to 640 under it when the window is narrow (under a wide
    figure, a Spanish lens of 13 pieces at 1,500 px, a 300 px column of 16 lines became 8).
    `css`: the figure pane's class; the text's is `{css}-about`."""
    return pn.pane.HTML(
        f"<p class='attn-muted'>{html.escape(about)}</p>",
        min_width=300,
        max_width=640,
        sizing_mode="stretch_width",
        styles={"flex": "1 1 300px"},
        css_classes=[f"{css}-about"],
    )
