"""The Compare tab's sixth box: both models' circuits (`attnlab.record.circuit`) between the open
sentence and the changed one typed in the Head ablation tab -- the same sentence and direction the
fourth box patches both models on, every output piece -- each model read on the first one's output
(the second with its heads off kept off), drawn one under the other (`patching_text.compared_circuit`,
as the notebook's `compare_models` draws them): two models, two wirings. Its two menus are the
Head ablation tab's circuit's (`explorer.circuit.menus`: heads followed, smallest path kept, 4 and
0.05 at first), shown under the box while it is ticked; both models are drawn with what they say,
so that the two circuits compare.

Drawn only while ticked (~0.2 s a model on the bundled EN→DE model): for each comparison, and again
when the changed sentence or its direction changes or a menu does. Each figure narrows with the
window as the Head ablation tab's does (`explorer.circuit.fitted`). What the library refuses (no
changed sentence, one that changes nothing) is kept in `refused` and said in the tab's one notice,
which the fourth box, refusing the same sentence in the same words, shares: said once, not twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import panel as pn
from bokeh.plotting import figure

from attnlab.app.explorer.circuit import fitted, menus
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.patching_text import compared_circuit

CIRCUIT_FIGURES = ("compare-circuit-first", "compare-circuit-second")  # the figures' Bokeh names, which tests find


class CompareCircuit(pn.viewable.Viewer):
    """A check box and, while it is ticked, the two menus and both models' circuits."""

    def __init__(
        self, store: Store, changed: Callable[[], tuple[str, dict[str, str]]], say: Callable[[str], None]
    ) -> None:
        """`changed`: the Head ablation tab's changed sentence and how to patch it ({direction, ...});
        `say`: told the box's refusal whenever it changes, for the tab's one-line notice."""
        super().__init__()
        self.store, self.changed, self.say = store, changed, say
        self.show = pn.widgets.Checkbox(
            label=text("compare.circuits", store.lang), css_classes=["attn-compare-circuits"]
        )
        self.senders, self.threshold = menus(store.lang, "attn-compare-circuit")
        self.controls = pn.Row(self.senders, self.threshold, visible=False)
        self.panes = [
            pn.pane.Bokeh(None, sizing_mode="stretch_width", css_classes=[f"attn-compare-circuit-{role}"])
            for role in ("first", "second")
        ]
        # One under the other in a FlexBox, as the tab's other figures: drawn straight into the tab's
        # Column, they left the heatmaps above without titles, labels or toolbars. Stretched across
        # it, or a FlexBox lays a figure that narrows with the window (`fitted`) out 0 px wide.
        stretched = {"sizing_mode": "stretch_width", "align_items": "stretch"}
        self.layout = pn.Column(self.show, self.controls, pn.FlexBox(*self.panes, flex_direction="column", **stretched))
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.refused = ""  # what the library refused on the last drawing, in the page's language
        for asked in (self.show, self.senders, self.threshold):
            asked.param.watch(lambda _event: self.draw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): draw it if the box is ticked."""
        self.sides, self.names = sides, names
        self.draw()

    def draw(self) -> None:
        """Both circuits for the changed sentence as it is now, with what the menus say; nothing
        while unticked or with no comparison."""
        figures: list[figure | None] = [None, None]
        refused = ""
        if self.show.value and self.sides:
            drawn, refused = self.store.attempt(self._figures, f"compare circuits {self.changed()[0][:80]!r}")
            figures = drawn or figures
        self.controls.visible = bool(self.show.value and self.sides)  # (menus over no circuit read as broken)
        for pane, fig in zip(self.panes, figures, strict=True):
            pane.object = fig
        if refused != self.refused:  # (else the notice already says it, or says another box's line)
            self.refused = refused
            self.say(refused)

    def _figures(self) -> list[figure]:
        """Each model's circuit, narrowing with the window."""
        changed, how = self.changed()
        lang, words = self.store.lang, self.store.words
        chosen = {"senders": self.senders.value, "threshold": self.threshold.value}
        return [
            fitted(compared_circuit(model, trace, changed, how, name, lang, words, **chosen, name=figure_name))
            for (model, trace), name, figure_name in zip(self.sides, self.names, CIRCUIT_FIGURES, strict=True)
        ]
