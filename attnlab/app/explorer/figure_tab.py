"""A tab of one figure beside a few lines on how to read it (under it when the window is narrow):
the Attention rollout and Logit lens tabs. A subclass gives its text and its pane's class, and
draws its figure from the store.
"""

from __future__ import annotations

import html

import panel as pn
from bokeh.models import LayoutDOM

from attnlab.app.explorer.store import Store


class FigureTab(pn.viewable.Viewer):
    """One figure and its explanation; `draw` puts the subclass's `figure_for` the store in it."""

    def __init__(self, store: Store, about: str, css: str) -> None:
        """`about`: the explanation in the page's language; `css`: the figure pane's class."""
        super().__init__()
        self.store = store
        self.figure = pn.pane.Bokeh(None, css_classes=[css])
        self.text = pn.pane.HTML(f"<p class='attn-muted'>{html.escape(about)}</p>", width=300)
        self.layout = pn.FlexBox(self.figure, self.text, align_items="flex-start")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        self.figure.object = self.figure_for(self.store)

    def figure_for(self, store: Store) -> LayoutDOM:
        raise NotImplementedError
