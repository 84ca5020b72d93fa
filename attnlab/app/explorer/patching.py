"""The Head ablation tab's patching box (`attnlab.record.patching`): the open sentence (clean) and a
changed version of it typed here (corrupted) are read on the open output, and every head's output
is taken alone from one run into the other, or every such patch is estimated from one gradient
(attribution patching, said in the grids' titles and under the log-probabilities). The grid
(`viz.patching_figure`) shows the share of the log-probability difference each head moves by
itself, a line names the head that moves most, and a tap on a head adds it to the heads to switch
off, as on the importance grid above it.

The same button patches the residual stream (`attnlab.record.residual`, Meng et al.'s causal
tracing): each layer's output at each position, alone. Under the head grid a line says where the
difference sits (at the changed word in the encoder's top layer or spread from it; the two output
pieces it lands on), and two grids show it (`viz.residual_patching_figure`), the encoder's only when
both sentences have as many pieces (its positions line up).

Under the button, a check box splits each head's share by path as well (`paths.py`): off by
default, so that the box costs nothing more until asked.

Anything the library refuses (two sentences that give the output the same log-probability, a
sentence the model cannot take, an int8 model) is the box's one line, in the page's language.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import panel as pn

from attnlab import viz
from attnlab.app.explorer.output import PROSE
from attnlab.app.explorer.paths import PathsBox
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.app.patching_text import head_lines, residual_line, word
from attnlab.record.patching import HeadPatching, trace_patching
from attnlab.record.residual import ResidualPatching, trace_residual_patching
from attnlab.record.trace import AttentionTrace


class PatchingBox(pn.viewable.Viewer):
    """A corrupted sentence, which way and how to patch, the button, the grid and what it says."""

    def __init__(self, store: Store, on_select: Callable[[str, int, int], None]) -> None:
        super().__init__()
        self.store, self.on_select = store, on_select
        lang = store.lang
        self.about = pn.pane.HTML(
            f"<p>{html.escape(text('ablation.patch_about', lang))}</p>", css_classes=["attn-muted"], **PROSE
        )
        self.corrupted = pn.widgets.TextInput(
            label=text("ablation.patch_corrupted", lang),
            width=420,
            max_length=200_000,
            css_classes=["attn-patch-input"],
        )
        self.direction = pn.widgets.Select(
            label=text("ablation.patch_direction", lang),
            options={text("ablation.patch_denoise", lang): "denoise", text("ablation.patch_noise", lang): "noise"},
            width=430,
            css_classes=["attn-patch-direction"],
        )
        self.method = pn.widgets.Select(
            label=text("ablation.patch_method", lang),
            options={
                text("ablation.patch_measured", lang): "activation",
                text("ablation.patch_attribution", lang): "attribution",
            },
            width=430,
            css_classes=["attn-patch-method"],
        )
        self.read = pn.widgets.Select(
            label=text("ablation.patch_read", lang), options={}, width=260, css_classes=["attn-patch-read"]
        )
        self.go = pn.widgets.Button(
            label=text("ablation.patch_go", lang),
            color="primary",
            width=170,
            align="end",
            css_classes=["attn-patch-go"],
        )
        self.note = pn.pane.HTML("", css_classes=["attn-patch-note"], **PROSE)
        self.figure = pn.pane.Bokeh(None, css_classes=["attn-patch"])
        self.where = pn.pane.HTML("", css_classes=["attn-patch-where"], **PROSE)
        self.encoder = pn.pane.Bokeh(None, css_classes=["attn-patch-residual-encoder"])
        self.decoder = pn.pane.Bokeh(None, css_classes=["attn-patch-residual-decoder"])
        self.paths = PathsBox(store)
        self.source = ""  # the open sentence the typed one is a change of
        self.layout = pn.Column(
            self.about,
            pn.FlexBox(self.corrupted, self.direction, self.method),  # wraps in a narrow window
            pn.Row(self.read, self.go),
            self.paths.split,
            self.note,
            self.figure,
            self.paths,
            self.where,
            self.encoder,
            self.decoder,
            css_classes=["attn-patch-box"],
        )
        self.go.on_click(lambda _event: self.run())

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def reset(self, trace: AttentionTrace) -> None:
        """A new trace is in: drop the last grid, offer the open sentence as the one to change, and
        keep what was typed only while that sentence is the same."""
        source = self.store.text.strip()
        if source != self.source:
            self.corrupted.value = self.corrupted.value_input = ""
        self.source = source
        self.corrupted.placeholder = (
            text("ablation.patch_placeholder", self.store.lang, sentence=source[:200]) if source else ""
        )
        lang = self.store.lang  # which output pieces' log-probability to read: all, or one
        pieces = {
            text("ablation.patch_read_piece", lang, position=i, piece=word(trace.tgt_tokens, i)): i
            for i in range(len(trace.tgt_tokens))
        }
        self.read.options = {text("ablation.patch_read_all", lang): -1} | pieces
        self.read.value = -1
        self._clear()
        self.note.object = ""

    def run(self) -> None:
        """Patch every head, then every layer's output at every position, between the open sentence
        and the typed one, in the chosen direction."""
        store, lang = self.store, self.store.lang
        corrupted, how = self.asked()
        if store.trace is None or not corrupted:
            self._refuse(text("ablation.patch_none", lang))
            return
        how["positions"] = None if self.read.value < 0 else [self.read.value]
        self.go.loading = True
        try:
            both, said = store.attempt(
                lambda: (
                    trace_patching(store.model, store.trace, corrupted, **how),
                    trace_residual_patching(store.model, store.trace, corrupted, **how),
                ),
                f"patching {corrupted[:80]!r}",
            )
        finally:
            self.go.loading = False
        if both is None:
            self._refuse(said)
            return
        patching, residual = both
        words = {  # titles in this box's words (the open and the changed sentence), not the library's clean/corrupted
            **store.words,
            "patching.title_denoise": text("ablation.patch_title_denoise", lang),
            "patching.title_noise": text("ablation.patch_title_noise", lang),
            "residual.title_denoise": text("ablation.residual_title_denoise", lang),
            "residual.title_noise": text("ablation.residual_title_noise", lang),
        }
        self.note.object = self._said(patching)
        self.figure.object = viz.patching_figure(patching, on_select=self.on_select, words=words)
        self.where.object = self._where(residual)
        patched = residual.encoder_patched  # else its positions do not line up: the decoder's grid alone
        self.encoder.object = viz.residual_patching_figure(residual, words=words) if patched else None
        self.decoder.object = viz.residual_patching_figure(residual, side="decoder", words=words)
        self.paths.patched(corrupted, how, patching)

    def asked(self) -> tuple[str, dict[str, str]]:
        """The changed sentence typed (stripped; "" when none) and how to patch it ({direction,
        method}): what the button patches, and what the Compare tab patches both models on."""
        typed = (self.corrupted.value_input or self.corrupted.value or "").strip()
        return typed, {"direction": self.direction.value, "method": self.method.value}

    def _said(self, patching: HeadPatching) -> str:
        """The log-probabilities of the two runs and the head that moves the most, as HTML."""
        lines, most = head_lines(patching, self.store.lang, reference=self.store.scored is not None)
        said = "".join(f"<p class='attn-muted'>{html.escape(line)}</p>" for line in lines)
        return f"{said}<p class='attn-patch-most'><b>{html.escape(most)}</b></p>"

    def _where(self, residual: ResidualPatching) -> str:
        """Where the difference sits, as one HTML line (`patching_text.residual_line`)."""
        return f"<p class='attn-patch-where-line'>{html.escape(residual_line(residual, self.store.lang))}</p>"

    def _clear(self) -> None:
        """No grids and no line about them."""
        self.figure.object = self.encoder.object = self.decoder.object = None
        self.where.object = ""
        self.paths.asked = None
        self.paths.clear()

    def _refuse(self, message: str) -> None:
        """No grid, and the one line why."""
        self._clear()
        self.note.object = f"<p class='attn-patch-error'>{html.escape(message)}</p>"
