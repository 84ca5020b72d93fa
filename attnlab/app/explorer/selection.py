"""The row above the tabs that says which head every view shows (kind, layer, head) and how
(mask overlay, colour scale). The widgets are bound to the store's parameters, so a click on the
grid or the dashboard moves them too.
"""

from __future__ import annotations

import panel as pn

from attnlab.app.explorer.store import Store


class Selection(pn.viewable.Viewer):
    """The open head and its display options."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.kind = pn.widgets.RadioButtonGroup.from_param(store.param.kind, label="kind", width=270)
        self.layer = pn.widgets.Select.from_param(
            store.param.layer, label="layer", width=80, css_classes=["attn-layer"]
        )
        self.head = pn.widgets.Select.from_param(
            store.param.head, label="head", width=80, css_classes=["attn-head-select"]
        )
        self.mask = pn.widgets.Checkbox.from_param(
            store.param.mask, label="mask overlay", align="end", css_classes=["attn-mask-toggle"]
        )
        self.scale = pn.widgets.Checkbox.from_param(
            store.param.scale_to_max, label="scale to max", align="end", css_classes=["attn-scale-toggle"]
        )
        self.layout = pn.Row(self.kind, self.layer, self.head, self.mask, self.scale)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout
