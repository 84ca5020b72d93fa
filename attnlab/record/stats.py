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

Heads are pooled by their index in the model, so traces that recorded different heads (or
layers, or kinds) of one model pool each head over the traces that have it, and `rows` says how
many that was. Traces of different models are refused: their head 0s are different heads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.record.trace import EOS, KINDS, AttentionTrace

COLUMNS = ("entropy", "distance", "self", "prev", "next", "first", "eos", "max", "diagonal")
# What `head_pattern` may call a head, in the order it looks: a weight share on one kind of key,
# then the shape of its rows.
PATTERNS = ("prev", "self", "next", "diagonal", "first", "eos", "peaked", "broad", "mixed")
SHARE = 0.5  # the share of a head's weight one kind of key must hold to name the head by it
LIFT = 0.4  # ... and how far that share must lie from an even spread's towards all of it
PEAKED, BROAD = 0.8, 0.3  # a row's largest weight, on average, above which a head reads one key; below, many


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


def _head_sums(trace: AttentionTrace) -> Iterator[tuple[str, int, int, np.ndarray, int]]:
    """(kind, layer, model head index, (len(COLUMNS),) sums over the query rows, number of rows)
    of each recorded head of one trace."""
    for kind in trace.kinds:
        keys = trace.labels(kind)[1]
        eos_keys = np.array([token == EOS for token in keys], dtype=np.float64)
        for layer in trace.layers[kind]:
            weights = trace.attention(kind, layer).astype(np.float64)
            heads = trace.heads if trace.heads is not None else range(weights.shape[0])
            for head, total in zip(heads, _row_sums(weights, eos_keys), strict=True):
                yield kind, layer, head, total, weights.shape[1]


def _chance_sums(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """{kind: (len(COLUMNS),) sums over the query rows} of a head that spreads each row evenly
    over the keys its mask allows: what a column reads by chance (on a 5-word sentence a third of
    the cells lie within one of the diagonal, and a decoder's first row can read only its first key)."""
    sums = {}
    for kind in trace.kinds:
        eos_keys = np.array([token == EOS for token in trace.labels(kind)[1]], dtype=np.float64)
        allowed = trace.mask(kind).astype(np.float64)
        sums[kind] = _row_sums((allowed / np.maximum(allowed.sum(-1, keepdims=True), 1.0))[None], eos_keys)[0]
    return sums


def check_trace(trace: Any, what: str) -> AttentionTrace:
    """`trace`, refused unless it is one: a Result (or None, the .trace of one not recorded)
    in its place was an AttributeError from deep inside."""
    if not isinstance(trace, AttentionTrace):
        raise AttnlabError(
            f"{what} is a {type(trace).__name__}, not an AttentionTrace "
            "(a Result holds one in .trace when made with record=True)"
        )
    return trace


def _check_one_model(traces: Sequence[AttentionTrace]) -> None:
    """The model's identity (weights hash, config) is the same in every trace."""
    first = traces[0].model
    for n, trace in enumerate(traces[1:], 2):
        if any(trace.model.get(key) != first.get(key) for key in ("weights_sha256", "config")):
            raise AttnlabError(
                f"trace {n} was recorded from another model than trace 1 (weights "
                f"{trace.model.get('weights_sha256')} vs {first.get('weights_sha256')}): "
                "head statistics pool the heads of one model"
            )


def sentence_stats(trace: AttentionTrace) -> list[dict]:
    """One row per (kind, layer, head) of one trace: the columns above averaged over its query
    rows, plus `kind`, `layer`, `head`, `queries` (rows), `keys` and `chance` (each column as an
    even spread over the allowed keys would read it: `head_pattern`'s yardstick)."""
    check_trace(trace, "the trace")
    table, even = [], _chance_sums(trace)
    for kind, layer, head, total, n_rows in _head_sums(trace):
        row = {"kind": kind, "layer": layer, "head": head, "queries": n_rows, "keys": len(trace.labels(kind)[1])}
        row.update({name: float(v) for name, v in zip(COLUMNS, total / max(n_rows, 1), strict=True)})
        row["chance"] = {name: float(v) for name, v in zip(COLUMNS, even[kind] / max(n_rows, 1), strict=True)}
        table.append(row)
    return table


def head_stats(traces: AttentionTrace | Iterable[AttentionTrace]) -> list[dict]:
    """One row per (kind, layer, head) recorded in any of the traces, in the model's order: the
    columns above plus `kind`, `layer`, `head`, `rows` (the query rows pooled for that head).
    No traces at all is one line (an empty table, without a word, before)."""
    if isinstance(traces, str) or not isinstance(traces, AttentionTrace | Iterable):
        raise AttnlabError(f"expected an AttentionTrace or a list of them, got {type(traces).__name__}")
    traces = [traces] if isinstance(traces, AttentionTrace) else list(traces)
    traces = [check_trace(trace, f"trace {n}") for n, trace in enumerate(traces, 1)]
    if not traces:
        raise AttnlabError("head_stats needs at least one trace: none given")
    _check_one_model(traces)
    sums: dict[tuple[str, int, int], np.ndarray] = {}
    chance: dict[tuple[str, int, int], np.ndarray] = {}
    rows: dict[tuple[str, int, int], int] = {}
    for trace in traces:
        even = _chance_sums(trace)
        for kind, layer, head, total, n_rows in _head_sums(trace):
            key = (kind, layer, head)
            sums[key] = sums.get(key, 0.0) + total
            chance[key] = chance.get(key, 0.0) + even[kind]
            rows[key] = rows.get(key, 0) + n_rows
    table = []
    for key in sorted(sums, key=lambda key: (KINDS.index(key[0]), *key[1:])):
        row = dict(zip(("kind", "layer", "head"), key, strict=True), rows=rows[key])
        row.update({name: float(v) for name, v in zip(COLUMNS, sums[key] / max(rows[key], 1), strict=True)})
        row["chance"] = {name: float(v) for name, v in zip(COLUMNS, chance[key] / max(rows[key], 1), strict=True)}
        table.append(row)
    return table


def head_pattern(row: dict[str, Any]) -> tuple[str, float]:
    """The plainest description a `head_stats` (or `sentence_stats`) row supports, as (one of
    `PATTERNS`, the number that shows it), for a reader who meets a head for the first time.

    A self-attention head is named by the offset where at least half (`SHARE`) of its weight
    lies: the previous, its own or the next position (Voita et al. (2019)'s "positional" heads);
    an encoder–decoder head by the length-scaled diagonal (a monotone alignment). Either may park
    its weight on the first key or on </s> (often a head with nothing to do: Clark et al., 2019).
    That share must also lie `LIFT` of the way from what an even spread over the allowed keys
    would put there (the row's "chance", from `head_stats`) to all of it: on a 5-word sentence an
    even spread puts half its weight within one of the diagonal, and 10 of 12 heads read as
    aligners. Otherwise the shape of its rows: "peaked" when its largest weight averages over
    `PEAKED` (one key, chosen by content), "broad" under `BROAD`, "mixed" between."""
    offsets = ("diagonal",) if row["kind"] == "cross" else ("prev", "self", "next")
    chance = row.get("chance") or {}

    def lifted(name: str) -> bool:
        even = min(chance.get(name, 0.0), 1.0 - 1e-9)
        return (row[name] - even) / (1.0 - even) >= LIFT

    named = [(row[name], name) for name in (*offsets, "first", "eos") if row[name] >= SHARE and lifted(name)]
    if named:
        share, name = max(named)
        return name, share
    peak = row["max"]
    return ("peaked" if peak >= PEAKED else "broad" if peak <= BROAD else "mixed"), peak
