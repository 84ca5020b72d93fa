"""The Logit lens tab: what each decoder layer would output if the stack stopped there
(`attnlab.record.lens`), as a grid of layers × output positions (`attnlab.viz.lens_figure`),
beside a few lines on how to read it. It depends on the run only: another kind, layer or head
leaves it as it is. A line above the grid counts the pieces each layer decided; a tap on a cell
opens what that layer read there (`Explorer.open_lens_cell`). Under the grid, who wrote each
output piece (`attribution.AttributionBox`): a tap on a lens cell chooses its piece there too. Last,
which inputs each output piece depends on, by its gradient (`saliency.SaliencyBox`).
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable

import panel as pn

from attnlab import viz
from attnlab.app.explorer.attribution import AttributionBox
from attnlab.app.explorer.figure_tab import FigureTab
from attnlab.app.explorer.saliency import SaliencyBox
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.record.lens import Lens, logit_lens


class LensTab(FigureTab):
    """The output taking shape through the decoder's layers."""

    def __init__(self, store: Store, open_cell: Callable[[int, int], None]) -> None:
        """`open_cell(layer, position)`: what a tap on a cell opens."""
        super().__init__(store, text("lens.about", store.lang), "attn-lens", text("lens.table", store.lang))
        self.open_cell = open_cell
        self.lens: Lens | None = None  # the one drawn
        self.summary = pn.pane.HTML("", css_classes=["attn-lens-summary", "attn-muted"])
        self.attribution = AttributionBox(store)
        self.saliency = SaliencyBox(store)
        # above the figure and its explanation: inside the FlexBox the summary took the whole row, and
        # the explanation went under the figure in a 300 px column (the rollout's sits beside it)
        self.layout = pn.Column(self.summary, self.layout, self.attribution, self.saliency)

    def draw(self) -> None:
        """The lens of the store's run, above it how many pieces each layer decided, and under it
        who wrote the piece the model was surest of and which inputs each piece depends on."""
        store = self.store
        self.lens = lens = logit_lens(store.model, store.trace)
        decided = Counter(lens.settled)
        counts = " · ".join(f"{layer}: {decided[layer]}" for layer in range(lens.n_layers))
        said = text("lens.summary", store.lang, counts=counts, never=decided[None], total=len(lens.settled))
        self.summary.object = f"<span>{html.escape(said)}</span>"
        self.figure.object = viz.lens_figure(lens, on_select=self.tapped, words=store.words)
        self.draw_table()
        self.attribution.draw()
        self.saliency.draw()

    def table_size(self) -> tuple[int, int]:
        return self.lens.p.shape

    def table_html(self) -> str:
        return viz.lens_table(self.lens, words=self.store.words)

    def tapped(self, layer: int, position: int) -> None:
        """A tap on a lens cell: its piece under the grid, and what that layer read there."""
        self.attribution.select(position)
        self.open_cell(layer, position)
