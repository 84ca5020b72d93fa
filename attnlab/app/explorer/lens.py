"""The Logit lens tab: what each decoder layer would output if the stack stopped there
(`attnlab.record.lens`), as a grid of layers × output positions (`attnlab.viz.lens_figure`),
beside a few lines on how to read it. It depends on the run only: another kind, layer or head
leaves it as it is.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab import viz
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.record.lens import logit_lens


class LensTab(pn.viewable.Viewer):
    """The output taking shape through the decoder's layers."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.figure = pn.pane.Bokeh(None, css_classes=["attn-lens"])
        about = html.escape(text("lens.about", store.lang))
        self.about = pn.pane.HTML(f"<p class='attn-muted'>{about}</p>", width=300)
        self.layout = pn.FlexBox(self.figure, self.about, align_items="flex-start")  # the text under it when narrow

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        store = self.store
        self.figure.object = viz.lens_figure(logit_lens(store.model, store.trace), words=store.words)
