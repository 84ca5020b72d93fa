"""The row above the tabs that says which head every view shows (kind, layer, head) and how
(mask overlay, colour scale). The widgets are bound to the store's parameters, so a click on the
grid or the dashboard moves them too.
"""

from __future__ import annotations

import panel as pn

from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text


class Selection(pn.viewable.Viewer):
    """The open head and its display options."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        lang = store.lang
        # the kinds' buttons show the store's names for them ({name: kind}, in the page's language)
        self.kind = pn.widgets.RadioButtonGroup.from_param(
            store.param.kind, label=text("selection.kind", lang), width=270
        )
        self.layer = pn.widgets.Select.from_param(
            store.param.layer, label=text("selection.layer", lang), width=80, css_classes=["attn-layer"]
        )
        self.head = pn.widgets.Select.from_param(
            store.param.head, label=text("selection.head", lang), width=80, css_classes=["attn-head-select"]
        )
        self.mask = pn.widgets.Checkbox.from_param(
            store.param.mask, label=text("selection.mask", lang), align="end", css_classes=["attn-mask-toggle"]
        )
        self.scale = pn.widgets.Checkbox.from_param(
            store.param.scale_to_max,
            label=text("selection.scale", lang),
            align="end",
            css_classes=["attn-scale-toggle"],
        )
        # a FlexBox: the check boxes go onto a second line in a narrow window (a Row ran past 1024 px)
        self.layout = pn.FlexBox(self.kind, self.layer, self.head, self.mask, self.scale, align_items="flex-end")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout
