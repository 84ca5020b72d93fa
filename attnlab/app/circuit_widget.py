"""The notebook paths box's circuit (`attnlab.record.circuit`): the few heads that move most between
the open hypothesis's sentence and the changed one, and where each one's share goes (straight to the
output, or through a later head or feed-forward layer, followed in its turn), drawn on the model's architecture
(`viz.circuit_figure`). What the web explorer's path part draws under its receivers grid
(`attnlab.app.explorer.circuit`), in ipywidgets, with the same words and the same two menus.

It is drawn whenever the paths box splits a patch, for the same sentences, direction and output
pieces; either menu redraws it alone (~0.2 s on the bundled EN→DE model), the grids above staying
as they are.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, reporting
from attnlab.app.patching_text import SENDERS, THRESHOLDS
from attnlab.app.words import figure_words
from attnlab.record.circuit import Circuit, trace_circuit
from attnlab.record.trace import AttentionTrace


class CircuitBox(w.VBox):
    """The line that says what the graph shows, the two menus and the graph; all hidden until a
    patch is split by path."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` runs the path patching; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.about = w.HTML(f"<div style='color:#666'>{html.escape(text('ablation.circuit_about', lang))}</div>")
        self.senders, self.threshold = menus(lang)
        self.pane = BokehPane()
        super().__init__([self.about, w.HBox([self.senders, self.threshold]), self.pane])
        self.layout.display = "none"
        self.circuit: Circuit | None = None  # what the graph shows
        self.asked: tuple[AttentionTrace, str, Any, str] | None = None  # the trace, changed sentence,
        # positions and direction of the patch on show
        for menu in (self.senders, self.threshold):
            menu.observe(lambda _change: self.errors.act(self.draw), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {"circuit": self.pane.figure}

    def show(self, trace: AttentionTrace, changed: str, positions: Any, direction: str) -> None:
        """The paths box split this patch: its circuit too."""
        self.asked = (trace, changed, positions, direction)
        self.draw()

    def draw(self) -> None:
        """The circuit of the patch on show with the menus' heads and smallest path."""
        self.circuit = None
        self.pane.update(None)
        if self.asked is None:
            return
        self.layout.display = None
        with reporting(self.errors):
            trace, changed, positions, direction = self.asked
            self.circuit = trace_circuit(
                self.model, trace, changed, positions, direction, self.senders.value, self.threshold.value
            )
            self.pane.update(viz.circuit_figure(self.circuit, words=figure_words(self.lang)))

    def clear(self) -> None:
        """Nothing split: no graph, and the menus hidden."""
        self.asked = self.circuit = None
        self.pane.update(None)
        self.layout.display = "none"


def menus(lang: str) -> tuple[w.Dropdown, w.Dropdown]:
    """A circuit's two menus, the heads followed and the smallest path kept, at the library's
    defaults (4, 0.05): this box's and the compare widget's circuits offer the same choices under
    the same words (`attnlab.app.explorer.circuit.menus` in the web explorer)."""
    labelled = {"style": {"description_width": "initial"}}  # (a label is cut at 90 px by default)
    senders = w.Dropdown(
        description=text("ablation.circuit_senders", lang), options=SENDERS, value=4,
        layout=w.Layout(width="220px"), **labelled,
    )  # fmt: skip
    threshold = w.Dropdown(
        description=text("ablation.circuit_threshold", lang), options=[(f"{t:g}", t) for t in THRESHOLDS], value=0.05,
        layout=w.Layout(width="220px"), **labelled,
    )  # fmt: skip
    return senders, threshold
