"""The result as text: the translation (or parse), the scored reference, the finished hypotheses,
the parse drawn as a tree, and the word diff the ablation tab uses to show what changed. The
stylesheet is here because every pane that shows an output sentence uses it.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab import viz
from attnlab.app.explorer.store import Store
from attnlab.app.i18n import text
from attnlab.errors import AttnlabError

CSS = """
.attn-output { font-size: 1.35em; line-height: 1.4; margin: 4px 0 8px 0; overflow-wrap: anywhere; }
.attn-output { max-height: 8.4em; overflow-y: auto; }  /* six lines: a long text scrolls, the views stay in sight */
table.attn-hyps td:last-child { overflow-wrap: anywhere; }
table.attn-hyps td { white-space: nowrap; } table.attn-hyps td:last-child { white-space: normal; }
.attn-muted { color: #666; font-size: 0.9em; }
table.attn-hyps { border-collapse: collapse; font-size: 0.9em; }
table.attn-hyps td, table.attn-hyps th { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
del { background: #fdd; } ins { background: #dfd; text-decoration: none; }
"""
# A pane of text: as wide as the window leaves, up to 900 px (a fixed 900 ran 236 px past a 1024 px window).
PROSE: dict[str, object] = {"max_width": 900, "sizing_mode": "stretch_width"}


class Output(pn.viewable.Viewer):
    """The decoded text above the attention views, and for a parser its tree."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.text = pn.pane.HTML("", **PROSE, css_classes=["attn-output-pane"], stylesheets=[CSS])
        self.tree = pn.pane.Bokeh(None)
        self.tree_box = pn.Column(self.tree, visible=False)  # (the Bokeh pane syncs its own `visible` from the figure)
        self.layout = pn.Column(self.text, self.tree_box)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout

    def show(self) -> None:
        """Show the store's new result; a parse that is not a well-formed tree is shown as text only."""
        store = self.store
        self.text.object = self._html()
        if store.model.task == "parse":
            try:
                self.tree.object = viz.tree_figure((store.scored or store.result).text, words=store.words)
                self.tree_box.visible = True
            except AttnlabError:
                self.tree_box.visible = False
        else:
            self.tree_box.visible = False

    def _html(self) -> str:
        store, lang = self.store, self.store.lang
        result, scored = store.result, store.scored
        empty = f"<span class='attn-muted attn-empty'>{html.escape(text('output.empty', lang))}</span>"

        def shown(output: str) -> str:  # an output of no words (`</s>` first) said, not a blank line or cell
            return html.escape(output) if output.strip() else empty

        # the output's language, so that a screen reader reads German with a German voice, not the page's
        target = store.model.meta.get("data", {}).get("tgt_lang") if store.model.task == "translate" else None
        voice = f" lang='{target}'" if isinstance(target, str) and target.isalpha() and len(target) <= 8 else ""
        output, cell = f"<div class='attn-output'{voice}>", f"<td{voice}>"  # (opening tags: the text follows)

        label = text("output.parse" if store.model.task == "parse" else "output.translation", lang)
        parts = [f"<div class='attn-result'><div class='attn-muted'>{label}</div>{output}{shown(result.text)}</div>"]
        if scored is not None:
            per_token = scored.logprob / len(scored.tokens)
            said = text("output.reference", lang, logprob=scored.logprob, score=per_token)
            parts.append(f"<div class='attn-muted'>{said}</div>{output}{shown(scored.text)}</div>")
        rows = "".join(
            f"<tr><td>{rank + 1}</td><td>{h.score:.3f}</td><td>{h.logprob:.3f}</td>{cell}{shown(h.text)}</td></tr>"
            for rank, h in enumerate(result.hypotheses)
        )
        decoding = (
            text("decoding.greedy", lang)
            if store.greedy
            else text("decoding.settings", lang, beam=store.beam_size, alpha=store.alpha_value)
        )
        # one with greedy search, or when the beam stops early: `text` reads the singular then
        summary = text("output.hypotheses", lang, count=len(result.hypotheses), decoding=decoding)
        header = (
            f"<th>{text('output.rank', lang)}</th><th>{text('output.score', lang)}</th>"
            f"<th>{text('output.logp', lang)}</th><th>{text('output.output', lang)}</th>"
        )
        parts.append(
            f"<details {'open' if len(result.hypotheses) > 1 else ''}><summary class='attn-muted'>{summary}</summary>"
            f"<table class='attn-hyps'><tr>{header}</tr>{rows}</table></details></div>"
        )
        return "".join(parts)
