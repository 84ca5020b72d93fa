"""The Logit lens tab's second section: who wrote each output piece (direct logit attribution,
`attnlab.record.logit_attribution`). For the piece chosen, a grid of every decoder head's and
feed-forward layer's direct share of its logit (`viz.logit_attribution_figure`), the source pieces
the encoder–decoder heads read into it (`viz.logit_source_figure`), and a line with the embedding,
position and bias shares and the sum, which is the model's own logit.

One pass reads every position, so the run is read once per contrast (the mean logit, or the
runner-up): choosing another piece only redraws, and so does a tap on a lens cell, which chooses
that cell's piece (`select`).
"""

from __future__ import annotations

import html

import panel as pn

from attnlab import viz
from attnlab.app.attribution_text import against_options, first_position, parts_line, piece_options
from attnlab.app.explorer.figure_tab import explanation
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.errors import AttnlabError
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution


class AttributionBox(pn.viewable.Viewer):
    """The piece and the contrast to read, the two figures, and the line of the other shares."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        lang = store.lang
        heading = pn.pane.HTML(f"<h3 style='margin:16px 0 0'>{html.escape(text('attribution.heading', lang))}</h3>")
        self.position = pn.widgets.Select(
            label=text("attribution.position", lang), options={}, width=260, css_classes=["attn-attribution-position"]
        )
        self.against = pn.widgets.Select(
            label=text("attribution.against", lang),
            options=against_options(lang),
            width=400,  # (Spanish's runner-up option was cut at 300)
            css_classes=["attn-attribution-against"],
        )
        self.line = pn.pane.HTML("", css_classes=["attn-attribution-line"], **PROSE)
        self.grid = pn.pane.Bokeh(None, css_classes=["attn-attribution"])
        self.bars = pn.pane.Bokeh(None, css_classes=["attn-attribution-source"])
        about = explanation(text("attribution.about", lang), "attn-attribution")
        self.layout = pn.Column(
            heading,
            pn.FlexBox(self.position, self.against),  # wraps in a narrow window
            self.line,
            pn.FlexBox(pn.Column(self.grid, self.bars), about, align_items="flex-start"),  # as the lens and its text
        )
        self.attribution: LogitAttribution | None = None
        self._setting = False  # the options of a new run are being set: one redraw, not one per change
        self.position.param.watch(lambda _event: self._redraw(), "value")
        self.against.param.watch(lambda _event: self._read(self.position.value), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        """The store's run (a new one): read it, and open the piece the model was surest of."""
        self._read(None)

    def select(self, position: int) -> None:
        """Open the piece at `position` (a tap on the lens's column)."""
        if self.attribution is not None and position in self.position.options.values():
            self.position.value = position

    def _read(self, position: int | None) -> None:
        """Read the run against the chosen contrast and open the piece at `position` (None: the
        surest one); what the library refuses is the line, in the page's language."""
        store = self.store
        if store.trace is None:  # (the contrast chosen before any run: read with the first)
            return
        try:
            self.attribution = logit_attribution(store.model, store.trace, self.against.value)
        except AttnlabError as error:
            self.attribution = None
            self.grid.object = self.bars.object = None
            self.line.object = f"<p class='attn-attribution-error'>{html.escape(store.explain(error))}</p>"
            return
        self._setting = True
        try:
            self.position.options = piece_options(self.attribution.produced, store.lang)
            self.position.value = first_position(self.attribution) if position is None else position
        finally:
            self._setting = False
        self._redraw()

    def _redraw(self) -> None:
        """The two figures and the line for the piece chosen."""
        if self._setting or self.attribution is None:
            return
        position, words, lang = self.position.value, self.store.words, self.store.lang
        self.grid.object = viz.logit_attribution_figure(self.attribution, position, words=words)
        self.bars.object = viz.logit_source_figure(self.attribution, position, words=words)
        self.line.object = f"<p>{html.escape(parts_line(self.attribution, position, lang))}</p>"
