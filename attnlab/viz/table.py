"""One head's weights as an HTML table: what a screen reader can read of a heatmap (a canvas says
nothing), and the exact values a hover gives one at a time. A row a query piece, a column a key
piece, each cell its weight to three decimals; a cell the mask forbids reads "—" and names why.
Headers are `<th scope>` cells, so that a reader moving through the table hears which query and
which key each number belongs to.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

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
    if max(len(q_labels), len(k_labels)) > most:
        raise AttnlabError(
            f"a table of {len(q_labels)} × {len(k_labels)} weights is more than {most} pieces a side; "
            "export the trace for every number"
        )
    weights, allowed = head_map(trace, kind, layer, head), trace.mask(kind)
    masked = check_flag(mask, "mask")
    said = say(words)
    corner = f"{said['head.query']} \\ {said['head.key']}"
    head_row = "".join(f"<th scope='col'>{html.escape(piece_label(k, None))}</th>" for k in k_labels)
    forbidden = html.escape(said["head.masked"])
    rows = []
    for i, query in enumerate(q_labels):
        cells = [
            f"<td title='{forbidden}' aria-label='{forbidden}'>—</td>"
            if masked and not allowed[i, j]
            else f"<td>{weights[i, j]:.3f}</td>"
            for j in range(len(k_labels))
        ]
        rows.append(f"<tr><th scope='row'>{html.escape(piece_label(query, None))}</th>{''.join(cells)}</tr>")
    caption = html.escape(head_title(trace, kind, layer, head, words))
    return (
        f"<table class='attn-weights'><caption>{caption}</caption>"
        f"<thead><tr><th scope='col'>{html.escape(corner)}</th>{head_row}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
