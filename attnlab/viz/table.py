"""One head's weights as an HTML table: what a screen reader can read of a heatmap (a canvas says
nothing), and the exact values a hover gives one at a time. A row a query piece, a column a key
piece, each cell its weight to three decimals; a cell the mask forbids reads "—" and names why.
Headers are `<th scope>` cells, so that a reader moving through the table hears which query and
which key each number belongs to. `html_table` builds the rollout's and the logit lens's tables too
(`viz.rollout_table`, `viz.lens_table`).
"""

from __future__ import annotations

import html
import numbers
from collections.abc import Mapping

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace, check_flag
from attnlab.viz.head import head_title
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.selection import head_map
from attnlab.viz.words import say

MOST = 80  # pieces a side: 6,400 cells read one by one is already more than a reader wants
# How a page shows it (the explorer's pane, a notebook's): its header row and column in view
STYLE = """
table.attn-weights { border-collapse: collapse; font-size: 12px; }
.attn-weights caption { text-align: left; font-weight: bold; padding: 4px 0; }
.attn-weights th, .attn-weights td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
.attn-weights thead th { position: sticky; top: 0; background: #f5f5f5; }
.attn-weights tbody th { position: sticky; left: 0; background: #f5f5f5; text-align: left; }
"""


def weights_table(
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    *,
    mask: bool = True,
    words: Mapping[str, str] | None = None,
    most: int = MOST,
) -> str:
    """The weights of `head` of `layer` of `kind` in `trace` as a `<table class='attn-weights'>`,
    captioned with the head's title; `words` as in `viz.heatmap` ("head.*"). A side longer than
    `most` pieces is a one-line error (the trace's file has every number)."""
    q_labels, k_labels = map(spelled, check_trace(trace, "the trace").labels(kind))
    check_table_size(len(q_labels), len(k_labels), most)
    weights, allowed = head_map(trace, kind, layer, head), trace.mask(kind)
    said = say(words)
    return html_table(
        head_title(trace, kind, layer, head, words),
        f"{said['head.query']} \\ {said['head.key']}",
        [piece_label(k, None) for k in k_labels],
        [piece_label(q, None) for q in q_labels],
        masked_cells(weights, allowed if check_flag(mask, "mask") else None, said),
    )


def check_table_size(rows: int, columns: int, most: int) -> None:
    """A table of `rows` × `columns` cells, or a one-line error past `most` a side."""
    if isinstance(most, bool) or not isinstance(most, numbers.Integral) or most < 1:  # (-1 refused a 5 × 5 table)
        raise AttnlabError(f"most must be a whole number of pieces ≥ 1, got {most!r}")
    if max(rows, columns) > most:
        raise AttnlabError(
            f"a table of {rows} × {columns} weights is more than {most} pieces a side; export the trace for every number"
        )


def masked_cells(values: np.ndarray, allowed: np.ndarray | None, said: Mapping[str, str]) -> list[list[str]]:
    """The `<td>`s of a map of weights or shares, to three decimals; where `allowed` is False,
    "—" named as masked (None: no mask shown)."""
    forbidden = html.escape(said["head.masked"])
    return [
        [
            f"<td title='{forbidden}' aria-label='{forbidden}'>—</td>"
            if allowed is not None and not allowed[i, j]
            else f"<td>{value:.3f}</td>"
            for j, value in enumerate(row)
        ]
        for i, row in enumerate(values)
    ]


def html_table(caption: str, corner: str, columns: list[str], rows: list[str], cells: list[list[str]]) -> str:
    """A `<table class='attn-weights'>` of `cells` (each row's `<td>`s, ready made), headed by the
    plain texts `columns` and `rows` (escaped here) with `corner` above the rows' headers."""
    head_row = "".join(f"<th scope='col'>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        f"<tr><th scope='row'>{html.escape(row)}</th>{''.join(row_cells)}</tr>"
        for row, row_cells in zip(rows, cells, strict=True)
    )
    return (
        f"<table class='attn-weights'><caption>{html.escape(caption)}</caption>"
        f"<thead><tr><th scope='col'>{html.escape(corner)}</th>{head_row}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )
