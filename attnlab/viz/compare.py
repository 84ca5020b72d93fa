"""Two models side by side: the same head of each on the same sentence, their difference, and a
word diff of their outputs; or the attention rollouts of each up to the same layer, and theirs. Works for any two traces; where one model lacks the layer or head
(models of different sizes) or the two read or wrote different pieces, the view says so instead
of drawing a map it cannot compute.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bokeh.models import Div

from attnlab.data.tokenizer import text_units
from attnlab.errors import AttnlabError
from attnlab.record.rollout import rollout
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.cells import one_width
from attnlab.viz.colors import DIFF_PALETTE, color_scale
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import heatmap, matrix_figure, off_note
from attnlab.viz.labels import spelled, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.rollout import rolled_mask, rollout_figure
from attnlab.viz.selection import head_map, model_layer
from attnlab.viz.timeline import diff_figure
from attnlab.viz.words import kind_name, kind_title, say


def word_diff(old: str, new: str) -> str:
    """`new` against `old` word by word, as HTML: removed words in <del>, added ones in <ins>.
    Punctuation is a unit of its own ("Katze schläft." against "schläft auf einer Katze." struck
    "schläft." whole), Chinese or Japanese one unit a character (as one word, 我喜欢早上喝茶 against
    我喜欢在早上喝茶 was marked all changed), and each run of spaces a unit too, shown as the text
    has it: joined by the rule of running text, 很大, 不是吗? against 很大,不是吗? showed no change,
    and "Tom 和 Mary" lost its spaces."""
    if not (isinstance(old, str) and isinstance(new, str)):
        raise AttnlabError(f"word_diff compares two texts, got {type(old).__name__} and {type(new).__name__}")
    a, b = _units(old), _units(new)
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(a[i1:i2])))
        if op in ("delete", "replace"):
            out.append(f"<del>{html.escape(''.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{html.escape(''.join(b[j1:j2]))}</ins>")
    return "".join(out)


def _units(text: str) -> list[str]:
    """The text as `word_diff` compares it: words, each punctuation mark, each CJK character
    (`text_units`), and the runs of whitespace between them; joined, the text itself."""
    return [
        unit
        for chunk in re.split(r"(\s+)", text)
        if chunk
        for unit in ([chunk] if chunk.isspace() else [p for u in text_units(chunk) for p in re.findall(r"\w+|\W", u)])
    ]


def has_head(trace: AttentionTrace, kind: str, layer: int, head: int) -> bool:
    """Whether `trace` holds this head, asked as `heatmap` asks it (a negative layer counts from
    the top of each model, the head is the model's id), so that a True is a map it can draw."""
    try:
        head_map(trace, kind, layer, head)
    except AttnlabError:
        return False
    return True


def two_names(names: object) -> bool:
    """Whether `names` can label a comparison: two strings ("AB" is not two names, ("A",) is one)."""
    pair = not isinstance(names, str) and isinstance(names, Sequence) and len(names) == 2
    return pair and all(isinstance(name, str) for name in names)


def compare_figures(
    first: AttentionTrace,
    second: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    names: tuple[str, str] = ("A", "B"),
    budget: int = 380,
    *,
    mask: bool = True,
    vmax: float | None = 1.0,
    words: Mapping[str, str] | None = None,
) -> list[Any]:
    """[A's head, B's head, A − B]: figures where they exist, a short note (a `Div`) where not.

    `words` replaces any of `viz.words.WORDS` (its "compare.*" templates, with the fields {name}
    (a model), {first} and {second} (both), {kind}, {kind_title}, {layer}, {head}, and {layers}
    and {heads} (a model's size); the kinds' names; the maps' hover), e.g. in a screen's
    language; `mask` and `vmax` are the heatmaps' (`viz.heatmap`)."""
    _check(first, second, names, budget)
    if not (has_head(first, kind, layer, head) or has_head(second, kind, layer, head)):
        head_map(first, kind, layer, head)  # neither holds it (a kind "foo", a layer "0"): why, not two notes
    said = say(words)
    fields = {"kind": kind_name(kind, said), "kind_title": kind_title(kind, said), "layer": layer, "head": head}
    figures: list[Any] = []
    for trace, name, role in zip((first, second), names, ("first", "second"), strict=True):
        if has_head(trace, kind, layer, head):
            own = {**fields, "layer": model_layer(trace, kind, layer)}  # (layer -1 titled "layer -1")
            title = said["compare.title"].format(name=name, **own) + off_note(trace, kind, layer, head, said)
            title = wrap_title(
                title, budget + 90
            )  # (a Spanish "…cabeza 0 · desactivada (su salida se anula)" ran 1,042 px wide)
            figures.append(
                heatmap(
                    trace,
                    kind,
                    layer,
                    head,
                    mask=mask,
                    vmax=vmax,
                    title=title,
                    budget=budget,
                    name=f"compare-{role}",
                    words=said,
                )  # fmt: skip
            )
        else:
            layers = max((len(v) for v in trace.layers.values()), default=0)
            text = said["compare.missing"].format(name=name, layers=layers, heads=trace.n_heads, **fields)
            figures.append(_note(text, role))
    if not all(has_head(t, kind, layer, head) for t in (first, second)):
        figures.append(_note(said["compare.sizes"].format(**fields), "diff"))
    elif first.labels(kind) != second.labels(kind):
        figures.append(_note(said["compare.pieces"].format(**fields), "diff"))
    else:
        title = said["compare.diff_title"].format(first=names[0], second=names[1], **fields)
        figures.append(
            diff_figure(
                first, second, kind, layer, head, budget, title=title, name="compare-diff", words=said, mask=mask
            )
        )
    return one_width(figures)


def compare_rollouts(
    first: AttentionTrace,
    second: AttentionTrace,
    kind: str,
    layer: int,
    names: tuple[str, str] = ("A", "B"),
    budget: int = 380,
    *,
    words: Mapping[str, str] | None = None,
) -> list[Any]:
    """[A's rollout, B's rollout, A − B] of `kind` up to `layer` (`attnlab.rollout`): where a
    restricted model's receptive field grows with depth beside a global one's, say; both rollouts on
    one colour scale (each on its own, the same colour read 0.6 in one and 0.7 in the other). Notes
    where a model lacks the layer or the two read or wrote different pieces, as `compare_figures` has."""
    _check(first, second, names, budget)
    held = [_has_layer(trace, kind, layer) for trace in (first, second)]
    if not any(held):
        first.layer_index(kind, layer)  # neither holds it (a kind "foo", a layer "0"): why, not two notes
    said = say(words)
    fields = {"kind": kind_name(kind, said), "kind_title": kind_title(kind, said), "layer": layer, "head": ""}
    figures: list[Any] = []
    flows = [
        rollout(t, kind)[t.layers[kind].index(t.layer_index(kind, layer))]
        for t, has in zip((first, second), held, strict=True)
        if has
    ]
    top = max(color_scale(flow, None) for flow in flows) if flows else None  # one colour scale for both models
    for trace, name, role, has in zip((first, second), names, ("first", "second"), held, strict=True):
        if has:
            title = said["compare.rollout_title"].format(
                name=name, **{**fields, "layer": trace.layer_index(kind, layer)}
            )
            figures.append(rollout_figure(
                trace, kind, layer, budget=budget, title=title, name=f"compare-rollout-{role}", words=said, vmax=top
            ))  # fmt: skip
        else:
            layers = len(trace.layers.get(kind, []))
            figures.append(_note(said["compare.rollout_missing"].format(name=name, layers=layers, **fields), role))
    if not all(held):
        figures.append(_note(said["compare.sizes"].format(**fields), "diff"))
    elif first.labels(kind) != second.labels(kind):
        figures.append(_note(said["compare.pieces"].format(**fields), "diff"))
    else:
        a, b = flows
        q_labels, k_labels = map(spelled, first.labels(kind))
        figures.append(matrix_figure(
            a - b, q_labels, k_labels, allowed=rolled_mask(first, kind), vmin=-1.0, vmax=1.0,
            palette=DIFF_PALETTE, budget=budget, value_name=f"Δ {said['rollout.share']}", name="compare-rollout-diff",
            axis_labels=(said["rollout.input"], said["head.query"]),  # as the two rollouts' ("key", "weight": a head's)
            title=said["compare.rollout_diff"].format(first=names[0], second=names[1], layer=first.layer_index(kind, layer)),
            words=said,
        ))  # fmt: skip
    return one_width(figures)


def _check(first: object, second: object, names: object, budget: object) -> None:
    check_trace(first, "the first trace"), check_trace(second, "the second trace")
    check_options(budget=budget)
    if not two_names(names):  # ("A",) was a ValueError from zip
        raise AttnlabError(f"names are two strings, one per trace, not {names!r}")


def _has_layer(trace: AttentionTrace, kind: str, layer: int) -> bool:
    try:
        trace.layer_index(kind, layer)
    except AttnlabError:
        return False
    return True


def _note(text: str, name: str) -> Div:
    div = Div(text=f"<p class='attn-compare-note'>{html.escape(text)}</p>", width=300, name=f"compare-note-{name}")
    return use_fonts(div)
