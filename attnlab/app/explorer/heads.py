"""The Heads tab: the grid of every head of the open kind (a click opens one), the open head's
heatmap and its lines (bertviz's head view: where each word looks), and a caption that says what
is shown. The figures are edited in place after the first draw, so that a new selection sends
only new data to the browser, not new figures.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import head_pattern_text, kind_name, text
from attnlab.record.trace import AttentionTrace


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

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.caption = pn.pane.HTML("", css_classes=["attn-head-caption", "attn-muted"])
        self.grid = pn.pane.Bokeh(None, css_classes=["attn-grid"])
        self.heatmap = pn.pane.Bokeh(None, css_classes=["attn-head"])
        self.lines = pn.pane.Bokeh(None, css_classes=["attn-lines"])
        self.every = pn.widgets.Checkbox(label=text("heads.lines_every", store.lang), css_classes=["attn-lines-every"])
        self.every.param.watch(lambda _event: self.draw_heatmap(), "value")
        self.layout = pn.Column(self.caption, pn.FlexBox(self.grid, self.heatmap, pn.Column(self.lines, self.every)))

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def picked(self, layer: int, head: int) -> None:
        """A click on the grid: open that head of the kind shown."""
        self.store.select(layer=layer, head=head)

    def draw_heatmap(self) -> None:
        bokeh_edit(self._show_head, self.store.trace, self.store.vmax)

    def draw_grid(self) -> None:
        store = self.store
        options = {"selected": (store.layer, store.head), "mask": store.mask, "vmax": store.vmax, "words": store.words}
        if self.grid.object is None:
            self.grid.object = viz.grid(store.trace, store.kind, on_select=self.picked, **options)
        else:
            bokeh_edit(viz.update_grid, self.grid.object, store.trace, store.kind, **options)

    def _show_head(self, trace: AttentionTrace, vmax: float | None) -> None:
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
        self.caption.object = (
            f"<span class='attn-caption'>{html.escape(caption)}</span><br>"
            f"<span class='attn-head-pattern'>{pattern}</span>"
        )
