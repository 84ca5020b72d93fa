"""A tab of one figure beside a few lines on how to read it (under it when the window is narrow):
the Attention rollout and Logit lens tabs. A subclass gives its text and its pane's class, and
its `draw` puts a figure of the store's run in `figure`; `explanation` is the text's pane, which
the lens tab's attribution section uses too.
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
        self.text = explanation(about, css)
        self.layout = pn.FlexBox(self.figure, self.text, align_items="flex-start")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout


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
