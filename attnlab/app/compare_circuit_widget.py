"""The notebook compare widget's box for both models' circuits (`attnlab.record.circuit`): what the
explorer's Compare tab shows in its sixth box (`attnlab.app.explorer.compare_circuit`), in
ipywidgets. While its check box is ticked it draws, for the changed sentence given to `patch`, each
model's circuit on the same output (the second teacher-forced on the first's), one under the other,
with what its two menus say (the paths box's circuit's, `circuit_widget.menus`: heads followed,
smallest path kept), shown under the box while it is ticked.

What the library refuses goes into the widget's one error box, which holds one line at a time:
the patching box and this one, refusing the same changed sentence, show it once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab.app.circuit_widget import menus
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checkbox, reporting
from attnlab.app.patching_text import compared_circuit
from attnlab.app.words import figure_words

ROLES = ("first", "second")


class CompareCircuitBox(w.VBox):
    """A check box and, while it is ticked, the two menus and both models' circuits."""

    def __init__(self, errors: ErrorBox, lang: str, changed: Callable[[], tuple[str, dict[str, str]]]) -> None:
        """`errors` is where what the library refuses is shown; `changed`: the changed sentence and
        how to patch it ({direction, ...}), as the widget's patching box has them now."""
        self.errors, self.lang, self.changed = errors, lang, changed
        self.show = checkbox(text("widgets.compare_circuits", lang))
        self.senders, self.threshold = menus(lang)
        self.controls = w.HBox([self.senders, self.threshold], layout=w.Layout(display="none"))
        self.panes = [BokehPane(), BokehPane()]
        super().__init__([self.show, self.controls, *self.panes])
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        for asked in (self.show, self.senders, self.threshold):
            asked.observe(lambda _change: self.errors.act(self.draw), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {f"circuit_{role}": pane.figure for role, pane in zip(ROLES, self.panes, strict=True)}

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): draw it while the box is ticked."""
        self.sides, self.names = sides, names
        self.draw()

    def draw(self) -> None:
        """Both circuits for the changed sentence as it is now, with what the menus say; nothing
        while unticked, with no comparison or no changed sentence (the widget asks for it)."""
        for pane in self.panes:
            pane.update(None)
        self.controls.layout.display = None if self.show.value else "none"
        changed, how = self.changed()
        if not (self.show.value and self.sides and changed):
            return
        words, chosen = figure_words(self.lang), {"senders": self.senders.value, "threshold": self.threshold.value}
        with reporting(self.errors):
            figures = [
                compared_circuit(
                    model, trace, changed, how, name, self.lang, words, **chosen, name=f"compare-circuit-{role}"
                )
                for (model, trace), name, role in zip(self.sides, self.names, ROLES, strict=True)
            ]
            for pane, figure in zip(self.panes, figures, strict=True):
                pane.update(figure)
