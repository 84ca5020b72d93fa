"""Path patching (Wang et al., 2022, "Interpretability in the wild"; Goldowsky-Dill et al., 2023):
which way a head's effect travels to the output.

Activation patching (`attnlab.record.patching`) says how much of the clean/corrupted difference a
head carries: its *total* effect, with everything after it recomputed. That total mixes two kinds
of path. Along the *direct* one the head's output is added to the residual stream and read, through
the LayerNorms that follow (§3.1), by the output projection. Along the *indirect* ones a later head
or feed-forward layer reads the change and writes something of its own. Path patching separates
them by freezing: the head is patched as before, but every other head and every feed-forward
layer gives the output it gave in the base run, so the change reaches the logits through the
residual stream and the LayerNorms alone (the LayerNorms are recomputed: they are part of the
path). What that moves is the head's direct share; the total minus it, the indirect share.

An encoder head has no direct path: the decoder reads the encoder only through the cross heads,
which are frozen, so its direct share is 0 (to rounding, ~1e-7) and all its effect is indirect.

For one *sender*, a head or a feed-forward layer, each path through a later component (a
*receiver*: a head that reads the residual stream the sender writes to, or a feed-forward layer)
is measured in two runs, as Wang et al. do. The sender's direct run (everything else frozen) gives
what each receiver would compute from its input changed by the sender alone; then the base run is
repeated with only that receiver's output replaced by it, everything after the receiver
recomputed. The share that moves is the sender's effect through that receiver and on from it by
any path. To first order the direct share and the receivers' shares add up to the sender's total
(every path from it either goes straight to the output or has a first receiver); what is left
(`rest`) is what receivers do only together, and non-linearity.

Every run is one row of a batch, through the hook points activation patching uses for the heads
(`HEAD_PATCHES`) and forward hooks on the feed-forward layers, put on a model once and left
there; they read what this thread attached, so a model shared by a server's sessions is patched for
one caller only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_PATCHES, attached
from attnlab.model.multihead import MultiHeadAttention
from attnlab.model.transformer import FeedForward
from attnlab.record.ablation import ablate
from attnlab.record.components import (
    FFN_OUTPUTS,
    NODE_SHAPE,
    SIDES,
    Node,
    downstream,
    ffn_modules,
    ffn_site,
    install,
    is_node,
    module_of,
    node_name,
)
from attnlab.record.importance import BATCH_TOKENS, quantized, token_log_probs
from attnlab.record.patching import (
    HEADS,
    HeadPatching,
    Run,
    Sites,
    kept_run,
    pair_patching,
    pair_tensors,
    patched_runs,
    target_positions,
    trace_pair,
)
from attnlab.record.recorder import hook_point
from attnlab.record.trace import KINDS, AttentionTrace

Head = tuple[str, int, int]  # (kind, layer, head), as `HeadPatching.order` names heads


@dataclass
class PathPatching:
    """Each head's share of the clean/corrupted difference split by path; the arrays of `total`,
    `direct` and `indirect` are (kinds, layers, heads) as in head patching."""

    total: HeadPatching  # activation patching: the head alone, everything after it recomputed
    direct: HeadPatching  # the head alone, every other head and feed-forward layer frozen
    sender: Node | None = None  # the head or feed-forward layer whose receivers were measured
    # the share of the sender's effect through each later head alone (NaN: not one), and through
    # each feed-forward layer, (2 sides, layers)
    receivers: HeadPatching | None = None
    ffn: np.ndarray | None = None
    sender_total: float = float("nan")  # the sender's own total share (for a head, its cell of `total`)
    sender_direct: float = float("nan")  # and its direct share

    @property
    def indirect(self) -> HeadPatching:
        """The total minus the direct share: what each head moves through later heads and layers."""
        return _like(self.total, self.total.share - self.direct.share, self.total.nats - self.direct.nats)

    @property
    def rest(self) -> float:
        """The sender's total share less its direct share and every receiver's: what receivers do
        together, and non-linearity (NaN: no sender)."""
        if self.sender is None or self.receivers is None or self.ffn is None:
            return float("nan")
        through = np.nansum(self.receivers.share) + np.nansum(self.ffn)
        return float(self.sender_total - self.sender_direct - through)

    def through(self) -> list[tuple[Node, float]]:
        """The sender's receivers as (node, share), the largest |share| first: a head (kind, layer,
        head) or a feed-forward layer ("ffn", side, layer); `node_name` writes either."""
        if self.receivers is None or self.ffn is None:
            return []
        found: list[tuple[Node, float]] = [
            (head, float(self.receivers.share[KINDS.index(head[0]), head[1], head[2]]))
            for head in self.receivers.order()
        ]
        found += [
            (("ffn", side, layer), float(v))
            for s, side in enumerate(SIDES)
            for layer, v in enumerate(self.ffn[s])
            if v == v
        ]
        return sorted(found, key=lambda pair: -abs(pair[1]))


def trace_path_patching(
    model: Any,
    trace: AttentionTrace,
    corrupted: str,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    sender: Node | None = None,
) -> PathPatching:
    """Path patching between the trace's sentence (clean) and `corrupted`, on the output the trace
    shows, with the heads that were off when it was recorded off again in every run."""
    ids = trace_pair(model, trace, corrupted, "paths")
    with ablate(model.model, trace.heads_off):
        result = pair_path_patching(model.model, *ids, positions, direction, sender=sender)
    for part in (result.total, result.direct, result.receivers):
        if part is not None:
            part.pieces = list(trace.tgt_tokens)
    return result


def pair_path_patching(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
    sender: Node | None = None,
) -> PathPatching:
    """Every head's total and direct share between two sources' ids, on `target`'s ids (ending in
    </s>), and, for `sender`, each later component's share of its effect. Frozen runs are measured,
    never estimated: `method` is "activation" (the argument keeps the call shape of the other
    pair patchers, which `attnlab.decode.patching` runs over a corpus)."""
    chosen = [] if sender is None else [sender]
    return pair_path_senders(net, clean, corrupted, target, positions, direction, method, chosen)[0]


def pair_path_senders(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
    senders: Sequence[Node] | int = (),
    follow: Callable[[list[PathPatching]], Sequence[Node]] | None = None,
) -> list[PathPatching]:
    """`pair_path_patching` for several senders at once (heads, or feed-forward layers as ("ffn",
    side, layer)), or for the `senders` heads of largest |total share| when it is a number: one
    result per sender (one without a sender when there is none), the total and direct shares
    measured once for all. `follow`, given each round's results, names the next round's senders
    (none: the last round), which a circuit uses to follow the parts its paths reach."""
    if method != "activation":
        raise AttnlabError(f"path patching measures each frozen run; its method is activation, not {method!r}")
    for sender in [] if isinstance(senders, int) else senders:  # (a malformed one before any run)
        _check_sender_shape(sender)
    total = pair_patching(net, clean, corrupted, target, positions, direction)  # refuses what it must
    install(net)
    if isinstance(senders, int):
        senders = sorted(total.order(), key=lambda h: -abs(total.share[KINDS.index(h[0]), h[1], h[2]]))[:senders]
    for sender in senders:  # (refused before any run; a later round's senders as they are split)
        _check_sender(net, total, sender)
    chosen = target_positions(positions, len(target))
    patched = [m for m in net.attention_modules() if hook_point(m)[0] in total.patched]
    device = next(net.parameters()).device
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            (clean_logp, clean_kept), (corrupt_logp, corrupt_kept) = (
                kept_run(net, ids, target, chosen, device, COMPONENTS) for ids in (clean, corrupted)
            )
            base, kept, other = (
                (corrupted, corrupt_kept, clean_kept) if direction == "denoise" else (clean, clean_kept, corrupt_kept)
            )
            base_logp = corrupt_logp if direction == "denoise" else clean_logp
            run = Run(clean_logp, corrupt_logp, direction, chosen, [], [])  # (for its `share`)
            heads = [(m, h) for m in patched for h in range(net.config.n_heads)]
            *frozen, held = _frozen_runs(net, base, target, chosen, [*heads, None], kept, other, device)
            direct_nats = _grid(net, heads, [v - held for v in frozen])  # against a row with no sender,
            # run as the others are (the base run took the recorded Eq. (1)): no path moves 0 to rounding
            direct = _like(total, run.share(direct_nats), direct_nats)

            def split(sender: Node) -> PathPatching:
                _check_sender(net, total, sender)
                module = module_of(net, sender)
                index = sender[2] if isinstance(module, MultiHeadAttention) else 0
                heard: dict[Any, Tensor] = {}
                [alone] = _frozen_runs(net, base, target, chosen, [(module, index)], kept, other, device, heard)
                late = downstream(net, module)
                each = [(c, 0) if isinstance(c, FeedForward) else c for c in late]
                values = {**heard, module: other[module]}  # receivers: what they heard; the sender: the other run's
                logp = patched_runs(net, base, target, chosen, [*each, (module, index)], values, device, COMPONENTS)
                *logp, patched_alone = logp  # (the sender alone from the other run: its total)
                nats = {c: v - base_logp for c, v in zip(late, logp, strict=True)}
                later_heads = [c for c in late if isinstance(c, tuple)]
                receiver_nats = _grid(net, later_heads, [nats[c] for c in later_heads])
                ffn_nats = np.full((len(SIDES), net.config.n_layers), np.nan)
                for c in late:
                    if isinstance(c, FeedForward):
                        ffn_nats[ffn_site(net, c)] = nats[c]
                receivers = _like(total, run.share(receiver_nats), receiver_nats)
                shares = run.share(np.array([patched_alone - base_logp, alone - held]))
                return PathPatching(
                    total, direct, sender, receivers, run.share(ffn_nats), float(shares[0]), float(shares[1])
                )

            results = found = [split(sender) for sender in senders]
            while follow is not None and found and (more := follow(found)):
                found = [split(sender) for sender in more]
                results = results + found
    finally:
        net.train(was_training)
    return results or [PathPatching(total, direct)]


def _check_sender_shape(sender: object) -> None:
    """Refuse, in one line that says what a sender looks like, one that is not shaped as a `Node`."""
    if not is_node(sender):
        raise AttnlabError(f"a sender is {NODE_SHAPE}; got {sender!r}")


def _check_sender(net: Any, total: HeadPatching, sender: Any) -> None:
    """Refuse, in one line, a sender that is neither a patched head nor a feed-forward layer
    whose positions line up (an encoder one only where both sources have as many pieces)."""
    _check_sender_shape(sender)  # (a `follow` round's senders come here unchecked)
    if sender[0] == "ffn":
        if sender[1] in total.patched and 0 <= sender[2] < net.config.n_layers:
            return
    elif sender in total.order():
        return
    raise AttnlabError(
        f"the sender {node_name(sender)} is not a patched head or feed-forward layer of this model and pair"
    )


def _like(total: HeadPatching, share: np.ndarray, nats: np.ndarray) -> HeadPatching:
    """A head patching result with `total`'s runs and sentences, and other shares."""
    return HeadPatching(
        share, nats, total.clean, total.corrupted, total.direction, total.positions, total.patched, list(total.pieces)
    )


