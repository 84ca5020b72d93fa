"""The Compare tab's seventh box: which inputs each output piece depends on in each model, by its
gradient (gradient × input, `attnlab.record.saliency`). Both models read the same output (the
second teacher-forced on the first's), so the two maps line up row by row and column by column:
a restricted model's rows stay near their diagonal where a global one's spread, and a model with
heads off may lean on the output before a piece where the whole one read the source. Under each
map, that model's piece depending least on the source.

The maps share one colour scale. Each comparison is read once, within the server's time limit (a
pass forward and back for every output piece of each model), and only while the box is ticked.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.saliency import read_within
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.words import saliency_line
from attnlab.record.saliency import Saliency

SALIENCY_FIGURES = ("compare-saliency-first", "compare-saliency-second")  # the figures' Bokeh names


class CompareSaliency(pn.viewable.Viewer):
    """A check box and, while it is ticked, both models' saliency maps and a line under each."""

    def __init__(self, store: Store, say: Callable[[str], None]) -> None:
        """`say`: the tab's one-line notice, for what the library refuses."""
        super().__init__()
        self.store, self.say = store, say
        self.show = pn.widgets.Checkbox(
            label=text("compare.saliency", store.lang), css_classes=["attn-compare-saliency"]
        )
        self.lines = pn.pane.HTML("", css_classes=["attn-compare-saliency-lines"], **PROSE)
        self.panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-saliency-{role}"]) for role in ("first", "second")
        ]
        self.layout = pn.Column(self.show, self.lines, pn.FlexBox(*self.panes))
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.read: list[Saliency] = []  # both models' readings of this comparison, once read
        self.refused = ""  # what the library refused on the last reading, in the page's language
        self.show.param.watch(lambda _event: self.draw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): read it while the box is ticked."""
        self.sides, self.names, self.read = sides, names, []
        self.draw()

    def draw(self) -> None:
        """Both maps and both lines, read once per comparison; nothing while the box is unticked
        or there is no comparison; the tab's notice says what the library refused."""
        refused = ""
        if self.show.value and self.sides and not self.read:
            seconds = self.store.time_limit
            found, refused = self.store.attempt(
                lambda: [read_within(model, trace, 0, seconds) for model, trace in self.sides], "compared saliency"
            )
            self.read = found or []
        if refused != self.refused:  # (else another box's line stays)
            self.refused = refused
            self.say(refused)
        if not (self.show.value and self.read):
            self._show([None, None], "")
            return
        words, lang = self.store.words, self.store.lang
        scale = max(viz.saliency_scale(s) for s in self.read)  # one scale: the colours compare
        figures, lines = [], []
        for found, name, figure_name in zip(self.read, self.names, SALIENCY_FIGURES, strict=True):
            title = f"{name} · {words['saliency.title']}"
            figures.append(
                viz.saliency_figure(found, title=title, name=figure_name, words=words, fit=True, scale=scale)
            )
            if said := saliency_line(found, lang):  # (none for a map of no saliency at all)
                lines.append(f"<p><b>{html.escape(name)}</b> · {html.escape(said)}</p>")
        self._show(viz.one_width(figures), "".join(lines))

    def _show(self, figures: list[Any], lines: str) -> None:
        for pane, figure in zip(self.panes, figures, strict=True):
            pane.object = figure
        self.lines.object = lines
