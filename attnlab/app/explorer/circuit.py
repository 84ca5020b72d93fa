"""The path part's circuit (`attnlab.record.circuit`): the few heads that move most between the open
sentence and the changed one, and where each one's share goes (straight to the output, or through
a later head or feed-forward layer, followed in its turn), drawn on the model's architecture (`viz.circuit_figure`).

Drawn under the sender's receivers grid whenever the paths are split, for the same sentences,
direction and output pieces; its two menus (how many heads to follow, the smallest path kept)
redraw it alone (~0.2 s on the bundled EN→DE model), the grids above staying as they are.

The figure is ~640 px wide for four heads a layer and ~960 px for eight: past the 664 px a 1024 px
window leaves beside the inputs, so it narrows with the window down to `cells.FIT_PX` (its towers
drawn closer; a graph has no columns to drag into view as the grids do). Anything the library
refuses is the part's one line, in the page's language.
"""

from __future__ import annotations

import html
from typing import Any

import panel as pn
from bokeh.plotting import figure

from attnlab import viz
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.patching_text import SENDERS, THRESHOLDS
from attnlab.record.circuit import Circuit, trace_circuit
from attnlab.viz.cells import fit_widths


class CircuitBox(pn.viewable.Viewer):
    """What the circuit shows (a line), its two menus and the figure; hidden until drawn."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        lang = store.lang
        self.about = pn.pane.HTML(
            f"<p>{html.escape(text('ablation.circuit_about', lang))}</p>", css_classes=["attn-muted"], **PROSE
        )
        self.senders, self.threshold = menus(lang, "attn-circuit")
        self.note = pn.pane.HTML("", css_classes=["attn-circuit-note"], **PROSE)
        self.figure = pn.pane.Bokeh(None, css_classes=["attn-circuit"])
        self.asked: tuple[str, dict[str, Any]] | None = None  # the sentence and how it was patched
        self.layout = pn.Column(
            self.about,
            pn.Row(self.senders, self.threshold),
            self.note,
            self.figure,
            visible=False,
            css_classes=["attn-circuit-box"],
        )
        self.senders.param.watch(lambda _event: self.redraw(), "value")
        self.threshold.param.watch(lambda _event: self.redraw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self, corrupted: str, how: dict[str, Any]) -> None:
        """The circuit between the open sentence and `corrupted`, patched as `how` says
        ({direction, positions, ...}), with the menus' heads and smallest path."""
        self.asked = (corrupted, how)
        self.redraw()

    def redraw(self) -> None:
        """The last asked circuit again, with what the menus say now; nothing when none was asked."""
        if self.asked is None:
            return
        circuit = self._trace(*self.asked)
        self.layout.visible = True
        self.figure.object = None if circuit is None else fitted(viz.circuit_figure(circuit, words=self.store.words))

    def clear(self) -> None:
        """No circuit, and nothing asked: the menus redraw nothing until the next patching."""
        self.asked = None
        self.figure.object = None
        self.note.object = ""
        self.layout.visible = False

    def _trace(self, corrupted: str, how: dict[str, Any]) -> Circuit | None:
        """The circuit, or None and the one line why."""
        store = self.store
        circuit, said = store.attempt(
            lambda: trace_circuit(
                store.model, store.trace, corrupted, positions=how["positions"], direction=how["direction"],
                senders=self.senders.value, threshold=self.threshold.value,
            ),
            f"circuit {corrupted[:80]!r}",
        )  # fmt: skip
        self.note.object = f"<p class='attn-circuit-error'>{html.escape(said)}</p>" if said else ""
        return circuit


def menus(lang: str, css: str) -> tuple[pn.widgets.Select, pn.widgets.Select]:
    """A circuit's two menus, the heads followed and the smallest path kept, at the library's
    defaults (4, 0.05): this part's and the Compare tab's circuits offer the same choices under the
    same words. `css` starts their classes (`{css}-senders`, `{css}-threshold`), which tests find."""
    senders = pn.widgets.Select(
        label=text("ablation.circuit_senders", lang), options=SENDERS, value=4, width=150,
        css_classes=[f"{css}-senders"],
    )  # fmt: skip
    threshold = pn.widgets.Select(
        label=text("ablation.circuit_threshold", lang), options={f"{t:g}": t for t in THRESHOLDS}, value=0.05,
        width=150, css_classes=[f"{css}-threshold"],
    )  # fmt: skip
    return senders, threshold


def fitted(fig: figure) -> figure:
    """`fig` as wide as drawn where the window has room, and narrowing with it down to `FIT_PX`."""
    fit_widths(fig)
    fig.sizing_mode = "stretch_width"
    return fig
