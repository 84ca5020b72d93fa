"""The masks and Eq. (1) step by step: which cells a kind may attend to, and for one query row
the scores QKᵀ/√d_k, the masked scores (−∞ shown as such), the softmax and the weighted sum of
the values, all on one key axis. The numbers come from `attnlab.record.equation`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from bokeh.layouts import column, row
from bokeh.models import (
    ColorBar,
    ColumnDataSource,
    HoverTool,
    Range1d,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.axes import label_room, token_axis
from attnlab.viz.cells import FIT_PX
from attnlab.viz.colors import DIFF_PALETTE, colorize
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import matrix_figure
from attnlab.viz.labels import TITLE_LINE_PX, piece_label, spelled, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.words import kind_name, say

WRAP = ":host { flex-wrap: wrap; }"  # a bokeh row whose figures go under each other when they do not fit


def mask_figure(trace: AttentionTrace, kind: str, budget: int = 360, words: Mapping[str, str] | None = None) -> figure:
    """The mask that shaped `kind`: allowed cells white, forbidden ones hatched; `words` replaces
    any of `viz.words.WORDS` ("mask.*", and the hover's "head.*")."""
    check_options(budget=budget)
    said = say(words)
    q_labels, k_labels = map(spelled, check_trace(trace, "the trace").labels(kind))
    allowed = trace.mask(kind)
    padded = bool((~allowed).all(0).any())  # a key no query may see (one sentence: none)
    what = said["mask.causal" if kind == "decoder" else "mask.padded" if padded else "mask.padding"]
    window = None if kind == "cross" else trace.model.get("config", {}).get("attn_window")
    if window is not None and window < allowed.shape[1] - 1:  # restricted attention's band (Table 1), in the
        what += f" · {'i − j' if kind == 'decoder' else '|i − j|'} ≤ {window}"  # paper's notation, every language
    fig = matrix_figure(  # matrix_figure sets the fonts
        allowed.astype(np.float32), q_labels, k_labels, allowed=allowed, vmax=1.0, palette=("#ffffff", "#ffffff"),
        title=said["mask.title"].format(kind=kind_name(kind, said), what=what), budget=budget,
        value_name=said["mask.allowed"], name=f"mask-{kind}", words=said,
    )  # fmt: skip
    fig.select_one(ColorBar).visible = False  # white or hatched: a 0..1 bar of white said nothing
    return fig


def computation_figure(
    parts: dict[str, np.ndarray],
    query: int,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    title: str | None = "",
    words: Mapping[str, str] | None = None,
) -> Any:
    """Eq. (1) for one query row: QKᵀ/√d_k, the masked scores (−∞ shown as such), the softmax,
    and the weighted sum of the value vectors, all on one key axis.

    `parts` holds (q, k) `scores`, `allowed`, `weights` and (k, d_v) `v`, (q, d_v) `out` (see
    `attnlab.record.equation.attention_parts`). `words` replaces any of `viz.words.WORDS`
    ("eq1.*", and the hover's "head.*"); the paper's notation is the same in every language.
    `title` (None: none) leads the first figure's title.
    """
    check_options(title=title)
    title = title or ""
    said = say(words)
    if not all(name in parts for name in ("scores", "allowed", "weights", "v", "out")):  # ({} was a KeyError)
        raise AttnlabError(
            "computation_figure reads the scores, allowed, weights, v and out of attnlab.record.equation.attention_parts"
        )
    q, k = np.shape(parts["scores"])  # checked first: 99 was an IndexError, and labels a bokeh warning
    if (len(q_labels), len(k_labels)) != (q, k):
        raise AttnlabError(
            f"these parts are of a {q}×{k} map: they need {q} query and {k} key labels, "
            f"got {len(q_labels)} and {len(k_labels)}"
        )
    if isinstance(query, bool) or not isinstance(query, numbers.Integral) or not -q <= query < q:
        raise AttnlabError(f"query {query!r} is not a row of this {q}×{k} map (0 to {q - 1}, or -1 for the last)")
    scores, allowed, weights = parts["scores"][query], parts["allowed"][query], parts["weights"][query]
    q_labels, k_labels = spelled(q_labels), spelled(k_labels)  # (a trace's own pieces, as the other views name them)
    k = len(k_labels)
    width = int(np.clip(k * 26, 360, 900)) + 80
    keys = np.arange(k) + 0.5
    x_range = Range1d(0, k)
    # every raw score, the masked keys' too: the first chart shows them (a decoder query's future keys,
    # 3.55 where the allowed ones reached 0.26, ran past the top), and the second shares its range
    finite = scores[np.isfinite(scores)] if np.isfinite(scores).any() else np.zeros(1)
    low, high = float(min(finite.min(), 0.0)), float(max(finite.max(), 0.0))
    pad = 0.1 * (high - low or 1.0)

    def bars(values: np.ndarray, name: str, color: str, y_range: Range1d, heading: str) -> figure:
        heading = wrap_title(heading, width - 60)  # less the value axis
        fig = figure(
            width=width,
            # the bars' own 90 px, beside the keys' upright labels and the title's lines
            height=130 + label_room(k_labels) + TITLE_LINE_PX * heading.count("\n"),
            x_range=x_range,
            y_range=y_range,
            tools="hover,save",
            toolbar_location=None,
            title=heading,
            name=name,
            # narrower where the window has no room: up to 980 px for a long sentence, and the
            # bars read as well at 660
            sizing_mode="stretch_width",
            max_width=width,
            min_width=min(width, FIT_PX),
        )
        source = ColumnDataSource(
            {
                "x": keys,
                "top": values,
                "key": [piece_label(s, None) for s in k_labels],
                "text": [f"{v:.3f}" for v in values],
            }
        )
        fig.vbar(x="x", top="top", width=0.8, color=color, source=source)
        fig.select_one(HoverTool).tooltips = [(said["head.key"], "@key"), (said["eq1.value"], "@text")]
        token_axis(fig.xaxis[0], k_labels, width - 80, flip=False)
        fig.xaxis.major_label_orientation = math.pi / 2
        fig.xgrid.visible = False
        fig.yaxis.ticker.desired_num_ticks = 4
        return fig

    score_range = Range1d(low - pad, high + pad)
    raw = bars(
        scores,
        "eq1-scores",
        "#6b6ecf",
        score_range,
        said["eq1.scores"].format(title=title, query=query, label=piece_label(q_labels[query])),
    )
    masked_values = np.where(allowed, scores, np.nan)
    masked = bars(
        np.nan_to_num(masked_values, nan=0.0),
        "eq1-masked",
        "#6b6ecf",
        score_range,
        said["eq1.masked"],
    )
    blocked = np.flatnonzero(~allowed)
    if blocked.size:
        masked.text(
            x=keys[blocked],
            y=[low - pad / 2] * blocked.size,
            text=["−∞"] * blocked.size,
            text_align="center",
            text_color="#d62728",
            text_font_size="12px",
        )
    soft = bars(
        weights,
        "eq1-softmax",
        "#2171b5",
        Range1d(0, max(1e-6, float(weights.max())) * 1.1),
        said["eq1.softmax"],
    )
    v = parts["v"]  # (k, d_v)
    contributions = weights[:, None] * v  # (k, d_v), rows sum to the output
    bound = float(np.abs(contributions).max()) or 1.0
    contrib = matrix_figure(
        contributions.T, [f"v[{d}]" for d in range(v.shape[1])], list(k_labels), vmin=-bound, vmax=bound,
        palette=DIFF_PALETTE, title=said["eq1.values"], budget=420, value_name="aⱼ·vⱼ", name="eq1-values",
        axis_labels=(said["eq1.key"], said["eq1.dimension"]), words=said,
    )  # fmt: skip
    out = parts["out"][query]  # (d_v,)
    bound_out = float(np.abs(out).max()) or 1.0
    result = matrix_figure(
        out[:, None], [f"v[{d}]" for d in range(out.size)], ["Σ"], vmin=-bound_out, vmax=bound_out,
        palette=DIFF_PALETTE, title=said["eq1.output"], budget=420, value_name=said["eq1.output"],
        name="eq1-output", axis_labels=("", ""), words=said,
    )  # fmt: skip
    result.width = 190
    # the output beside the values where both fit, else under them (side by side they ran 105 px
    # past a 1024 px window): a row that wraps, as wide as the window allows
    values = row(
        contrib, result, sizing_mode="stretch_width", max_width=contrib.width + result.width,
        stylesheets=[WRAP], name="eq1-values-row",
    )  # fmt: skip
    steps = column(
        raw, masked, soft, values, sizing_mode="stretch_width", max_width=max(width, values.max_width), name="eq1"
    )
    return use_fonts(steps, said)


def dot_product_figure(
    parts: dict[str, np.ndarray],
    query: int,
    key: int,
    q_labels: Sequence[str],
    k_labels: Sequence[str],
    title: str | None = "",
    words: Mapping[str, str] | None = None,
) -> Any:
    """One score of Eq. (1) taken apart (bertviz's neuron view): the query vector qᵢ and the key
    vector kⱼ of the head, dimension by dimension (each on its own colour scale: blue below 0, red
    above), and their products qᵢ_d·kⱼ_d/√d_k as bars, which sum to the score `scores[i, j]`. A
    score is high where the two vectors agree in sign on dimensions where both are large.

    `parts` as `computation_figure` reads them, with (q, d_k) `q` and (k, d_k) `k`; `query` and
    `key` are a row and a column of the map (a negative one counts from the last). `words`
    replaces any of `viz.words.WORDS` ("dot.*", "eq1.value"); `title` leads the figure's title."""
    check_options(title=title)
    said = say(words)
    if not all(name in parts for name in ("q", "k", "scores")):
        raise AttnlabError("dot_product_figure reads the q, k and scores of attnlab.record.equation.attention_parts")
    n_q, n_k = np.shape(parts["scores"])
    if (len(q_labels), len(k_labels)) != (n_q, n_k):
        raise AttnlabError(f"these parts are of a {n_q}×{n_k} map: they need {n_q} query and {n_k} key labels")
    for name, index, size in (("query", query, n_q), ("key", key, n_k)):
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not -size <= index < size:
            raise AttnlabError(f"{name} {index!r} is not in this {n_q}×{n_k} map (0 to {size - 1}, or -1 for the last)")
    query, key = int(query) % n_q, int(key) % n_k
    q, k = parts["q"][query], parts["k"][key]
    products = q * k / math.sqrt(q.size)
    q_label, k_label = (piece_label(spelled(labels)[i]) for labels, i in ((q_labels, query), (k_labels, key)))
    dims = np.arange(q.size) + 0.5
    width = int(np.clip(q.size * 12, 360, 900)) + 80
    x_range = Range1d(0, q.size)
    heading = wrap_title(  # for the narrowest it may be drawn (as Eq. (1)'s bars, it narrows to the window)
        said["dot.title"].format(title=title or "", i=query, q=q_label, j=key, k=k_label), min(width, FIT_PX) - 60
    )
    rows = [("q", f"q · {q_label}", q), ("k", f"k · {k_label}", k)]
    fits = {"sizing_mode": "stretch_width", "max_width": width, "min_width": min(width, FIT_PX)}
    strips = figure(
        width=width, height=110 + TITLE_LINE_PX * heading.count("\n"), x_range=x_range,
        y_range=[name for _, name, _ in reversed(rows)], tools="hover,save", toolbar_location=None,
        title=heading, name="dot-vectors", **fits,
    )  # fmt: skip
    for _, name, values in rows:
        bound = float(np.abs(values).max()) or 1.0  # each vector on its own scale: q and k differ in size
        source = ColumnDataSource({
            "x": dims, "y": [name] * q.size, "color": [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in
            colorize(values[None], -bound, bound, DIFF_PALETTE)[0]], "d": list(range(q.size)),
            "text": [f"{v:.3f}" for v in values],
        })  # fmt: skip
        strips.rect(x="x", y="y", width=1, height=0.9, fill_color="color", line_color=None, source=source)
    strips.select_one(HoverTool).tooltips = [(said["dot.dimension"], "@d"), (said["eq1.value"], "@text")]
    score = float(products.sum())
    bars = figure(
        width=width, height=170, x_range=x_range, tools="hover,save", toolbar_location=None, name="dot-products",
        title=said["dot.products"].format(score=score), **fits,
    )  # fmt: skip
    colors = [DIFF_PALETTE[-2] if p >= 0 else DIFF_PALETTE[1] for p in products]  # the strips' red and blue
    source = ColumnDataSource({"x": dims, "top": products, "color": colors, "d": list(range(q.size))})
    source.data["text"] = [f"{p:.3f}" for p in products]
    bars.vbar(x="x", top="top", width=0.8, color="color", source=source)
    bars.select_one(HoverTool).tooltips = [(said["dot.dimension"], "@d"), (said["eq1.value"], "@text")]
    for fig in (strips, bars):
        fig.xaxis.axis_label = said["dot.dimension"]
        fig.xgrid.visible = False
    strips.xaxis.visible = False
    return use_fonts(column(strips, bars, name="dot", sizing_mode="stretch_width", max_width=width), said)
