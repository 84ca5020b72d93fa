"""The Compare tab's fifth box: who wrote each output piece in each model (direct logit
attribution, `attnlab.record.logit_attribution`). For the piece chosen -- both models read the
same output, the second teacher-forced on the first's -- each model's grid of every decoder head's
and feed-forward layer's direct share of its logit (`viz.logit_attribution_figure`; models of
different sizes, each its own grid), and a line each with the embedding, position and bias shares
and the sum, which is that model's own logit.

Drawn only while ticked: each comparison is read once per contrast (the mean logit, or each
model's runner-up), and choosing another piece only redraws.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.attribution_text import against_options, first_position, parts_line, piece_options
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.errors import AttnlabError
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution

ATTRIBUTION_FIGURES = ("compare-attribution-first", "compare-attribution-second")  # the figures' Bokeh names


class CompareAttribution(pn.viewable.Viewer):
    """A check box and, while it is ticked, the piece and the contrast, both models' lines and grids."""

    def __init__(self, store: Store, say: Callable[[str], None]) -> None:
        """`say`: the tab's one-line notice, for what the library refuses."""
        super().__init__()
        self.store, self.say = store, say
        lang = store.lang
        self.show = pn.widgets.Checkbox(
            label=text("compare.attributions", lang), css_classes=["attn-compare-attributions"]
        )
        self.position = pn.widgets.Select(
            label=text("attribution.position", lang),
            options={},
            width=260,
            css_classes=["attn-compare-attribution-position"],
        )
        self.against = pn.widgets.Select(
            label=text("attribution.against", lang),
            options=against_options(lang),
            width=400,  # (Spanish's runner-up option was cut at 300)
            css_classes=["attn-compare-attribution-against"],
        )
        self.controls = pn.FlexBox(self.position, self.against, visible=False)  # wraps in a narrow window
        self.lines = pn.pane.HTML("", css_classes=["attn-compare-attribution-lines"], **PROSE)
        self.panes = [
            pn.pane.Bokeh(None, css_classes=[f"attn-compare-attribution-{role}"]) for role in ("first", "second")
        ]
        self.layout = pn.Column(self.show, self.controls, self.lines, pn.FlexBox(*self.panes))
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.attributions: list[LogitAttribution] = []
        self.refused = ""  # what the library refused on the last reading, in the page's language
        self._setting = False  # the options of a new reading are being set: one redraw, not one per change
        self.show.param.watch(lambda _event: self._read(None), "value")
        self.against.param.watch(lambda _event: self._read(self.position.value), "value")
        self.position.param.watch(lambda _event: self._redraw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): read it if the box is ticked, on the piece
        the first model was surest of."""
        self.sides, self.names = sides, names
        self._read(None)

    def _read(self, position: int | None) -> None:
        """Read both models against the chosen contrast and open the piece at `position` (None:
        the first model's surest); nothing while the box is unticked or there is no comparison."""
        self.attributions, refused = [], ""
        if self.show.value and self.sides:
            try:
                self.attributions = [logit_attribution(model, trace, self.against.value) for model, trace in self.sides]
            except AttnlabError as error:
                refused = self.store.explain(error)
        if refused != self.refused:  # (else another box's line stays)
            self.refused = refused
            self.say(refused)
        self.controls.visible = bool(self.attributions)
        if not self.attributions:
            self._show([None, None], "")
            return
        self._setting = True
        try:
            self.position.options = piece_options(self.attributions[0].produced, self.store.lang)
            self.position.value = first_position(self.attributions[0]) if position is None else position
        finally:
            self._setting = False
        self._redraw()

    def _redraw(self) -> None:
        """Both grids and both lines for the piece chosen."""
        if self._setting or not self.attributions:
            return
        position, words, lang = self.position.value, self.store.words, self.store.lang
        figures, lines = [], []
        scale = max(viz.attribution_scale(a, position) for a in self.attributions)  # one scale: colours compare
        for attribution, name, figure_name in zip(self.attributions, self.names, ATTRIBUTION_FIGURES, strict=True):
            title = f"{name} · {viz.attribution_title(attribution, position, words=words)}"  # as the lens's
            figures.append(
                viz.logit_attribution_figure(
                    attribution, position, title=title, name=figure_name, words=words, scale=scale
                )
            )
            lines.append(f"<p><b>{html.escape(name)}</b> · {html.escape(parts_line(attribution, position, lang))}</p>")
        self._show(figures, "".join(lines))

    def _show(self, figures: list[Any], lines: str) -> None:
        for pane, figure in zip(self.panes, figures, strict=True):
            pane.object = figure
        self.lines.object = lines
