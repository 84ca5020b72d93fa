"""Attention rollout as a heatmap: for one kind and layer, how much of each input token reaches
each query position through every layer below it (`attnlab.record.rollout`), on the same axes as
a head's map. Its colours run to the map's own largest share: shares spread over many tokens as
they roll up, and on the heads' fixed 0..1 scale an upper layer's flow was near white.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from bokeh.plotting import figure

from attnlab.record.rollout import RESIDUAL, rollout
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace
from attnlab.viz.axes import cell_px
from attnlab.viz.cells import TITLE_MIN_PX
from attnlab.viz.colors import color_scale
from attnlab.viz.head import matrix_figure
from attnlab.viz.labels import piece_label, spelled, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.table import MOST, check_table_size, html_table, masked_cells
from attnlab.viz.words import kind_title, say


def rollout_figure(
    trace: AttentionTrace,
    kind: str,
    layer: int = -1,
    *,
    residual: float = RESIDUAL,
    budget: int = 560,
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
    fit: bool = False,
    vmax: float | None = None,
) -> figure:
    """The rollout of `kind` up to `layer` (negative: from the top): rows are that layer's query
    positions, columns the input tokens (the source for "encoder" and "cross", the decoder's input
    for "decoder"); the causal mask's forbidden cells hatched. `title` (None: its own) and `name`
    (None: "rollout-KIND") as the Compare view sets them; `words` replaces any of `viz.words.WORDS`
    ("rollout.*", the hover's "head.*"); with `fit` it narrows with the window (`matrix_figure`);
    `vmax` tops the colour scale (None: the largest share), so that two rollouts side by side share one."""
    check_options(title=title, budget=budget)  # (before the cells are sized by `budget`)
    said = say(words)
    q_labels, k_labels = map(spelled, check_trace(trace, "the trace").labels(kind))
    index, flow, allowed = _flow(trace, kind, layer, residual)
    # its own title wrapped to the map's cells, as the timeline's difference does: on one line the
    # Spanish one stretched the cells, and a 1024 px window hid the last two keys
    own = said["rollout.title"].format(kind_title=kind_title(kind, said), layer=index)
    cells = int(len(k_labels) * cell_px(len(k_labels), budget)) + 50  # (`update_matrix` adds 40 to a title line)
    return matrix_figure(  # matrix_figure sets the fonts
        flow, q_labels, k_labels, allowed=allowed, vmax=color_scale(flow, vmax),
        title=title or wrap_title(own, max(cells, TITLE_MIN_PX)), budget=budget,
        value_name=said["rollout.share"], name=name or f"rollout-{kind}",
        axis_labels=(said["rollout.input"], said["head.query"]), words=said, fit=fit,
    )  # fmt: skip


def rollout_table(
    trace: AttentionTrace,
    kind: str,
    layer: int = -1,
    *,
    residual: float = RESIDUAL,
    words: Mapping[str, str] | None = None,
    most: int = MOST,
) -> str:
    """The rollout `rollout_figure` draws, as a `<table class='attn-weights'>` (`viz.table`): a row
    a query position, a column an input token, each cell its share to three decimals, the causal
    mask's "—"; what a screen reader can read of the map. A side longer than `most` pieces is a
    one-line error."""
    said = say(words)
    q_labels, k_labels = map(spelled, check_trace(trace, "the trace").labels(kind))
    check_table_size(len(q_labels), len(k_labels), most)
    index, flow, allowed = _flow(trace, kind, layer, residual)
    return html_table(
        said["rollout.title"].format(kind_title=kind_title(kind, said), layer=index),
        f"{said['head.query']} \\ {said['rollout.input']}",
        [piece_label(k, None) for k in k_labels],
        [piece_label(q, None) for q in q_labels],
        masked_cells(flow, allowed, said),
    )


def _flow(trace: AttentionTrace, kind: str, layer: int, residual: float) -> tuple[int, np.ndarray, np.ndarray | None]:
    """The layer's index (from the bottom), its rollout and the mask it keeps (`rolled_mask`)."""
    index = trace.layer_index(kind, layer)
    return index, rollout(trace, kind, residual)[index], rolled_mask(trace, kind)


def rolled_mask(trace: AttentionTrace, kind: str) -> np.ndarray | None:
    """The cells rolled-up self-attention can reach: the decoder's causal triangle (no later
    position, through any layer), not one layer's mask. A restricted model's band widens by r a
    layer as it rolls up; hatched with the band, shares of up to 0.08 were called "weight 0"."""
    if kind != "decoder":
        return None
    return np.tril(np.ones(trace.mask(kind).shape, dtype=bool))
