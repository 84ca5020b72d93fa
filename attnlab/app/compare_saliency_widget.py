"""The notebook compare widget's box for which inputs each output piece depends on in each model
(gradient × input, `attnlab.record.saliency`): what the explorer's Compare tab shows in its seventh
box (`attnlab.app.explorer.compare_saliency`), in ipywidgets. While its check box is ticked it
reads both models on the same output (the second teacher-forced on the first's) and draws both
maps on one colour scale, each with the line naming its piece depending least on the source.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checkbox, reporting
from attnlab.app.words import figure_words, saliency_line
from attnlab.record.saliency import Saliency, saliency

ROLES = ("first", "second")


class CompareSaliencyBox(w.VBox):
    """A check box and, while it is ticked, both models' saliency maps and a line under each."""

    def __init__(self, errors: ErrorBox, lang: str) -> None:
        """`errors` is where what the library refuses is shown."""
        self.errors, self.lang = errors, lang
        self.show = checkbox(text("compare.saliency", lang))
        self.line = w.HTML()
        self.panes = [BokehPane(), BokehPane()]
        super().__init__([self.show, self.line, w.HBox(self.panes, layout=w.Layout(flex_flow="row wrap"))])
        self.sides: tuple[tuple[Any, Any], ...] = ()  # ((model, trace), (model, trace)): both readings of the output
        self.names = ("A", "B")
        self.read: list[Saliency] = []
        self.show.observe(lambda _change: self.errors.act(self._read), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {f"saliency_{role}": pane.figure for role, pane in zip(ROLES, self.panes, strict=True)}

    def compare(self, sides: tuple[tuple[Any, Any], ...], names: tuple[str, str]) -> None:
        """A new comparison (`sides` empty: none): read it while the box is ticked."""
        self.sides, self.names = sides, names
        self._read()

    def _read(self) -> None:
        """Both maps and both lines; nothing while unticked or there is no comparison, or when the
        library refuses (the error box says why)."""
        self.read = []
        self._show([None, None], "")
        if not self.show.value or not self.sides:
            return
        with reporting(self.errors):
            self.read = [saliency(model, trace) for model, trace in self.sides]
            words = figure_words(self.lang)
            scale = max(viz.saliency_scale(s) for s in self.read)  # one scale: the colours compare
            figures, lines = [], []
            for found, name, role in zip(self.read, self.names, ROLES, strict=True):
                title = f"{name} · {words['saliency.title']}"
                figures.append(
                    viz.saliency_figure(found, title=title, name=f"compare-saliency-{role}", words=words, scale=scale)
                )
                if said := saliency_line(found, self.lang):  # (none for a map of no saliency at all)
                    lines.append(f"<div style='color:#666'><b>{html.escape(name)}</b> · {html.escape(said)}</div>")
            self._show(viz.one_width(figures), "".join(lines))

    def _show(self, figures: list[LayoutDOM | None], lines: str) -> None:
        for pane, figure in zip(self.panes, figures, strict=True):
            pane.update(figure)
        self.line.value = lines
