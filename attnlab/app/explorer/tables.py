"""Bokeh DataTables in the explorer's tabs, which are dynamic (only the open tab is in the page).

BokehJS draws a tab's content when the tab opens, before the content is in the page; SlickGrid,
which draws a DataTable, then finds no stylesheet of its own in the shadow root ("SlickGrid Cannot
find stylesheet", then "Cannot read properties of undefined (reading 'top_panel')"), and the whole
tab stays blank, each time it opens again (the Heads dashboard did, opened a second time). A table
given to a tab that is already open is drawn whole. So the tables of a tab that closes are taken
out of it, and given back once it has opened again.
"""

from __future__ import annotations

from typing import Any

import panel as pn
from bokeh.models import DataTable, Model


class TabTables:
    """Keeps each closed tab's DataTables out of the page (`tabs.active` watched)."""

    def __init__(self, tabs: pn.Tabs) -> None:
        self.tabs = tabs
        self._held: dict[int, list[tuple[pn.pane.Bokeh, Model]]] = {}
        tabs.param.watch(self._moved, "active")

    def _moved(self, event: Any) -> None:
        held = []
        for pane in self.tabs[event.old].select(pn.pane.Bokeh):
            if isinstance(pane.object, Model) and pane.object.select_one({"type": DataTable}) is not None:
                held.append((pane, pane.object))
                pane.object = None
        self._held[event.old] = held
        for pane, table in self._held.pop(event.new, []):
            if pane.object is None:  # (a view that drew anew meanwhile keeps its new drawing)
                pane.object = table
