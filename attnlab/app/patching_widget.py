"""The notebook explorer's patching row (`attnlab.widgets.explore(...).patch`): a changed version
of the sentence, patched against the open hypothesis (`attnlab.record.patching`,
`attnlab.record.residual`), which heads and which layers at which positions carry the change: what
the explorer's Patching tab shows (`attnlab.app.explorer.patching`), in ipywidgets. It is a class
of its own so that the explorer (`widgets.Explorer`) holds it as it holds the attribution box.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, checked_text, reporting
from attnlab.app.patching_text import head_lines, residual_line
from attnlab.app.words import figure_words
from attnlab.record.patching import HeadPatching, trace_patching
from attnlab.record.residual import trace_residual_patching
from attnlab.record.trace import AttentionTrace


class PatchingRow(w.VBox):
    """The changed sentence, the direction and the method, the button, the lines that say what
    was found, every head's grid and the residual stream's two grids."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` runs the patching; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.changed = w.Text(placeholder=text("widgets.patch_changed", lang), layout=w.Layout(width="60%"))
        both = {text("ablation.patch_denoise", lang): "denoise", text("ablation.patch_noise", lang): "noise"}
        self.direction = w.Dropdown(options=list(both.items()), value="denoise", layout=w.Layout(width="35%"))
        methods = {
            text("ablation.patch_measured", lang): "activation",
            text("ablation.patch_attribution", lang): "attribution",
        }
        self.method = w.Dropdown(options=list(methods.items()), value="activation", layout=w.Layout(width="35%"))
        self.button = w.Button(description=text("ablation.patch_go", lang))
        self.button.on_click(lambda _button: self.patch())
        self.patched = w.HTML()
        self.patching, self.residual = BokehPane(), {side: BokehPane() for side in ("encoder", "decoder")}
        self.trace: AttentionTrace | None = None
        rows = [w.HBox([self.changed, self.direction]), w.HBox([self.method, self.button]), self.patched]
        super().__init__([*rows, self.patching, *self.residual.values()])

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        return {"patching": self.patching.figure} | {f"residual_{s}": p.figure for s, p in self.residual.items()}

    def set_trace(self, trace: AttentionTrace | None) -> None:
        """Patch against `trace` (the open hypothesis; None: nothing is open) from now on; what is
        on show read the hypothesis open before, so it goes."""
        self.trace = trace
        self.clear()

    def patch(
        self, changed: str | None = None, direction: str | None = None, positions: Any = None, method: str | None = None
    ) -> HeadPatching | None:
        """Patch every head, then every layer's output at every position, between the sentence and
        `changed` (or the box's), reading the log-probability of the open hypothesis's `positions`
        (default: all), measured or estimated (`method`, default the box's); returns the heads'
        `HeadPatching`, or None on error (as the error box says) or when nothing is open."""
        if changed is not None:
            self.changed.value = checked_text(changed, self.lang)
        self.clear()
        self.errors.clear()
        if self.trace is None:
            return None
        how = self.direction.value if direction is None else direction
        method = self.method.value if method is None else method
        lang, words, changed = self.lang, figure_words(self.lang), self.changed.value
        with reporting(self.errors):
            heads = trace_patching(self.model, self.trace, changed, positions, how, method)  # (refuses bad ones)
            layers = trace_residual_patching(self.model, self.trace, changed, positions, how, method)
            self.direction.value, self.method.value = how, method
            lines, most = head_lines(heads, lang)
            said = "".join(f"<div style='color:#666'>{html.escape(line)}</div>" for line in lines)
            where = html.escape(residual_line(layers, lang))
            self.patched.value = f"{said}<div><b>{html.escape(most)}</b></div><div>{where}</div>"
            self.patching.update(viz.patching_figure(heads, words=words))
            if layers.encoder_patched:
                self.residual["encoder"].update(viz.residual_patching_figure(layers, words=words))
            self.residual["decoder"].update(viz.residual_patching_figure(layers, side="decoder", words=words))
            return heads
        return None

    def clear(self) -> None:
        """Show nothing patched."""
        self.patched.value = ""
        for pane in (self.patching, *self.residual.values()):
            pane.update(None)
