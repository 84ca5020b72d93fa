"""The Logit lens tab's third section: which input pieces each output piece depends on, by its
gradient (gradient × input, `attnlab.record.saliency`). One map (`viz.saliency_figure`): a row an
output piece, the source's pieces and then the output before it as columns, each cell its share of
the row; under it a line naming the piece that depends least on the source, and how to read it.

The map costs a pass forward and back for every output piece (SmoothGrad, when ticked, one per
noisy copy), so each run is read once for each setting and kept: a redraw of the tab, or ticking
SmoothGrad off again, reads nothing. What the library refuses (an int8 model) is the section's one
line, in the page's language; the lens above stays drawn.
"""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.explorer.figure_tab import explanation
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.words import saliency_line
from attnlab.decode.deadline import check_time, time_limit
from attnlab.record.saliency import Saliency, saliency
from attnlab.record.trace import AttentionTrace

SAMPLES = 16  # SmoothGrad's noisy copies: the map settles by ~10 (Smilkov et al. 2017); 16 cost ~1 s a short pair
HINT = "try a shorter sentence, or untick SmoothGrad"  # (what the time limit's line suggests)


class SaliencyBox(pn.viewable.Viewer):
    """SmoothGrad's check box, the map and the line under it, and how to read them."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        lang = store.lang
        heading = pn.pane.HTML(f"<h3 style='margin:16px 0 0'>{html.escape(text('saliency.heading', lang))}</h3>")
        self.smooth = pn.widgets.Checkbox(
            label=text("saliency.smooth", lang, samples=SAMPLES), css_classes=["attn-saliency-smooth"]
        )
        self.figure = pn.pane.Bokeh(None, css_classes=["attn-saliency"])
        self.line = pn.pane.HTML("", css_classes=["attn-saliency-line"], **PROSE)
        about = explanation(text("saliency.about", lang), "attn-saliency")
        self.layout = pn.Column(
            heading,
            self.smooth,
            pn.FlexBox(pn.Column(self.figure, self.line), about, align_items="flex-start"),  # as the lens and its text
            css_classes=["attn-saliency-section"],
        )
        self._read: dict[tuple[int, int], Saliency] = {}  # {(run, samples): its reading}: the run's, no other
        self.smooth.param.watch(lambda _event: self.draw(), "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def draw(self) -> None:
        """The map of the store's run with the setting chosen, read once; or the one line why not."""
        store = self.store
        model, trace, run = store.model, store.trace, store.run  # one run's, whatever the store holds next
        if trace is None:
            return
        samples = SAMPLES if self.smooth.value else 0
        found = self._read.get((run, samples))
        if found is None:
            found, said = store.attempt(
                lambda: read_within(model, trace, samples, store.time_limit), f"saliency of run {run}"
            )
            if found is None:
                self.figure.object = None
                self.line.object = f"<p class='attn-saliency-error'>{html.escape(said)}</p>"
                return
            self._read = {key: kept for key, kept in self._read.items() if key[0] == run} | {(run, samples): found}
        self.figure.object = viz.saliency_figure(found, words=store.words, fit=True)
        self.line.object = f"<p>{html.escape(saliency_line(found, store.lang))}</p>"


def read_within(model: Any, trace: AttentionTrace, samples: int, seconds: float | None) -> Saliency:
    """The saliency of `trace` within the server's time limit on one request, as Translate's: a
    long pair's passes (SmoothGrad's most of all) held up every other visitor for minutes."""
    with time_limit(seconds):
        return saliency(model, trace, samples=samples, check=lambda: check_time("gradient saliency", HINT))
