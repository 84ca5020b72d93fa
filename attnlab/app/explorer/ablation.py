"""The Head ablation tab: switch chosen heads off, decode the same input again
(`attnlab.decode.ablation`), and show whether the output changed and how much less likely the
original output became, token by token. It tests what a head looks like it does. Below, every
head's importance for the open output (`attnlab.record.importance`, Michel et al. 2019) says
which heads are worth trying; a tap on one adds it to the heads to switch off. Under it, patching
(`patching.py`) says which heads carry what a change of the sentence does to the output, and
where it lives: each layer's output at each source and output position.

With a reference, the open trace is the reference read teacher-forced: the log-probabilities are
the reference's (and say so), while "changed" still compares the re-decoded output with the
model's own, since both are decoded freely.
"""

from __future__ import annotations

import html

import numpy as np
import panel as pn

from attnlab import viz
from attnlab.app.explorer.output import CSS, PROSE
from attnlab.app.explorer.patching import PatchingBox
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import kind_name, text
from attnlab.decode.ablation import ablation
from attnlab.decode.deadline import time_limit
from attnlab.errors import AttnlabError
from attnlab.record.importance import trace_importance
from attnlab.record.trace import KINDS, AttentionTrace
from attnlab.viz.cells import decimals


def _label(kind: str, layer: int, head: int) -> str:
    """A head as the picker's values name it ("cross L1 H3", whatever the page's language: the
    picker shows `i18n`'s names for them); `_heads` reads these values back."""
    return f"{kind} L{layer} H{head}"


def _heads(labels: list[str]) -> dict[tuple[str, int], list[int]]:
    """{(kind, layer): [heads]}, as `attnlab.decode.ablation` takes them, from the picked values."""
    heads: dict[tuple[str, int], list[int]] = {}
    for label in labels:
        kind, layer, head = label.split()
        heads.setdefault((kind, int(layer[1:])), []).append(int(head[1:]))
    return heads


# The menu's own lines, which only its library writes, and only in English ("No results found",
# "No choices to choose from"): a search that matches no head shows none in any language.
UNTRANSLATED_CSS = ".has-no-results, .has-no-choices { display: none; }"
# The library sizes its search box to the hint's characters in `ch`, half a Han character's width:
# the Chinese hint was cut after "例如交叉 · 第".
WIDE_HINT_CSS = ".choices__input--cloned { min-width: min(100%, 26em) !important; }"


