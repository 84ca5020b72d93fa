"""The Export bar: downloads of what the session shows, made on the server when clicked and
needing no browser or network to open: the open head as PNG or SVG, the whole trace (reload it
with `AttentionTrace.load`), and the current views as one self-contained HTML page. The head's
map and the grid are exported as the Heads tab shows them: weighed by what each key writes
while its box is ticked (the file names then say `-weighed`); the trace file is the recording.
"""

from __future__ import annotations

import html
import io
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import panel as pn
from bokeh.layouts import column, row
from bokeh.models import Div

from attnlab import viz
from attnlab.app.explorer.heads import HeadsTab
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import head_pattern_text, text
from attnlab.record.equation import attention_parts
from attnlab.record.trace import AttentionTrace

T = TypeVar("T")


def _download(
    callback: Callable[[], io.IOBase | None], filename: str, label: str, width: int = 90
) -> pn.widgets.FileDownload:
    """A download button, off until there is a trace to export."""
    return pn.widgets.FileDownload(
        callback=callback, filename=filename, label=label, color="light", width=width, disabled=True
    )


def _slug(name: str) -> str:
    """A checkpoint's name as visitors know it (`classroom/tiny-copy`) made fit for a file name."""
    return re.sub(r"[^\w.]+", "-", name).strip("-.")


class ExportBar(pn.viewable.Viewer):
    """The download buttons; their file names follow the open head and the run."""

    def __init__(self, store: Store, heads: HeadsTab | None = None) -> None:
        """`heads`: the Heads tab, whose box may weigh what it draws (None: the store's trace as it is)."""
        super().__init__()
        self.store = store
        self.heads = heads
        lang = store.lang
        self.png_download = _download(self.said(self.png), "head.png", label=text("export.png", lang))
        self.svg_download = _download(self.said(self.svg), "head.svg", label=text("export.svg", lang))
        trace_file = self.said(self.trace_file)
        self.trace_download = _download(trace_file, "attention.trace", label=text("export.trace", lang))
        html_page = self.said(self.html)
        self.html_download = _download(html_page, "attention.html", label=text("export.html", lang), width=110)
        self.layout = pn.Row(
            pn.pane.HTML(f"<b>{text('export.title', lang)}</b>", align="center"),
            self.png_download,
            self.svg_download,
            self.trace_download,
            self.html_download,
        )

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def said(self, export: Callable[[], io.IOBase | None]) -> Callable[[], io.IOBase | None]:
        """`export`, whose failure is one line in the error box (`Store.attempt`: a bug's traceback
        goes to the server's log): a failed download said nothing, the button only spun."""

        def attempt() -> io.IOBase | None:
            made, said = self.store.attempt(export, f"exporting {export.__name__}")
            if said:
                self.store.error = said
            return made

        return attempt

    def enable(self) -> None:
        for button in (self.png_download, self.svg_download, self.trace_download, self.html_download):
            button.disabled = False

    def name_files(self) -> None:
        """Name the files after what they hold (model, run, head), so that downloads of the same
        head of another sentence or model do not overwrite each other or read as the same."""
        store = self.store
        run = f"{_slug(store.checkpoint_name) or 'attention'}-run{store.run}"
        weighed = "-weighed" if self.heads is not None and self.heads.weigh.value else ""
        stem = f"{run}-{store.kind}-L{store.layer}-H{store.head}{weighed}"
        self.png_download.filename, self.svg_download.filename = f"{stem}.png", f"{stem}.svg"
        self.trace_download.filename, self.html_download.filename = f"{run}.trace", f"{run}{weighed}.html"

    def png(self) -> io.BytesIO | None:
        image = self._open_head(viz.heatmap_png)
        return None if image is None else io.BytesIO(image)

    def svg(self) -> io.StringIO | None:
        image = self._open_head(viz.heatmap_svg)
        return None if image is None else io.StringIO(image)

    def _open_head(self, render: Callable[..., T]) -> T | None:
        """The open head rendered as the Heads tab shows it (mask overlay, colour scale)."""
        store = self.store
        if store.trace is None:
            return None
        return render(
            self.shown(), store.kind, store.layer, store.head, mask=store.mask, vmax=store.vmax, words=store.words
        )

    def shown(self) -> AttentionTrace:
        """The trace the Heads tab draws: the store's, weighed while the tab's box is ticked."""
        return self.store.trace if self.heads is None else self.heads.shown()

    def trace_file(self) -> io.BytesIO | None:
        if self.store.trace is None:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            path = self.store.trace.save(Path(tmp) / "attention.trace")
            return io.BytesIO(path.read_bytes())

    def html(self) -> io.StringIO | None:
        """The current views as one self-contained page (bokeh inlined, opens offline)."""
        store, trace = self.store, self.store.trace
        if trace is None:
            return None
        vmax, words, lang = store.vmax, store.words, store.lang
        source = viz.stats_source(store.stats, words=words)
        q_labels, k_labels = trace.labels(store.kind)
        parts = attention_parts(store.model, trace, store.kind, store.layer, store.head)
        query = min(store.query, len(q_labels) - 1)
        static = {**words, "grid.title": text("figure.grid_title_page", lang)}  # a click opens nothing in a file
        pattern = head_pattern_text(store.stats, store.kind, store.layer, store.head, lang)  # as the Heads tab says
        key = int(parts["weights"][query].argmax())  # the key the query reads most, as the tab opens it
        shown = self.shown()  # (weighed as the Heads tab shows it)
        layout = column(
            viz.summary_div(trace, words=words),
            row(viz.grid(shown, store.kind, selected=(store.layer, store.head), mask=store.mask, vmax=vmax, words=static),
                viz.heatmap(shown, store.kind, store.layer, store.head, mask=store.mask, vmax=vmax, words=words)),
            Div(text=f"<p>{html.escape(pattern)}</p>", width=900),
            row(viz.mask_figure(trace, store.kind, words=words),
                column(viz.computation_figure(parts, query, q_labels, k_labels, title=store.open_head, words=words),
                       viz.dot_product_figure(parts, query, key, q_labels, k_labels, title=store.open_head, words=words))),
            viz.stats_table(source, words=words),  # (beside the scatter, a row squeezed it to 240 px)
            viz.stats_scatter(source, words=words),
        )  # fmt: skip
        title = f"attnlab: {trace.meta.get('text', '')[:60]}"
        return io.StringIO(viz.standalone_html(layout, title=title, lang=self.store.lang))
