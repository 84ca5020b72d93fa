"""The notebook compare widget's box for both models' circuits (`attnlab.record.circuit`): what the
explorer's Compare tab shows in its sixth box (`attnlab.app.explorer.compare_circuit`), in
ipywidgets. While its check box is ticked it draws, for the changed sentence given to `patch`, each
model's circuit on the same output (the second teacher-forced on the first's), one under the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, reporting
from attnlab.app.patching_text import compared_circuit
from attnlab.app.words import figure_words

ROLES = ("first", "second")


class CompareCircuitBox(w.VBox):
    """A check box and, while it is ticked, both models' circuits."""

    def __init__(self, errors: ErrorBox, lang: str, changed: Callable[[], tuple[str, dict[str, str]]]) -> None:
        """`errors` is where what the library refuses is shown; `changed`: the changed sentence and
        how to patch it ({direction, ...}), as the widget's patching box has them now."""
        self.errors, self.lang, self.changed = errors, lang, changed
        self.show = w.Checkbox(description=text("compare.circuits", lang), indent=False)
        self.panes = [BokehPane(), BokehPane()]
        super().__init__([self.show, *self.panes])
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.show.observe(lambda _change: self.draw(), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {f"circuit_{role}": pane.figure for role, pane in zip(ROLES, self.panes, strict=True)}

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): draw it while the box is ticked."""
        self.sides, self.names = sides, names
        self.draw()

    def draw(self) -> None:
        """Both circuits for the changed sentence as it is now; nothing while unticked or with no comparison."""
        for pane in self.panes:
            pane.update(None)
        if not (self.show.value and self.sides):
            return
        changed, how = self.changed()
        words = figure_words(self.lang)
        with reporting(self.errors):
            figures = [
                compared_circuit(model, trace, changed, how, name, self.lang, words, name=f"compare-circuit-{role}")
                for (model, trace), name, role in zip(self.sides, self.names, ROLES, strict=True)
            ]
            for pane, figure in zip(self.panes, figures, strict=True):
                pane.update(figure)
