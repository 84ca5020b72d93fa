"""Two models side by side: the same head of each on the same sentence, their difference, and a
word diff of their outputs. Works for any two traces; where one model lacks the layer or head
(models of different sizes) or the two read or wrote different pieces, the view says so instead
of drawing a map it cannot compute.
"""

from __future__ import annotations

import difflib
import html
from typing import Any

from bokeh.models import Div

from attnlab.record.trace import AttentionTrace
from attnlab.viz.colors import KIND_TITLES
from attnlab.viz.head import heatmap
from attnlab.viz.timeline import diff_figure


def word_diff(old: str, new: str) -> str:
    """`new` against `old` word by word, as HTML: removed words in <del>, added ones in <ins>."""
    a, b = old.split(), new.split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes():
        if op == "equal":
            out.append(html.escape(" ".join(a[i1:i2])))
        if op in ("delete", "replace"):
            out.append(f"<del>{html.escape(' '.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{html.escape(' '.join(b[j1:j2]))}</ins>")
    return " ".join(out)


def has_head(trace: AttentionTrace, kind: str, layer: int, head: int) -> bool:
    """Whether `trace` holds this head (a negative layer counts from the top of each model)."""
    layers = trace.layers.get(kind, [])
    return bool(layers) and (layer < 0 and -layer <= len(layers) or layer in layers) and 0 <= head < trace.n_heads


def compare_figures(
    first: AttentionTrace,
    second: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    names: tuple[str, str] = ("A", "B"),
    budget: int = 380,
) -> list[Any]:
    """[A's head, B's head, A − B]: figures where they exist, a short note (a `Div`) where not."""
    figures: list[Any] = []
    for trace, name, role in zip((first, second), names, ("first", "second"), strict=True):
        if has_head(trace, kind, layer, head):
            title = f"{name} · {KIND_TITLES[kind]} · layer {layer} · head {head}"
            figures.append(heatmap(trace, kind, layer, head, title=title, budget=budget, name=f"compare-{role}"))
        else:
            figures.append(_note(f"{name} has no {kind} layer {layer} head {head} ({_size(trace)})", role))
    if not all(has_head(t, kind, layer, head) for t in (first, second)):
        figures.append(_note("no difference map: the two models differ in size here", "diff"))
    elif first.labels(kind) != second.labels(kind):
        figures.append(_note("no difference map: the models read or wrote different pieces", "diff"))
    else:
        title = f"{names[0]} − {names[1]} · layer {layer} · head {head}"
        figures.append(diff_figure(first, second, kind, layer, head, budget, title=title, name="compare-diff"))
    return figures


def _size(trace: AttentionTrace) -> str:
    layers = max((len(v) for v in trace.layers.values()), default=0)
    return f"{layers} layers × {trace.n_heads} heads"


def _note(text: str, name: str) -> Div:
    return Div(text=f"<p class='attn-compare-note'>{html.escape(text)}</p>", width=300, name=f"compare-note-{name}")
