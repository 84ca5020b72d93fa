"""Head statistics: what each head tends to do, as numbers a table or scatter plot can show.

For every (kind, layer, head), averaged over the query rows of one trace, or over all rows of
many traces (each row counts once, so long sentences weigh more, as they hold more rows):

- entropy: of the row distribution, in nats (0 = one key; log(k) = uniform);
- distance: mean attended distance Σ_j w_ij |i - j|;
- self / prev / next: weight on key i, i-1, i+1 (the "positional heads");
- first / eos: weight on the first key and on </s> keys (the "no-op" sinks);
- max: the largest weight in the row (how peaked the head is);
- diagonal: weight within one key of the length-scaled diagonal j = i (k-1)/(q-1) (a monotone
  "alignment" head; for self-attention about self + prev + next).

`sentence_stats` gives the same columns for one trace alone (each sentence its own average), the
rows of a corpus profile (`attnlab.decode.profile`): the head_stats of many traces are the
row-weighted means of their sentence_stats.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from attnlab.record.trace import EOS, AttentionTrace

COLUMNS = ("entropy", "distance", "self", "prev", "next", "first", "eos", "max", "diagonal")


def _row_sums(weights: np.ndarray, eos_keys: np.ndarray) -> np.ndarray:
    """weights (heads, q, k) -> (heads, len(COLUMNS)) sums over the q rows."""
    heads, q_len, k_len = weights.shape
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(weights > 0, np.log(np.where(weights > 0, weights, 1.0)), 0.0)
    entropy = -(weights * logs).sum(-1)  # (heads, q)
    distance = (weights * np.abs(i - j)).sum(-1)

    def diagonal(offset: int) -> np.ndarray:
        return (weights * (j == i + offset)).sum(-1)

    scaled = i * (k_len - 1) / max(q_len - 1, 1)  # (q, 1): the diagonal from (0, 0) to (q-1, k-1)

    columns = [
        entropy,
        distance,
        diagonal(0),
        diagonal(-1),
        diagonal(1),
        weights[:, :, 0],
        (weights * eos_keys[None, None, :]).sum(-1),
        weights.max(-1),
        (weights * (np.abs(j - scaled) <= 1)).sum(-1),
    ]
    return np.stack([c.sum(-1) for c in columns], axis=-1)


def _layer_sums(trace: AttentionTrace) -> Iterator[tuple[str, int, np.ndarray, int]]:
    """(kind, layer, (heads, len(COLUMNS)) sums over the query rows, number of rows) of one trace."""
    for kind in trace.kinds:
        keys = trace.labels(kind)[1]
        eos_keys = np.array([token == EOS for token in keys], dtype=np.float64)
        for layer in trace.layers[kind]:
            weights = trace.attention(kind, layer).astype(np.float64)
            yield kind, layer, _row_sums(weights, eos_keys), weights.shape[1]


def sentence_stats(trace: AttentionTrace) -> list[dict]:
    """One row per (kind, layer, head) of one trace: the columns above averaged over its query
    rows, plus `kind`, `layer`, `head`, `queries` (rows) and `keys`."""
    table = []
    for kind, layer, total, n_rows in _layer_sums(trace):
        n_keys = len(trace.labels(kind)[1])
        for h, head in enumerate(trace.heads or range(total.shape[0])):
            row = {"kind": kind, "layer": layer, "head": head, "queries": n_rows, "keys": n_keys}
            row.update({name: float(v) for name, v in zip(COLUMNS, total[h] / max(n_rows, 1), strict=True)})
            table.append(row)
    return table


def head_stats(traces: AttentionTrace | Iterable[AttentionTrace]) -> list[dict]:
    """One row per (kind, layer, head): the columns above plus `kind`, `layer`, `head`, `rows`."""
    traces = [traces] if isinstance(traces, AttentionTrace) else list(traces)
    sums: dict[tuple[str, int], np.ndarray] = {}
    rows: dict[tuple[str, int], int] = {}
    for trace in traces:
        for kind, layer, total, n_rows in _layer_sums(trace):
            sums[(kind, layer)] = sums.get((kind, layer), 0.0) + total
            rows[(kind, layer)] = rows.get((kind, layer), 0) + n_rows
    table = []
    for (kind, layer), total in sums.items():
        head_ids = traces[0].heads or list(range(total.shape[0]))
        for h, head in enumerate(head_ids):
            values = total[h] / max(rows[(kind, layer)], 1)
            row = {"kind": kind, "layer": layer, "head": head, "rows": rows[(kind, layer)]}
            row.update({name: float(v) for name, v in zip(COLUMNS, values, strict=True)})
            table.append(row)
    return table
