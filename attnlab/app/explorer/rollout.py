"""The Attention rollout tab: for the open kind and layer, how much of each input token reaches
each position through every layer below (`attnlab.record.rollout`), beside a few lines on what
that adds to a head's map: the Heads tab shows what one head mixes from the layer just below,
this one what the layers together carry up from the words themselves.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab import viz
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text


class RolloutTab(pn.viewable.Viewer):
    """The flow from the input tokens to the open layer."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.figure = pn.pane.Bokeh(None, css_classes=["attn-rollout"])
        about = html.escape(text("rollout.about", store.lang))
        self.about = pn.pane.HTML(f"<p class='attn-muted'>{about}</p>", width=300)
        self.layout = pn.FlexBox(self.figure, self.about, align_items="flex-start")  # the text under it when narrow

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        store = self.store
        self.figure.object = viz.rollout_figure(store.trace, store.kind, store.layer, words=store.words)
