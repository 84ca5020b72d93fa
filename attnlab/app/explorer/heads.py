"""The Heads tab: the grid of every head of the open kind (a click opens one), the open head's
heatmap and its lines (bertviz's head view: where each word looks), and a caption that says what
is shown. A box weighs every one of them by what each key writes (‖αf(x)‖, `attnlab.record.norms`):
a head's weight parked on a piece whose vector is short moves next to nothing, and the weighed
maps show where what a head writes comes from. Another box shows the open head's weights as a
table (`viz.weights_table`): what a screen reader can read of the heatmap, and every exact value.
The figures are edited in place after the first draw, so that a new selection sends only new
data to the browser, not new figures.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.explorer.figure_tab import table_pane
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import head_pattern_text, kind_name, text
from attnlab.errors import AttnlabError
from attnlab.record.norms import norm_trace, shift
from attnlab.record.trace import AttentionTrace
from attnlab.viz.table import MOST


def bokeh_edit(edit: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Change bokeh models directly (in place), in a next-tick callback when in a server session:
    there bokeh holds the document lock and sends the changes itself, in order."""
    doc = pn.state.curdoc
    if doc is not None and doc.session_context is not None:
        doc.add_next_tick_callback(lambda: edit(*args, **kwargs))
    else:
        edit(*args, **kwargs)


class HeadsTab(pn.viewable.Viewer):
    """Every head at a glance, and the open one up close."""

    def __init__(self, store: Store, redraw: Callable[[], None]) -> None:
        """`redraw`: draws the tab's views again as the page draws them (a trace the box cannot
        weigh is then said in the error box)."""
        super().__init__()
        self.store = store
        self._weighed: tuple[AttentionTrace | None, AttentionTrace | None] = (None, None)  # (trace, it weighed)
        self.caption = pn.pane.HTML("", css_classes=["attn-head-caption", "attn-muted"])
        self.grid = pn.pane.Bokeh(None, css_classes=["attn-grid"])
        self.heatmap = pn.pane.Bokeh(None, css_classes=["attn-head"])
        self.lines = pn.pane.Bokeh(None, css_classes=["attn-lines"])
        self.every = pn.widgets.Checkbox(label=text("heads.lines_every", store.lang), css_classes=["attn-lines-every"])
        self.every.param.watch(lambda _event: self.draw_heatmap(), "value")
        self.weigh = pn.widgets.Checkbox(label=text("heads.weigh", store.lang), css_classes=["attn-weigh"])
        self.weigh.param.watch(lambda _event: redraw(), "value")
        self.as_table = pn.widgets.Checkbox(label=text("heads.table", store.lang), css_classes=["attn-as-table"])
        self.as_table.param.watch(lambda _event: self.draw_heatmap(), "value")
        self.table = table_pane("attn-weights-table")
        boxes = pn.Column(self.lines, self.every, self.weigh, self.as_table)
        self.layout = pn.Column(
            self.caption, pn.FlexBox(self.grid, self.heatmap, boxes), self.table, sizing_mode="stretch_width"
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def picked(self, layer: int, head: int) -> None:
        """A click on the grid: open that head of the kind shown."""
        self.store.select(layer=layer, head=head)

    def shown(self) -> AttentionTrace:
        """The store's trace, or while the box is ticked that trace weighed by what each key writes
        (one teacher-forced pass of the open model, once per trace)."""
        trace = self.store.trace
        if not self.weigh.value:
            return trace
        if self._weighed[0] is not trace:
            self._weighed = (trace, norm_trace(self.store.model, trace))
        return self._weighed[1]

    def draw_heatmap(self) -> None:
        bokeh_edit(self._show_head, self.shown(), self.store.vmax)

    def draw_grid(self) -> None:
        store, trace = self.store, self.shown()
        options = {"selected": (store.layer, store.head), "mask": store.mask, "vmax": store.vmax, "words": store.words}
        if self.grid.object is None:
            self.grid.object = viz.grid(trace, store.kind, on_select=self.picked, **options)
        else:
            bokeh_edit(self._update_grid, trace, store.kind, options)

    def current(self, trace: AttentionTrace) -> bool:
        """`trace` is still what the tab shows: the store's, or its weighed copy. In a server
        session an edit runs at the next tick, and a sentence opened from the Corpus tab is
        decoded in between; the edit asked for then draws it. (The map of the sentence before
        was drawn, and weighed against the new one: "operands could not be broadcast together
        with shapes (16,) (8,)" in the server's log.)"""
        store = self.store.trace
        return trace is store or (trace is self._weighed[1] and self._weighed[0] is store)

    def _update_grid(self, trace: AttentionTrace, kind: str, options: dict[str, Any]) -> None:
        if self.current(trace):
            viz.update_grid(self.grid.object, trace, kind, **options)

    def _show_head(self, trace: AttentionTrace, vmax: float | None) -> None:
        if not self.current(trace):
            return
        store = self.store
        selection = (trace, store.kind, store.layer, store.head)
        if self.heatmap.object is None:
            # `fit`: a long source's map narrows to a 1024 px window; each update below refits it
            self.heatmap.object = viz.heatmap(*selection, mask=store.mask, vmax=vmax, words=store.words, fit=True)
        else:
            viz.update_heatmap(self.heatmap.object, *selection, mask=store.mask, vmax=vmax, words=store.words)
        lines = (*selection[:3], None if self.every.value else store.head)  # (every head of the layer, in colours)
        if self.lines.object is None:
            self.lines.object = viz.lines_figure(*lines, vmax=vmax, words=store.words)
        else:
            viz.update_lines(self.lines.object, *lines, vmax=vmax, words=store.words)
        q_len, k_len = trace.attention(store.kind, store.layer).shape[1:]
        lang = store.lang
        self.table.visible = self.as_table.value
        if self.as_table.value:
            try:
                self.table.object = viz.weights_table(*selection, mask=store.mask, words=store.words, most=MOST)
            except AttnlabError:  # (too long to read as a table: the line says what to do instead)
                said = text("heads.table_too_big", lang, size=f"{q_len}×{k_len}", most=MOST)
                self.table.object = f"<p class='attn-muted'>{html.escape(said)}</p>"
        caption = text(
            "heads.caption",
            lang,
            kind=kind_name(store.kind, lang),
            layer=store.layer,
            head=store.head,
            size=f"{q_len}×{k_len}",
            mask=text("heads.on" if store.mask else "heads.off", lang),
            scale=text("heads.to_max", lang) if store.scale_to_max else "0..1",
        )
        caption += " · " + text("heads.keys", lang)  # (`keys.ArrowKeys`)
        pattern = html.escape(head_pattern_text(store.stats, store.kind, store.layer, store.head, lang))
        weighed = f"<br><span class='attn-weighed'>{html.escape(self._weighed_text(trace))}</span>"
        self.caption.object = (
            f"<span class='attn-caption'>{html.escape(caption)}</span><br>"
            f"<span class='attn-head-pattern'>{pattern}</span>{weighed if trace is not self.store.trace else ''}"
        )

    def _weighed_text(self, weighed: AttentionTrace) -> str:
        """The piece whose part in the open head changes most when weighed (`norms.shift`): its
        share of the weight and of what the head writes."""
        store = self.store
        key, weight, share = shift(store.trace, weighed, store.kind, store.layer, store.head)
        piece = viz.spelled(store.trace.labels(store.kind)[1])[key]
        return text("heads.weighed", store.lang, piece=piece, weight=weight, share=share)
