"""The circuit of one change (Wang et al., 2022; Conmy et al., 2023): the few heads that carry most of
what a changed word does to the output, and where each one's effect goes, as a graph.

Path patching (`attnlab.record.paths`) splits one sender's share of the clean/corrupted
difference into its direct path and its paths through each later head or feed-forward layer. A
circuit starts from the heads that move most (`senders`, by their total share) and keeps the
paths that carry at least `threshold` of the difference: edges from a node to the output (its
direct share) and from a node to a receiver (the share that travels through it, and on from it by
any path). Every receiver such an edge reaches, head or feed-forward layer, is then followed the
same way (patched alone, its own paths split), until no new node is reached or `most` nodes have
been followed, so that the graph reads from the source word's heads up to the output. Each node's
edges split what patching that node alone moves: an edge into a node and the edges out of it are
shares of the same difference, not of each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.record.ablation import ablate
from attnlab.record.patching import HeadPatching, trace_pair
from attnlab.record.paths import Head, Node, PathPatching, pair_path_senders
from attnlab.record.trace import AttentionTrace

OUTPUT = "output"  # the node every direct edge ends at
MOST = 16  # nodes a circuit follows at most: past that it is a tangle, not a circuit


@dataclass
class Circuit:
    """The paths that carry a change, each as (from, to, share of the difference); the largest first."""

    edges: list[tuple[Node, Any, float]]  # from a head or ("ffn", side, layer); to one, or OUTPUT
    senders: list[Head]  # the heads it starts from, the largest |total share| first
    total: HeadPatching  # every head's total share (activation patching)
    direct: HeadPatching  # every head's direct share
    threshold: float  # the smallest |share| an edge has
    shares: dict[Any, tuple[float, float]] = field(default_factory=dict)  # each followed node's (total, direct)

    @property
    def nodes(self) -> list[Any]:
        """Every node an edge touches, senders first, OUTPUT last (always: with no edge, alone). A
        sender whose paths all fell under the threshold is none: it stays in `senders` and `shares`."""
        touched = {node for start, end, _ in self.edges for node in (start, end)}
        seen = dict.fromkeys(sender for sender in self.senders if sender in touched)
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
    most: int = MOST,
) -> Circuit:
    """The circuit between the trace's sentence (clean) and `corrupted`, on the output the trace
    shows, with the heads that were off when it was recorded off again."""
    ids = trace_pair(model, trace, corrupted, "circuit")
    with ablate(model.model, trace.heads_off):
        circuit = pair_circuit(model.model, *ids, positions, direction, senders, threshold, most)
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
    most: int = MOST,
) -> Circuit:
    """The `senders` heads of largest |total share| between two sources' ids, on `target`'s ids,
    their paths of at least `threshold` (a share of the difference), and those of every node the
    paths reach, up to `most` nodes followed; one path patching, a round for each step of new nodes."""
    if isinstance(senders, bool) or not isinstance(senders, int) or senders < 1:
        raise AttnlabError(
            f"a circuit follows at least one sender head; senders must be a whole number ≥ 1, got {senders!r}"
        )
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < 1:
        raise AttnlabError(
            f"threshold is the smallest share of the difference an edge keeps, in (0, 1); got {threshold!r}"
        )
    if isinstance(most, bool) or not isinstance(most, int) or most < senders:
        raise AttnlabError(
            f"most is how many nodes a circuit follows at most, at least its {senders} senders; got {most!r}"
        )
    circuit = Circuit([], [], None, None, float(threshold))  # (the grids: from the first round)

    def follow(found: list[PathPatching]) -> list[Node]:
        """Keep each sender's paths of at least `threshold`; the parts they reach are the next senders."""
        circuit.senders = circuit.senders or [paths.sender for paths in found]  # (the first round: the heads)
        for paths in found:
            circuit.shares[paths.sender] = (paths.sender_total, paths.sender_direct)
            circuit.edges += [(paths.sender, end, share) for end, share in _edges(paths) if abs(share) >= threshold]
        reached = dict.fromkeys(end for _, end, _ in circuit.edges if end != OUTPUT and end not in circuit.shares)
        return list(reached)[: most - len(circuit.shares)]

    first, *_ = pair_path_senders(net, clean, corrupted, target, positions, direction, senders=senders, follow=follow)
    circuit.total, circuit.direct = first.total, first.direct
    circuit.edges.sort(key=lambda edge: -abs(edge[2]))
    return circuit


def _edges(paths: PathPatching) -> list[tuple[Any, float]]:
    """A sender's paths: to the output (its direct share), and through each receiver."""
    return [(OUTPUT, paths.sender_direct), *paths.through()]
