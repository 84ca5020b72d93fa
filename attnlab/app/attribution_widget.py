"""The notebook explorer's box for who wrote each output piece (direct logit attribution,
`attnlab.record.logit_attribution`): what the explorer's Logit lens tab shows under its grid
(`attnlab.app.explorer.attribution`), in ipywidgets. While its check box is ticked it reads the
open hypothesis (one pass, every position), and draws for the piece chosen the grid of every
decoder head's and feed-forward layer's direct share of its logit, the source pieces the
encoder–decoder heads read into it, and the line with the other shares and their sum.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.attribution_text import against_options, first_position, parts_line, piece_options
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checkbox, reporting
from attnlab.app.words import figure_words
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution
from attnlab.record.trace import AttentionTrace


def attribution_menus(lang: str) -> tuple[w.Dropdown, w.Dropdown, w.HBox]:
    """The piece menu, the contrast menu and their row, hidden until there is a reading: what this
    box and the Compare box (`compare_attribution_widget`) show above their figures."""
    labelled = {"style": {"description_width": "initial"}}  # (a label is cut at 90 px by default)
    position = w.Dropdown(description=text("attribution.position", lang), layout=w.Layout(width="300px"), **labelled)
    against = w.Dropdown(
        options=list(against_options(lang).items()),
        description=text("attribution.against", lang),
        layout=w.Layout(width="420px"),
        **labelled,
    )
    return position, against, w.HBox([position, against], layout=w.Layout(flex_flow="row wrap", display="none"))


class AttributionBox(w.VBox):
    """A check box and, while it is ticked, the piece and the contrast to read, the line of the
    other shares, and the two figures."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` reads the traces; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.show = checkbox(text("widgets.show_attribution", lang))
        self.position, self.against, self.controls = attribution_menus(lang)
        self.line = w.HTML()
        self.grid, self.bars = BokehPane(), BokehPane()
        figures = w.HBox([self.grid, self.bars], layout=w.Layout(flex_flow="row wrap"))
        super().__init__([self.show, self.controls, self.line, figures])
        self.trace: AttentionTrace | None = None
        self.attribution: LogitAttribution | None = None
        self._setting = False  # the options of a new reading are being set: one redraw, not one per change
        self.show.observe(lambda _change: self._chosen(lambda: self._read(None)), "value")
        self.against.observe(lambda _change: self._chosen(lambda: self._read(self.position.value)), "value")
        self.position.observe(lambda _change: self._chosen(self._redraw), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {"attribution": self.grid.figure, "attribution_source": self.bars.figure}

    def set_trace(self, trace: AttentionTrace | None) -> None:
        """Read `trace` (the open hypothesis; None: nothing is open) while the box is ticked."""
        self.trace = trace
        self._read(None)

    def select(self, position: int) -> LogitAttribution | None:
        """Tick the box and open the piece at `position` (a negative one counts from the end);
        returns what is drawn (None: nothing is open, or the library refused it, as the error box
        says). A position the output does not have is one line."""
        self.show.value = True
        if self.attribution is None:
            return None
        positions = [value for _label, value in self.position.options]
        self.position.value = viz.pick(position, positions, "position")
        return self.attribution

    def _chosen(self, action: Callable[[], None]) -> None:
        """The box or a menu changed by the reader: `action`, after the last action's error goes
        (not when `set_trace`, one part of opening a hypothesis, reads: the others' errors stay)."""
        if not self._setting:
            self.errors.act(action)

    def _read(self, position: int | None) -> None:
        """Read the open trace against the chosen contrast and open the piece at `position` (None:
        the one the model was surest of); nothing while the box is unticked or nothing is open."""
        self.attribution = None
        self.controls.layout.display = "none"
        if not self.show.value or self.trace is None:
            self._show(None, None, "")
            return
        with reporting(self.errors):
            self.attribution = logit_attribution(self.model, self.trace, self.against.value)
            self._setting = True
            try:
                self.position.options = list(piece_options(self.attribution.produced, self.lang).items())
                self.position.value = first_position(self.attribution) if position is None else position
            finally:
                self._setting = False
            self.controls.layout.display = None
            self._redraw()

    def _redraw(self) -> None:
        """The two figures and the line for the piece chosen."""
        if self._setting or self.attribution is None:
            return
        position, words = self.position.value, figure_words(self.lang)
        self._show(
            viz.logit_attribution_figure(self.attribution, position, words=words),
            viz.logit_source_figure(self.attribution, position, words=words),
            f"<div style='color:#666'>{html.escape(parts_line(self.attribution, position, self.lang))}</div>",
        )

    def _show(self, grid: LayoutDOM | None, bars: LayoutDOM | None, line: str) -> None:
        self.grid.update(grid)
        self.bars.update(bars)
        self.line.value = line
