"""The Masks & Eq. (1) tab: the mask the open kind of attention applies, and Eq. (1) of the paper
worked through for one query of the open head (QKᵀ/√d_k, the mask, the softmax, the weighted
values), from the parts `attnlab.record.equation` recomputes in a teacher-forced pass.
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
        # a FlexBox: Eq. (1) goes under the mask when both do not fit the window (a Row ran past it)
        self.layout = pn.FlexBox(self.mask, pn.Column(self.query, self.eq1), align_items="flex-start")

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