class AblationTab(pn.viewable.Viewer):
    """Which heads to switch off, and what happens to the output without them."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        lang = store.lang
        self.choice = pn.widgets.MultiChoice(
            label=text("ablation.choice", lang),
            options={},
            width=520,
            placeholder=text(
                "ablation.placeholder",
                lang,
                example=text("head.short", lang, kind=kind_name("cross", lang), layer=1, head=2),
            ),
            stylesheets=[UNTRANSLATED_CSS, *([WIDE_HINT_CSS] if lang == "zh" else [])],
        )
        self.add = pn.widgets.Button(label=text("ablation.add", lang), width=150, align="end")
        self.go = pn.widgets.Button(label=text("ablation.go", lang), color="warning", width=200, align="end")
        self.effect = pn.Column(css_classes=["attn-ablation"])
        self.picked_for = None  # the model the picked heads are heads of: another model's picks are dropped
        self.importance = pn.pane.Bokeh(None, css_classes=["attn-importance"])
        self.importance_note = pn.pane.HTML("", css_classes=["attn-importance-note", "attn-muted"], **PROSE)
        self.patching = PatchingBox(store, on_select=self.add_head)
        self.layout = pn.Column(
            pn.FlexBox(self.choice, self.add, self.go, align_items="flex-end"),  # wraps in a narrow window
            self.effect,
            self.importance_note,
            self.importance,
            self.patching,
        )
        self.add.on_click(lambda _event: self.add_open_head())
        self.go.on_click(lambda _event: self.ablate())

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def reset(self, trace: AttentionTrace) -> None:
        """A new trace is in: offer its heads, drop the old effect, and keep the picked heads
        only while the model is the same (another model's "cross L1 H3" is another head)."""
        lang = self.store.lang
        self.choice.options = {
            text("head.short", lang, kind=kind_name(kind, lang), layer=layer, head=head): _label(kind, layer, head)
            for kind in trace.kinds
            for layer in trace.layers[kind]
            for head in range(trace.n_heads)
        }
        same = self.store.model is self.picked_for
        self.picked_for = self.store.model
        self.choice.value = [v for v in self.choice.value if same and v in self.choice.options.values()]
        self.effect.objects = []
        self.weigh(trace)
        self.patching.reset(trace)

    def weigh(self, trace: AttentionTrace) -> None:
        """Every head's importance for the trace's output, or the one line why there is none (an
        int8 model cannot be differentiated)."""
        lang = self.store.lang
        try:
            importance = trace_importance(self.store.model, trace)  # one pass back and forth: no time limit
        except AttnlabError as error:
            self.importance.object = None
            self.importance_note.object = f"<p>{html.escape(self.store.explain(error))}</p>"
            return
        gradient = importance.gradient
        ends = [np.unravel_index(i, gradient.shape) for i in (gradient.argmax(), gradient.argmin())]
        names = [
            text("head.short", lang, kind=kind_name(KINDS[k], lang), layer=int(y), head=int(h)) for k, y, h in ends
        ]
        digits = decimals(float(gradient.max()))  # as the grid's cells write them
        most = text(
            "ablation.importance_most", lang, head=names[0], value=f"{gradient[ends[0]]:.{digits}f}", least=names[1],
            least_value=f"{gradient[ends[1]]:.{digits}f}",
        )  # fmt: skip
        about, words = text("ablation.importance", lang), self.store.words
        if self.store.scored is not None:  # the open trace is the reference, read teacher-forced
            about = f"{about} {text('ablation.importance_reference', lang)}"
            words = {**words, "importance.title_gradient": text("figure.importance_title_reference", lang)}
        self.importance_note.object = f"<p>{html.escape(about)}</p><p><b>{html.escape(most)}</b></p>"
        self.importance.object = viz.importance_figure(importance, on_select=self.add_head, words=words)

    def picks(self) -> list[str]:
        """The heads picked, while the model they were picked for is open (the Compare tab reads
        them; `reset` drops another model's when this tab next opens)."""
        return list(self.choice.value) if self.picked_for is self.store.model else []

    def add_open_head(self) -> None:
        self.add_head(self.store.kind, self.store.layer, self.store.head)

    def add_head(self, kind: str, layer: int, head: int) -> None:
        """Add a head to those picked (the open one, or one tapped on the importance or patching grid)."""
        label = _label(kind, layer, head)
        if label not in self.choice.value:
            self.choice.value = [*self.choice.value, label]

    def ablate(self) -> None:
        """Decode the input again without the picked heads, with the session's decoding settings."""
        store = self.store
        if store.trace is None or not self.choice.value:
            self._say(text("ablation.none", store.lang))
            return
        try:
            with time_limit(store.time_limit):  # the server's bound on one request, as for Translate
                effect = ablation(
                    store.model, store.trace, _heads(self.choice.value), beam=store.beam_size, alpha=store.alpha_value
                )
        except AttnlabError as error:
            self._say(store.explain(error))
            return
        self._say("")
        original, lang, reference = store.result.text, store.lang, store.scored is not None
        diff = viz.word_diff(original, effect.text)
        changed = text("ablation.unchanged" if effect.text == original else "ablation.changed", lang)
        verdict = text("ablation.verdict", lang, count=len(self.choice.value), verdict=f"<b>{changed}</b>")
        delta = f"<b>{effect.logprob_change:+.3f}</b>"
        logp = text(
            "ablation.logp_reference" if reference else "ablation.logp",
            lang,
            before=sum(effect.before),
            after=sum(effect.after),
            delta=delta,
        )
        words = {**store.words, "ablation.title": text("ablation.reference_title", lang)} if reference else store.words
        self.effect.objects = [
            pn.pane.HTML(
                f"<div class='attn-ablation-result'><p>{verdict}</p><p class='attn-output'>{diff}</p><p>{logp}</p></div>",
                stylesheets=[CSS],
            ),
            pn.pane.Bokeh(viz.token_delta_figure(effect.original_tokens, effect.before, effect.after, words=words)),
        ]

    def _say(self, message: str) -> None:
        """Put this tab's error in the error box while the tab is open, or ('') take it away after
        a success; an error another action left there (a failed decode) stays."""
        self.store.view_error("ablation", message)