def _grid(net: Any, heads: Sequence[tuple[Any, int]], values: Sequence[float]) -> np.ndarray:
    """(kinds, layers, heads) with each (module, head)'s value, NaN elsewhere."""
    grid = np.full((len(KINDS), net.config.n_layers, net.config.n_heads), np.nan)
    for (module, head), value in zip(heads, values, strict=True):
        kind, layer = hook_point(module)
        grid[KINDS.index(kind), layer, head] = value
    return grid


def _frozen_runs(
    net: Any,
    src: list[int],
    target: list[int],
    positions: list[int],
    senders: list[tuple[Any, int] | None],
    kept: dict[Any, Tensor],
    other: dict[Any, Tensor],
    device: torch.device,
    heard: dict[Any, Tensor] | None = None,
) -> list[float]:
    """For each sender (module, head), or None (no sender), one row: the log-probability over `positions` with every head
    and feed-forward layer frozen at the base run's output (`kept`) and the sender given the other
    run's (`other`); in batches of at most `BATCH_TOKENS` target positions. With `heard` (one
    sender), what every component computed from its input before it was frozen goes there, in
    `kept`'s shapes (feed-forward outputs as (1, 1, L, d_model), the way `COMPONENTS` patches them)."""
    per_batch = 1 if quantized(net) else max(1, BATCH_TOKENS // len(target))  # int8: one scale per tensor
    logp: list[float] = []
    for start in range(0, len(senders), per_batch):
        chunk = senders[start : start + per_batch]
        with _frozen(net, chunk, kept, other, device, heard):
            out = token_log_probs(net, *pair_tensors(src, target, len(chunk), net, device))
        logp += out[:, positions].sum(-1).tolist()
    return logp


@contextmanager
def _frozen(
    net: Any,
    chunk: list[tuple[Any, int] | None],
    kept: dict[Any, Tensor],
    other: dict[Any, Tensor],
    device: torch.device,
    heard: dict[Any, Tensor] | None,
) -> Iterator[None]:
    """Attach one row per sender (a head's (module, head), a feed-forward module's (module, 0), or
    None): heads through `HEAD_PATCHES` (gate 1: the value given), feed-forward layers through
    `FFN_OUTPUTS`; with `heard`, keep what each computed first."""
    rows, heads = len(chunk), net.config.n_heads
    patches: dict[Any, tuple[Tensor, Tensor]] = {}
    for module in net.attention_modules():
        values = kept[module]
        senders = [(row, sender[1]) for row, sender in enumerate(chunk) if sender is not None and sender[0] is module]
        if senders:
            values = values.expand(rows, *values.shape[1:]).clone()
            for row, head in senders:
                values[row, head] = other[module][0, head]
        patches[module] = (torch.ones(rows, heads, device=device), values)
    ones, changes = torch.ones(rows, device=device), {}
    for module in ffn_modules(net):
        values = kept[module][:, 0]
        senders = [row for row, sender in enumerate(chunk) if sender is not None and sender[0] is module]
        if senders:
            values = values.expand(rows, *values.shape[1:]).clone()
            values[senders] = other[module][0, 0]
        changes[module] = partial(_held, ones, values, heard, module)
    with ExitStack() as stack:
        if heard is not None:
            stack.enter_context(HEADS.keep(net, heard))
        stack.enter_context(attached(HEAD_PATCHES, patches))
        stack.enter_context(attached(FFN_OUTPUTS, changes))
        yield


def _held(gate: Tensor, value: Tensor, heard: dict[Any, Tensor] | None, module: Any, x: Tensor) -> Tensor:
    """A feed-forward output held at `value` in the rows whose gate is 1 (what it computed, `x`,
    kept in `heard` first when given)."""
    if heard is not None:
        heard[module] = x.detach()[:, None]
    return x + gate.to(x.dtype)[:, None, None] * (value.to(x.dtype) - x)


def _attach_components(patches: dict[Any, tuple[Tensor, Tensor]]) -> AbstractContextManager:
    """Patch heads ({module: (gate (B, h), outputs)}) and feed-forward layers ({module: (gate (B, 1),
    outputs (1, 1, L, d_model))}) row by row, as `patched_runs` asks."""
    stack = ExitStack()
    heads = {m: pair for m, pair in patches.items() if isinstance(m, MultiHeadAttention)}
    ffn = {
        m: partial(_held, gate[:, 0], value[:, 0], None, m) for m, (gate, value) in patches.items() if m not in heads
    }
    stack.enter_context(attached(HEAD_PATCHES, heads))
    stack.enter_context(attached(FFN_OUTPUTS, ffn))
    return stack


def _keep_components(net: Any, kept: dict[Any, Tensor]) -> AbstractContextManager:
    """Every head's output (module: (1, h, Lq, d_v)) and every feed-forward layer's (module:
    (1, 1, L, d_model), the shape `_attach_components` patches), kept from one run."""

    def keep(module: Any, x: Tensor) -> None:
        kept[module] = x.detach()[:, None]

    stack = ExitStack()
    stack.enter_context(HEADS.keep(net, kept))
    stack.enter_context(attached(FFN_OUTPUTS, {m: partial(keep, m) for m in ffn_modules(net)}))
    return stack


COMPONENTS = Sites(keep=_keep_components, attach=_attach_components)  # heads and feed-forward layers
