"""The patching box's path part (`attnlab.record.paths`, Wang et al.'s path patching): each head's
share of the difference split into what it moves straight to the output and what goes through
later parts, for the same sentences, direction and output pieces as the head grid above it.

Off until its check box is ticked, so the patching box costs nothing more unless asked: then each
patching also draws the direct and the indirect grid (`viz.path_patching_figure`, one colour
scale, one under the other, each narrowing with the window as the box's other grids do), and, for
one sender head (the menu, by the size of its total share; or a tap on either grid), the grid of
the later heads its effect goes through and the line that names where it goes
(`patching_text.path_lines`). A new sender re-runs path patching for its receivers alone (0.1 s on
the bundled EN→DE model). Under them, the circuit of the few heads that move most (`circuit.py`).

Paths are measured runs, never estimated: under attribution patching the part says so in one line
and draws nothing. Anything the library refuses is the part's one line, in the page's language.
"""

from __future__ import annotations

import html
from typing import Any

import panel as pn

from attnlab import viz
from attnlab.app.explorer.circuit import CircuitBox
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.patching_text import head_name, path_lines, rounded
from attnlab.record.patching import HeadPatching
from attnlab.record.paths import PathPatching, trace_path_patching
from attnlab.record.trace import KINDS

Head = tuple[str, int, int]


class PathsBox(pn.viewable.Viewer):
    """The check box (`split`, which the patching box shows under its button), and what it draws."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        lang = store.lang
        self.split = pn.widgets.Checkbox(label=text("ablation.paths_split", lang), css_classes=["attn-paths-split"])
        self.note = pn.pane.HTML("", css_classes=["attn-paths-note"], **PROSE)
        self.direct = pn.pane.Bokeh(None, css_classes=["attn-paths-direct"])
        self.indirect = pn.pane.Bokeh(None, css_classes=["attn-paths-indirect"])
        self.sender = pn.widgets.Select(
            label=text("ablation.paths_sender", lang), options={}, width=300, visible=False,
            css_classes=["attn-paths-sender"],
        )  # fmt: skip
        self.lines = pn.pane.HTML("", css_classes=["attn-paths-lines"], **PROSE)
        self.receivers = pn.pane.Bokeh(None, css_classes=["attn-paths-receivers"])
        self.circuit = CircuitBox(store)
        self.asked: tuple[str, dict[str, Any], HeadPatching] | None = None  # the last patching: sentence, how, grid
        self.drawing = False  # while the menu is filled: its new value is no visitor's choice
        self.layout = pn.Column(
            self.note,
            # one under the other: two grids of 660-746 px fit side by side only past a ~1,900 px window,
            # and in a FlexBox the figures drawn after the page (these are) were laid out 0 px wide
            self.direct,
            self.indirect,
            self.sender,
            self.lines,
            self.receivers,
            self.circuit,
            css_classes=["attn-paths-box"],
        )
        self.split.param.watch(lambda _event: self.draw(), "value")
        self.sender.param.watch(self._sender_chosen, "value")

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def patched(self, corrupted: str, how: dict[str, Any], patching: HeadPatching) -> None:
        """The patching box patched `corrupted` with `how` ({direction, method, positions}) and drew
        `patching`: split its shares by path too, if asked (or as soon as the box is ticked)."""
        self.asked = (corrupted, how, patching)
        self.draw()

    def draw(self) -> None:
        """The direct and indirect grids of the last patching, and the receivers of its head with
        the largest total share; nothing while the box is not ticked or nothing was patched."""
        self.clear()
        if not self.split.value or self.asked is None:
            return
        corrupted, how, patching = self.asked
        if how["method"] != "activation":
            self.note.object = (
                f"<p class='attn-muted'>{html.escape(text('ablation.paths_measured', self.store.lang))}</p>"
            )
            return
        heads = sorted(patching.order(), key=lambda h: -abs(_share(patching, h)))
        paths = self._trace(heads[0])
        if paths is None:
            return
        words = self.store.words
        self.direct.object = viz.path_patching_figure(paths, "direct", on_select=self.pick, words=words)
        self.indirect.object = viz.path_patching_figure(paths, "indirect", on_select=self.pick, words=words)
        lang = self.store.lang
        self.drawing = True
        try:
            self.sender.options = {
                text(
                    "ablation.paths_sender_option",
                    lang,
                    head=head_name(*h, lang),
                    share=rounded(_share(patching, h)),
                ): h
                for h in heads
            }
            self.sender.value = heads[0]
        finally:
            self.drawing = False
        self.sender.visible = True
        self._receivers(paths)
        self.circuit.draw(corrupted, how)

    def pick(self, kind: str, layer: int, head: int) -> None:
        """A tap on the direct or indirect grid: that head is the sender, if it was patched."""
        if (kind, layer, head) in self.sender.values:
            self.sender.value = (kind, layer, head)

    def clear(self) -> None:
        """No grids, no menu, no lines, no circuit."""
        self.direct.object = self.indirect.object = self.receivers.object = None
        self.note.object = self.lines.object = ""
        self.sender.visible = False
        self.circuit.clear()

    def _sender_chosen(self, event: Any) -> None:
        """Another sender: its receivers (the direct and indirect grids stay as they are)."""
        if self.drawing or self.asked is None or event.new not in self.sender.values:
            return
        paths = self._trace(event.new)
        if paths is not None:
            self._receivers(paths)

    def _trace(self, sender: Head) -> PathPatching | None:
        """Path patching of the last patching's sentences with `sender`, or None and the one line why."""
        store = self.store
        corrupted, how, _ = self.asked
        paths, said = store.attempt(
            lambda: trace_path_patching(
                store.model, store.trace, corrupted, positions=how["positions"], direction=how["direction"],
                sender=sender,
            ),
            f"path patching {corrupted[:80]!r}",
        )  # fmt: skip
        if paths is None:
            self.clear()
            self.note.object = f"<p class='attn-paths-error'>{html.escape(said)}</p>"
        return paths

    def _receivers(self, paths: PathPatching) -> None:
        """The sender's receivers grid and the lines that say where its share goes."""
        lines = path_lines(paths, self.store.lang)
        self.lines.object = "".join(f"<p class='attn-paths-line'>{html.escape(line)}</p>" for line in lines)
        self.receivers.object = viz.path_patching_figure(paths, "receivers", words=self.store.words)


def _share(patching: HeadPatching, head: Head) -> float:
    """A head's share in a head patching grid."""
    kind, layer, index = head
    return float(patching.share[KINDS.index(kind), layer, index])
