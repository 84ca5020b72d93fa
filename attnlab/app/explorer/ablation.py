"""The Head ablation tab: switch chosen heads off, decode the same input again
(`attnlab.decode.ablation`), and show whether the output changed and how much less likely the
original output became, token by token. It tests what a head looks like it does.
"""

from __future__ import annotations

import panel as pn

from attnlab import viz
from attnlab.app.explorer.output import CSS
from attnlab.app.explorer.store import Store, sentence
from attnlab.decode.ablation import ablation
from attnlab.errors import AttnlabError
from attnlab.record.trace import AttentionTrace


def _label(kind: str, layer: int, head: int) -> str:
    """A head as the picker names it ("cross L1 H3"); `_heads` reads these names back."""
    return f"{kind} L{layer} H{head}"


def _heads(labels: list[str]) -> dict[tuple[str, int], list[int]]:
    """{(kind, layer): [heads]}, as `attnlab.decode.ablation` takes them, from the picked names."""
    heads: dict[tuple[str, int], list[int]] = {}
    for label in labels:
        kind, layer, head = label.split()
        heads.setdefault((kind, int(layer[1:])), []).append(int(head[1:]))
    return heads


class AblationTab(pn.viewable.Viewer):
    """Which heads to switch off, and what happens to the output without them."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.choice = pn.widgets.MultiChoice(label="heads to switch off", options=[], width=520)
        self.add = pn.widgets.Button(label="add the open head", width=150, align="end")
        self.go = pn.widgets.Button(label="Re-decode without them", color="warning", width=200, align="end")
        self.effect = pn.Column(css_classes=["attn-ablation"])
        self.layout = pn.Column(pn.Row(self.choice, self.add, self.go), self.effect)
        self.add.on_click(lambda _event: self.add_open_head())
        self.go.on_click(lambda _event: self.ablate())

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def reset(self, trace: AttentionTrace) -> None:
        """A new trace is in: offer its heads, keep the picked ones it has, and drop the old effect."""
        self.choice.options = [
            _label(kind, layer, head)
            for kind in trace.kinds
            for layer in trace.layers[kind]
            for head in range(trace.n_heads)
        ]
        self.choice.value = [v for v in self.choice.value if v in self.choice.options]
        self.effect.objects = []

    def add_open_head(self) -> None:
        label = _label(self.store.kind, self.store.layer, self.store.head)
        if label not in self.choice.value:
            self.choice.value = [*self.choice.value, label]

    def ablate(self) -> None:
        """Decode the input again without the picked heads, with the session's decoding settings."""
        store = self.store
        if store.trace is None or not self.choice.value:
            store.error = "Choose heads to switch off first."
            return
        try:
            effect = ablation(
                store.model, store.trace, _heads(self.choice.value), beam=store.beam_size, alpha=float(store.alpha)
            )
        except AttnlabError as error:
            store.error = sentence(str(error))
            return
        original = (store.scored or store.result).text
        diff = viz.word_diff(original, effect.text)
        changed = "unchanged" if effect.text == original else "changed"
        self.effect.objects = [
            pn.pane.HTML(
                f"<div class='attn-ablation-result'><p>With {len(self.choice.value)} head(s) off the output is "
                f"<b>{changed}</b>:</p><p class='attn-output'>{diff}</p>"
                f"<p>log P(original output): {sum(effect.before):.3f} with all heads → {sum(effect.after):.3f} "
                f"with the heads off (Δ = <b>{effect.logprob_change:+.3f}</b>)</p></div>",
                stylesheets=[CSS],
            ),
            pn.pane.Bokeh(viz.token_delta_figure(effect.original_tokens, effect.before, effect.after)),
        ]
