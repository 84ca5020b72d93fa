"""The Attention rollout tab: for the open kind and layer, how much of each input token reaches
each position through every layer below (`attnlab.record.rollout`), beside a few lines on what
that adds to a head's map: the Heads tab shows what one head mixes from the layer just below,
this one what the layers together carry up from the words themselves.
"""

from __future__ import annotations

from attnlab import viz
from attnlab.app.explorer.figure_tab import FigureTab
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text


class RolloutTab(FigureTab):
    """The flow from the input tokens to the open layer."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, text("rollout.about", store.lang), "attn-rollout", text("rollout.table", store.lang))

    def draw(self) -> None:
        store = self.store
        self.figure.object = viz.rollout_figure(store.trace, store.kind, store.layer, words=store.words, fit=True)
        self.draw_table()

    def table_size(self) -> tuple[int, int]:
        return self.store.trace.attention(self.store.kind, self.store.layer).shape[1:]

    def table_html(self) -> str:
        store = self.store
        return viz.rollout_table(store.trace, store.kind, store.layer, words=store.words)
