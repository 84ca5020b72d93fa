"""The notebook explorer's patching row (`attnlab.widgets.explore(...).patch`): a changed version
of the sentence, patched against the open hypothesis (`attnlab.record.patching`,
`attnlab.record.residual`), which heads and which layers at which positions carry the change: what
the explorer's Patching tab shows (`attnlab.app.explorer.patching`), in ipywidgets. It is a class
of its own so that the explorer (`widgets.Explorer`) holds it as it holds the attribution box.

Under it, the paths box (`PathsBox`, the explorer's `attnlab.app.explorer.paths`): while it is
ticked, each patch is also split by path (`attnlab.record.paths`, Wang et al.'s path patching), and
its circuit drawn (`attnlab.app.circuit_widget`).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
from bokeh.models import LayoutDOM

from attnlab import viz
from attnlab.app.circuit_widget import CircuitBox
from attnlab.app.i18n import text
from attnlab.app.notebook import BokehPane, ErrorBox, button, checkbox, checked_text, reporting
from attnlab.app.patching_text import head_lines, head_name, path_lines, residual_line, rounded
from attnlab.app.words import figure_words
from attnlab.record.patching import HeadPatching, trace_patching
from attnlab.record.paths import Head, PathPatching, trace_path_patching
from attnlab.record.residual import trace_residual_patching
from attnlab.record.trace import KINDS, AttentionTrace


class PathsBox(w.VBox):
    """A check box and, while it is ticked, for the patch on show: the grids of every head's direct
    and indirect share (one colour scale), the sender menu (the patched heads by the size of their
    total share, the largest chosen; a tap on either grid chooses too), the lines that say where the
    sender's share goes, the grid of the later heads it goes through, and the circuit of the patch
    (`CircuitBox`). Another sender re-runs path patching for its receivers alone. Paths are measured
    runs, never estimated: after an estimated patch the box says so in one line and draws nothing."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` runs the path patching; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.split = checkbox(text("ablation.paths_split", lang))
        self.note = w.HTML()
        labelled = {"style": {"description_width": "initial"}}  # (a label is cut at 90 px by default)
        self.sender = w.Dropdown(
            description=text("ablation.paths_sender", lang), layout=w.Layout(width="480px", display="none"), **labelled
        )
        self.lines = w.HTML()
        self.direct, self.indirect, self.receivers = BokehPane(), BokehPane(), BokehPane()
        self.circuit_box = CircuitBox(model, errors, lang)
        grids = w.HBox([self.direct, self.indirect], layout=w.Layout(flex_flow="row wrap"))
        parts = [self.split, self.note, grids, self.sender, self.lines, self.receivers, self.circuit_box]
        super().__init__(parts)
        self.paths: PathPatching | None = None  # what the grids show
        self.asked: tuple[AttentionTrace, str, Any, str, HeadPatching] | None = None  # the patch on show: its
        # trace, changed sentence, positions, direction, and heads' grid
        self._setting = False  # the menu of a new patch is being filled: one run, not one per change
        self.split.observe(lambda _change: self.errors.act(self.draw), "value")
        self.sender.observe(lambda change: self._receivers(change["new"]), "value")

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        panes = {"direct": self.direct, "indirect": self.indirect, "receivers": self.receivers}
        return {f"paths_{part}": pane.figure for part, pane in panes.items()} | self.circuit_box.figures

    def patched(self, trace: AttentionTrace, changed: str, positions: Any, direction: str, heads: HeadPatching) -> None:
        """The row patched `trace` against `changed` and drew `heads`: split it by path too, if asked
        (or as soon as the box is ticked)."""
        self.asked = (trace, changed, positions, direction, heads)
        self.draw()

    def forget(self) -> None:
        """Nothing is patched (any more): draw nothing, now or when the box is ticked."""
        self.asked = None
        self.clear()

    def draw(self) -> None:
        """The direct and indirect grids of the patch on show, the receivers of its head with the
        largest total share either way, and its circuit; nothing while the box is not ticked or
        nothing is patched."""
        self.clear()
        if not self.split.value or self.asked is None:
            return
        heads = self.asked[-1]
        if heads.method != "activation":
            self.note.value = f"<div style='color:#666'>{html.escape(text('ablation.paths_measured', self.lang))}</div>"
            return
        ranked = sorted(heads.order(), key=lambda h: -abs(_share(heads, h)))
        with reporting(self.errors):
            self.paths = self._trace(ranked[0])
            words = figure_words(self.lang)
            self.direct.update(viz.path_patching_figure(self.paths, "direct", on_select=self.pick, words=words))
            self.indirect.update(viz.path_patching_figure(self.paths, "indirect", on_select=self.pick, words=words))
            self._setting = True
            try:
                self.sender.options = [(self._label(h, heads), h) for h in ranked]
                self.sender.value = ranked[0]
            finally:
                self._setting = False
            self.sender.layout.display = None
            self._show_receivers()
            self.circuit_box.show(*self.asked[:-1])

    def pick(self, kind: str, layer: int, head: int) -> None:
        """A tap on the direct or indirect grid: that head is the sender, if it was patched."""
        if (kind, layer, head) in [value for _label, value in self.sender.options]:
            self.sender.value = (kind, layer, head)

    def clear(self) -> None:
        """No grids, no menu, no lines, no circuit."""
        self.paths = None
        self.note.value = self.lines.value = ""
        self.sender.layout.display = "none"
        for pane in (self.direct, self.indirect, self.receivers):
            pane.update(None)
        self.circuit_box.clear()

    def _receivers(self, sender: Head | None) -> None:
        """Another sender chosen: its receivers (the direct and indirect grids stay as they are)."""
        if self._setting or sender is None or self.paths is None:
            return
        self.errors.clear()
        with reporting(self.errors):
            self.paths = self._trace(sender)
            self._show_receivers()

    def _label(self, head: Head, heads: HeadPatching) -> str:
        """A sender as the menu names it: "cross L1 H1 (+0.66)"."""
        lang = self.lang
        return text(
            "ablation.paths_sender_option", lang, head=head_name(*head, lang), share=rounded(_share(heads, head))
        )

    def _trace(self, sender: Head) -> PathPatching:
        trace, changed, positions, direction, _ = self.asked
        return trace_path_patching(self.model, trace, changed, positions, direction, sender=sender)

    def _show_receivers(self) -> None:
        said = path_lines(self.paths, self.lang)
        self.lines.value = "".join(f"<div>{html.escape(line)}</div>" for line in said)
        self.receivers.update(viz.path_patching_figure(self.paths, "receivers", words=figure_words(self.lang)))


