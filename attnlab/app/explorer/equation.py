"""The Masks & Eq. (1) tab: the mask the open kind of attention applies, and Eq. (1) of the paper
worked through for one query of the open head (QKᵀ/√d_k, the mask, the softmax, the weighted
values), from the parts `attnlab.record.equation` recomputes in a teacher-forced pass; and one of
its scores taken apart dimension by dimension (bertviz's neuron view), for the key the query reads
most unless another is picked.
"""

from __future__ import annotations

import panel as pn

from attnlab import viz
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.record.equation import attention_parts


class EquationTab(pn.viewable.Viewer):
    """What the mask forbids, and how one query's weights come about."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.mask = pn.pane.Bokeh(None, css_classes=["attn-mask"])
        self.query = pn.widgets.Select.from_param(
            store.param.query, label=text("equation.query", store.lang), width=260
        )
        self.eq1 = pn.pane.Bokeh(None, css_classes=["attn-eq1"])
        self.key = pn.widgets.Select(label=text("equation.key", store.lang), width=260, css_classes=["attn-key"])
        self.dot = pn.pane.Bokeh(None, css_classes=["attn-dot"])
        self._parts: dict = {}
        self._read_most: tuple = ()  # (run, kind, layer, head, query) the key menu was set for
        self._setting = False  # while `draw_eq1` sets the menu (it draws the figure itself, once)
        self.key.param.watch(lambda _event: None if self._setting else self._draw_dot(), "value")
        # a FlexBox: Eq. (1) goes under the mask when both do not fit the window (a Row ran past it)
        column = pn.Column(self.query, self.eq1, self.key, self.dot)
        self.layout = pn.FlexBox(self.mask, column, align_items="flex-start")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw_mask(self) -> None:
        self.mask.object = viz.mask_figure(self.store.trace, self.store.kind, words=self.store.words)

    def draw_eq1(self) -> None:
        store, trace = self.store, self.store.trace
        q_labels, k_labels = trace.labels(store.kind)
        self.query.options = {f"{i}: {t}": i for i, t in enumerate(viz.spelled(q_labels))}
        parts = attention_parts(store.model, trace, store.kind, store.layer, store.head)
        query = min(store.query, len(q_labels) - 1)
        self.eq1.object = viz.computation_figure(
            parts, query, q_labels, k_labels, title=store.open_head, words=store.words
        )
        self._parts = parts
        keys = {f"{j}: {t}": j for j, t in enumerate(viz.spelled(k_labels))}
        # the key the reader picked, while the same query of the same head is open; else the one it reads most
        opened = (store.run, store.kind, store.layer, store.head, query)
        kept = opened == self._read_most and self.key.value in keys.values()
        self._read_most = opened
        chosen = self.key.value if kept else int(parts["weights"][query].argmax())
        self._setting = True
        try:
            self.key.param.update(options=keys, value=chosen)
        finally:
            self._setting = False
        self._draw_dot()  # (always: the same key of another head or run is another score)

    def _draw_dot(self) -> None:
        """The open query's score against the chosen key, dimension by dimension."""
        store, trace = self.store, self.store.trace
        if trace is None or not self._parts or self.key.value is None:
            return
        q_labels, k_labels = trace.labels(store.kind)
        query = min(store.query, len(q_labels) - 1)
        self.dot.object = viz.dot_product_figure(
            self._parts, query, self.key.value, q_labels, k_labels, title=store.open_head, words=store.words
        )
