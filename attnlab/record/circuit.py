"""The circuit of one change (Wang et al., 2022; Conmy et al., 2023): the few heads that carry most of
what a changed word does to the output, and where each one's effect goes, as a graph.

Path patching (`attnlab.record.paths`) splits one sender head's share of the clean/corrupted
difference into its direct path and its paths through each later head or feed-forward layer. A
circuit does that for the heads that move most (`senders`, by their total share) and keeps the
paths that carry at least `threshold` of the difference: edges from a head to the output (its
direct share) and from a head to a receiver (the share that travels through it, and on from it by
any path). Receivers that are themselves senders pass their share on by their own edges, so the
graph reads from the source word's heads up to the output; a feed-forward layer has no edges of
its own (it is a receiver only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.record.ablation import ablate, trace_heads_off
from attnlab.record.patching import HeadPatching, trace_pair
from attnlab.record.paths import SIDES, Head, pair_path_senders
from attnlab.record.trace import KINDS, AttentionTrace

OUTPUT = "output"  # the node every direct edge ends at


@dataclass
class Circuit:
    """The paths that carry a change, each as (from, to, share of the difference); the largest first."""

    edges: list[tuple[Head, Any, float]]  # to: a head, ("ffn", side, layer), or OUTPUT
    senders: list[Head]  # the heads whose paths were measured, the largest total share first
    total: HeadPatching  # every head's total share (activation patching), for the nodes' size
    direct: HeadPatching  # every head's direct share
    threshold: float  # the smallest |share| an edge has

    @property
    def nodes(self) -> list[Any]:
        """Every node an edge touches, senders first, OUTPUT last."""
        seen = dict.fromkeys(self.senders)
        for start, end, _ in self.edges:
            seen.update(dict.fromkeys(n for n in (start, end) if n != OUTPUT))
        return [*seen, OUTPUT]


def trace_circuit(
    model: Any,
    trace: AttentionTrace,
    corrupted: str,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    senders: int = 4,
    threshold: float = 0.05,
) -> Circuit:
    """The circuit between the trace's sentence (clean) and `corrupted`, on the output the trace
    shows, with the heads that were off when it was recorded off again."""
    ids = trace_pair(model, trace, corrupted, "circuit")
    with ablate(model.model, trace_heads_off(trace)):
        circuit = pair_circuit(model.model, *ids, positions, direction, senders, threshold)
    circuit.total.pieces = circuit.direct.pieces = list(trace.tgt_tokens)
    return circuit


def pair_circuit(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    senders: int = 4,
    threshold: float = 0.05,
) -> Circuit:
    """The `senders` heads of largest |total share| between two sources' ids, on `target`'s ids,
    and their paths of at least `threshold` (a share of the difference); one path patching per
    sender."""
    if isinstance(senders, bool) or not isinstance(senders, int) or senders < 1:
        raise AttnlabError(
            f"a circuit follows at least one sender head; senders must be a whole number ≥ 1, got {senders!r}"
        )
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold < 1:
        raise AttnlabError(
            f"threshold is the smallest share of the difference an edge keeps, in [0, 1); got {threshold!r}"
        )
    every = pair_path_senders(net, clean, corrupted, target, positions, direction, senders=senders)
    edges: list[tuple[Head, Any, float]] = []
    for paths in every:
        sender = paths.sender
        at = (KINDS.index(sender[0]), sender[1], sender[2])
        edges.append((sender, OUTPUT, float(paths.direct.share[at])))
        for kind, layer, head in paths.receivers.order():
            edges.append((sender, (kind, layer, head), float(paths.receivers.share[KINDS.index(kind), layer, head])))
        for s, side in enumerate(SIDES):
            for layer, share in enumerate(paths.ffn[s]):
                if share == share:  # (NaN: not downstream)
                    edges.append((sender, ("ffn", side, layer), float(share)))
    kept = sorted((e for e in edges if abs(e[2]) >= threshold), key=lambda e: -abs(e[2]))
    first = every[0]
    return Circuit(kept, [p.sender for p in every], first.total, first.direct, float(threshold))
