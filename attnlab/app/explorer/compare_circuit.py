"""The Compare tab's sixth box: both models' circuits (`attnlab.record.circuit`) between the open
sentence and the changed one typed in the Head ablation tab -- the same sentence and direction the
fourth box patches both models on, every output piece -- each model read on the first one's output
(the second with its heads off kept off), drawn one under the other (`patching_text.compared_circuit`,
as the notebook's `compare_models` draws them) with the Head ablation tab's defaults (four heads
followed, paths of 0.05 or more): two models, two wirings.

Drawn only while ticked (~0.2 s a model on the bundled EN→DE model): for each comparison, and again
when the changed sentence or its direction changes. Each figure narrows with the window as the
Head ablation tab's does (`explorer.circuit.fitted`). What the library refuses (no changed
sentence, one that changes nothing) is the box's one line, in the page's language.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import panel as pn
from bokeh.plotting import figure

from attnlab.app.explorer.circuit import fitted
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.patching_text import compared_circuit

CIRCUIT_FIGURES = ("compare-circuit-first", "compare-circuit-second")  # the figures' Bokeh names, which tests find


class CompareCircuit(pn.viewable.Viewer):
    """A check box and, while it is ticked, both models' circuits, or the one line why not."""

    def __init__(self, store: Store, changed: Callable[[], tuple[str, dict[str, str]]]) -> None:
        """`changed`: the Head ablation tab's changed sentence and how to patch it ({direction, ...})."""
        super().__init__()
        self.store, self.changed = store, changed
        self.show = pn.widgets.Checkbox(
            label=text("compare.circuits", store.lang), css_classes=["attn-compare-circuits"]
        )
        self.note = pn.pane.HTML("", css_classes=["attn-compare-circuit-note"], **PROSE)
        self.panes = [pn.pane.Bokeh(None, css_classes=[f"attn-compare-circuit-{role}"]) for role in ("first", "second")]
        self.layout = pn.Column(self.show, self.note, *self.panes)
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.show.param.watch(lambda _event: self.draw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): draw it if the box is ticked."""
        self.sides, self.names = sides, names
        self.draw()

    def draw(self) -> None:
        """Both circuits for the changed sentence as it is now; nothing while unticked or with no comparison."""
        figures: list[figure | None] = [None, None]
        said = ""
        if self.show.value and self.sides:
            drawn, said = self.store.attempt(self._figures, f"compare circuits {self.changed()[0][:80]!r}")
            figures = drawn or figures
        self.note.object = f"<p class='attn-compare-circuit-error'>{html.escape(said)}</p>" if said else ""
        for pane, fig in zip(self.panes, figures, strict=True):
            pane.object = fig

    def _figures(self) -> list[figure]:
        """Each model's circuit, narrowing with the window."""
        changed, how = self.changed()
        lang, words = self.store.lang, self.store.words
        return [
            fitted(compared_circuit(model, trace, changed, how, name, lang, words, name=figure_name))
            for (model, trace), name, figure_name in zip(self.sides, self.names, CIRCUIT_FIGURES, strict=True)
        ]