def _share(patching: HeadPatching, head: Head) -> float:
    """`head`'s share in `patching`: the sender menu's order and numbers."""
    return float(patching.share[KINDS.index(head[0]), head[1], head[2]])


class PatchingRow(w.VBox):
    """The changed sentence, the direction and the method, the button, the lines that say what
    was found, every head's grid and the residual stream's two grids, and the paths box."""

    def __init__(self, model: Any, errors: ErrorBox, lang: str) -> None:
        """`model` runs the patching; `errors` is where what the library refuses is shown."""
        self.model, self.errors, self.lang = model, errors, lang
        self.changed = w.Text(placeholder=text("widgets.patch_changed", lang), layout=w.Layout(width="50%"))
        both = {text("ablation.patch_denoise", lang): "denoise", text("ablation.patch_noise", lang): "noise"}
        # (at 35% the Spanish "restaurar: la de la frase abierta, en la ejecución de la cambiada" was cut)
        self.direction = w.Dropdown(options=list(both.items()), value="denoise", layout=w.Layout(width="45%"))
        methods = {
            text("ablation.patch_measured", lang): "activation",
            text("ablation.patch_attribution", lang): "attribution",
        }
        self.method = w.Dropdown(options=list(methods.items()), value="activation", layout=w.Layout(width="35%"))
        self.button = button(text("ablation.patch_go", lang))
        self.button.on_click(lambda _button: self.patch())
        self.patched = w.HTML()
        self.patching, self.residual = BokehPane(), {side: BokehPane() for side in ("encoder", "decoder")}
        self.paths_box = PathsBox(model, errors, lang)
        self.trace: AttentionTrace | None = None
        rows = [w.HBox([self.changed, self.direction]), w.HBox([self.method, self.button]), self.patched]
        super().__init__([*rows, self.patching, *self.residual.values(), self.paths_box])

    @property
    def figures(self) -> dict[str, LayoutDOM | None]:
        panes = {"patching": self.patching} | {f"residual_{s}": p for s, p in self.residual.items()}
        return {role: pane.figure for role, pane in panes.items()} | self.paths_box.figures

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
            self.paths_box.patched(self.trace, changed, positions, how, heads)
            return heads
        return None

    def clear(self) -> None:
        """Show nothing patched."""
        self.patched.value = ""
        for pane in (self.patching, *self.residual.values()):
            pane.update(None)
        self.paths_box.forget()
