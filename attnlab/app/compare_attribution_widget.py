"""The notebook compare widget's box for who wrote each output piece in each model (direct logit
attribution, `attnlab.record.logit_attribution`): what the explorer's Compare tab shows in its
fifth box (`attnlab.app.explorer.compare_attribution`), in ipywidgets. While its check box is
ticked it reads both models on the same output (the second teacher-forced on the first's), and
draws for the piece chosen each model's grid of every decoder head's and feed-forward layer's
direct share of its logit, with a line each of the other shares and their sum.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.attribution_text import first_position, parts_line, piece_options
from attnlab.app.attribution_widget import attribution_menus
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checkbox, reporting
from attnlab.app.words import figure_words
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution

ROLES = ("first", "second")


class CompareAttributionBox(w.VBox):
    """A check box and, while it is ticked, the piece and the contrast, both lines and both grids."""

    def __init__(self, errors: ErrorBox, lang: str) -> None:
        """`errors` is where what the library refuses is shown."""
        self.errors, self.lang = errors, lang
        self.show = checkbox(text("compare.attributions", lang))
        self.position, self.against, self.controls = attribution_menus(lang)
        self.line = w.HTML()
        self.panes = [BokehPane(), BokehPane()]
        super().__init__(
            [self.show, self.controls, self.line, w.HBox(self.panes, layout=w.Layout(flex_flow="row wrap"))]
        )
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.attributions: list[LogitAttribution] = []
        self._setting = False  # the options of a new reading are being set: one redraw, not one per change
        self.show.observe(lambda _change: self._chosen(lambda: self._read(None)), "value")
        self.against.observe(lambda _change: self._chosen(lambda: self._read(self.position.value)), "value")
        self.position.observe(lambda _change: self._chosen(self._redraw), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {f"attribution_{role}": pane.figure for role, pane in zip(ROLES, self.panes, strict=True)}

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): read it while the box is ticked, on the piece
        the first model was surest of."""
        self.sides, self.names = sides, names
        self._read(None)

    def _chosen(self, action: Callable[[], None]) -> None:
        """The box or a menu changed by the reader: `action`, after the last action's error goes
        (not when `compare`, one part of a run, reads: the run's other errors stay)."""
        if not self._setting:
            self.errors.act(action)

    def _read(self, position: int | None) -> None:
        """Read both models against the chosen contrast and open the piece at `position` (None:
        the first model's surest); nothing while the box is unticked or there is no comparison."""
        self.attributions = []
        self.controls.layout.display = "none"
        if not self.show.value or not self.sides:
            self._show([None, None], "")
            return
        with reporting(self.errors):
            self.attributions = [logit_attribution(model, trace, self.against.value) for model, trace in self.sides]
            self._setting = True
            try:
                self.position.options = list(piece_options(self.attributions[0].produced, self.lang).items())
                self.position.value = first_position(self.attributions[0]) if position is None else position
            finally:
                self._setting = False
            self.controls.layout.display = None
            self._redraw()
            return
        self._show([None, None], "")  # refused: the error box says why

    def _redraw(self) -> None:
        """Both grids and both lines for the piece chosen."""
        if self._setting or not self.attributions:
            return
        position, words, lang = self.position.value, figure_words(self.lang), self.lang
        figures, lines = [], []
        scale = max(viz.attribution_scale(a, position) for a in self.attributions)  # one scale: colours compare
        for attribution, name, role in zip(self.attributions, self.names, ROLES, strict=True):
            title = f"{name} · {viz.attribution_title(attribution, position, words=words)}"  # as the lens's
            figure_name = f"compare-attribution-{role}"
            figures.append(
                viz.logit_attribution_figure(
                    attribution, position, title=title, name=figure_name, words=words, scale=scale
                )
            )
            said = html.escape(parts_line(attribution, position, lang))
            lines.append(f"<div style='color:#666'><b>{html.escape(name)}</b> · {said}</div>")
        self._show(figures, "".join(lines))

    def _show(self, figures: list[LayoutDOM | None], lines: str) -> None:
        for pane, figure in zip(self.panes, figures, strict=True):
            pane.update(figure)
        self.line.value = lines
