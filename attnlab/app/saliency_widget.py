"""The notebook explorer's box for which inputs each output piece depends on (gradient × input,
`attnlab.record.saliency`): what the explorer's Logit lens tab shows last
(`attnlab.app.explorer.saliency`), in ipywidgets. While its check box is ticked it reads the open
hypothesis (a pass forward and back for every output piece) and draws the map, with the line that
names the piece depending least on the source.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checkbox, reporting
from attnlab.app.words import figure_words, saliency_line
from attnlab.record.saliency import Saliency, saliency
from attnlab.record.trace import AttentionTrace


class SaliencyBox(w.VBox):
    """A check box and, while it is ticked, the open hypothesis's saliency map and its line."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` reads the traces; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.show = checkbox(text("widgets.show_saliency", lang))
        self.pane, self.line = BokehPane(), w.HTML()
        super().__init__([self.show, self.pane, self.line])
        self.trace: AttentionTrace | None = None
        self.saliency: Saliency | None = None
        self.show.observe(lambda _change: self.errors.act(self._read), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {"saliency": self.pane.figure}

    def set_trace(self, trace: AttentionTrace | None) -> None:
        """Read `trace` (the open hypothesis; None: nothing is open) while the box is ticked."""
        self.trace = trace
        self._read()

    def _read(self) -> None:
        """The map and the line of the open trace; nothing while unticked or nothing is open, or
        when the library refuses it (the error box says why)."""
        self.saliency = None
        self.pane.update(None)
        self.line.value = ""
        if not self.show.value or self.trace is None:
            return
        with reporting(self.errors):
            self.saliency = saliency(self.model, self.trace)
            self.pane.update(viz.saliency_figure(self.saliency, words=figure_words(self.lang)))
            self.line.value = f"<div style='color:#666'>{html.escape(saliency_line(self.saliency, self.lang))}</div>"
