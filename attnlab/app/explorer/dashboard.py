"""The Heads dashboard tab: one row per head with the statistics `attnlab.record.stats` computed
for the trace, as a table and as a scatter of two chosen columns. Picking a head in either
opens it in every other view: the way to find, say, the heads that look at the previous word.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import panel as pn

from attnlab import viz
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.screen import picked_row
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text


class DashboardTab(pn.viewable.Viewer):
    """All heads side by side, by their statistics."""

    def __init__(self, store: Store, redraw: Callable[[], None]) -> None:
        """`redraw` is called when the chosen axes change (the page redraws when the tab shows)."""
        super().__init__()
        self.store = store
        columns = {viz.stat_name(column, store.words): column for column in viz.STAT_COLUMNS}  # as the table's headers
        self.x = pn.widgets.Select(label=text("dashboard.x", store.lang), options=columns, value="entropy", width=110)
        self.y = pn.widgets.Select(label=text("dashboard.y", store.lang), options=columns, value="distance", width=110)
        # a FlexBox: the scatter goes under the table when both do not fit the window (a Row ran 140 px past 1400)
        self.figures = pn.FlexBox(css_classes=["attn-stats"], align_items="flex-start")
        # what each column measures, under their names in the table (the headers take no help)
        named = {f"col_{column}": viz.stat_name(column, store.words) for column in viz.STAT_COLUMNS}
        about = html.escape(text("dashboard.columns", store.lang, **named))
        legend = pn.pane.HTML(f"<p>{about}</p>", css_classes=["attn-stats-columns", "attn-muted"], **PROSE)
        self.layout = pn.Column(pn.Row(self.x, self.y), self.figures, legend)
        for axis in (self.x, self.y):
            axis.param.watch(lambda _event: redraw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        words = self.store.words
        source = viz.stats_source(self.store.stats, words=words)
        source.selected.on_change("indices", self._selected)
        self.figures.objects = [
            pn.pane.Bokeh(viz.stats_table(source, words=words)),
            pn.pane.Bokeh(viz.stats_scatter(source, self.x.value, self.y.value, words=words)),
        ]

    def _selected(self, _attr: str, _old: list[int], new: list[int]) -> None:
        index = picked_row(self.store, text("tab.dashboard", self.store.lang), new, len(self.store.stats))
        if index is not None:
            head = self.store.stats[index]
            self.store.select(head["kind"], head["layer"], head["head"])
