"""A tab of one figure beside a few lines on how to read it (under it when the window is narrow):
the Attention rollout and Logit lens tabs. A subclass gives its text and its pane's class, and
its `draw` puts a figure of the store's run in `figure`.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab.app.explorer.store import Store


class FigureTab(pn.viewable.Viewer):
    """One figure and its explanation."""

    def __init__(self, store: Store, about: str, css: str) -> None:
        """`about`: the explanation in the page's language; `css`: the figure pane's class."""
        super().__init__()
        self.store = store
        self.figure = pn.pane.Bokeh(None, css_classes=[css])
        self.text = pn.pane.HTML(f"<p class='attn-muted'>{html.escape(about)}</p>", width=300)
        self.layout = pn.FlexBox(self.figure, self.text, align_items="flex-start")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout
