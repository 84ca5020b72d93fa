"""Residual-stream patching (Meng et al., 2022, "causal tracing"; TransformerLens's patching of
`resid_post` by position): where, layer by layer and position by position, the model carries a
changed word.

Head patching (`attnlab.record.patching`) asks which heads carry the difference between a clean
and a corrupted source; this asks where it lives. Each layer's output at one position (the
residual stream the next layer reads, §3.1's LayerNorm(x + Sublayer(x))) is copied alone from the
clean run into the corrupted one (or back), and the share of the log-probability difference that
moves is read as in head patching. On the encoder side the rows are the embeddings (what the
encoder reads, §3.4-§3.5) and each layer's output, the columns the source positions; there the
changed word starts at its own position and spreads as the layers attend to it. On the decoder
side the rows are the decoder layers' outputs and the columns the target positions: the top row
splits the whole difference between the target pieces (patching the top layer at a position
changes that position's prediction only, so the row sums to 1), and lower rows show where the
decoder took the change in. Encoder positions line up only where both sources have as many
pieces; otherwise the encoder rows are NaN.

The layers' outputs are reached through PyTorch's forward hooks, put on a model once and left
there: each reads what this thread attached (a context variable, as recording does), so a model
shared by a server's sessions is patched for one caller only. Before the first patching call a
model has no such hook and pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.model.hooks import attached
from attnlab.record.ablation import ablate
from attnlab.record.patching import Sites, patch_each, trace_pair
from attnlab.record.trace import AttentionTrace

# {("encoder", 0): the embeddings, ("encoder", l): encoder layer l - 1's output, ("decoder", l): decoder
# layer l - 1's output} -> what to do with that (B, L, d_model) tensor: return a replacement, or None
STATES: ContextVar[Mapping[tuple[str, int], Callable[[Tensor], Tensor | None]]] = ContextVar(
    "attnlab_states", default=MappingProxyType({})
)


@dataclass
class ResidualPatching:
    """The share of the clean-corrupted difference each (layer, position) moves alone."""

    encoder: np.ndarray  # (layers + 1, source positions): row 0 the embeddings, row l layer l - 1's output
    decoder: np.ndarray  # (layers, target positions): row l decoder layer l's output
    clean: float  # log P(target | clean source) over `positions`
    corrupted: float  # log P(target | corrupted source), the same
    direction: str  # "denoise" or "noise", as in head patching
    positions: list[int]  # the target positions the log-probability sums over
    source: list[str] = field(default_factory=list)  # the clean source's pieces, when known
    changed: list[str] = field(default_factory=list)  # the corrupted source's pieces, when known
    target: list[str] = field(default_factory=list)  # the target's pieces, </s> last, when known
    method: str = "activation"  # "attribution": first-order estimates from one gradient, not patched runs

    @property
    def encoder_patched(self) -> bool:
        """Whether the encoder's rows were patched (both sources as many pieces)."""
        return bool(np.isfinite(self.encoder).any())


def pair_residual_patching(
    net: Any,
    clean: list[int],
    corrupted: list[int],
    target: list[int],
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
) -> ResidualPatching:
    """Patch every layer's output at every position of `net` (a `Transformer`) between two
    sources' ids, on `target`'s ids (ending in </s>), or estimate it (`method`); as
    `attnlab.record.patching.pair_patching`."""
    _install(net)
    layers = net.config.n_layers
    keys = [("encoder", layer) for layer in range(layers + 1)] if len(clean) == len(corrupted) else []
    keys += [("decoder", layer) for layer in range(1, layers + 1)]
    run = patch_each(net, clean, corrupted, target, positions, direction, STATE_SITES, keys, method)
    encoder, decoder = np.full((layers + 1, len(clean)), np.nan), np.zeros((layers, len(target)))
    for ((side, layer), position), value in zip(run.sites, run.nats, strict=True):
        if side == "encoder":
            encoder[layer, position] = value
        else:
            decoder[layer - 1, position] = value
    encoder, decoder = run.share(encoder), run.share(decoder)
    return ResidualPatching(encoder, decoder, run.clean, run.corrupted, direction, run.positions, method=method)


def trace_residual_patching(
    model: Any,
    trace: AttentionTrace,
    corrupted: str,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
) -> ResidualPatching:
    """Residual-stream patching between the trace's sentence (clean) and `corrupted`, on the
    output the trace shows, with the heads that were off when it was recorded off again."""
    src_ids, corrupt_ids, produced = trace_pair(model, trace, corrupted, "layers")
    with ablate(model.model, trace.heads_off):
        result = pair_residual_patching(model.model, src_ids, corrupt_ids, produced, positions, direction, method)
    result.source, result.target = list(trace.src_tokens), list(trace.tgt_tokens)
    result.changed = [model.tokenizer.id_to_piece(i) for i in corrupt_ids]
    return result


def _install(net: Any) -> None:
    """Put the hooks on `net`'s layers, once: they do nothing unless this thread attached something."""
    if getattr(net, "_attnlab_state_hooks", False):
        return
    encoder, decoder = net.encoder["layers"], net.decoder["layers"]
    encoder[0].register_forward_pre_hook(partial(_input, ("encoder", 0)))
    for side, layers in (("encoder", encoder), ("decoder", decoder)):
        for index, layer in enumerate(layers):
            layer.register_forward_hook(partial(_output, (side, index + 1)))
    net._attnlab_state_hooks = True


def _input(site: tuple[str, int], module: Any, args: tuple) -> tuple | None:
    if torch.compiler.is_compiling() or (change := STATES.get().get(site)) is None:
        return None
    replaced = change(args[0])
    return None if replaced is None else (replaced, *args[1:])


def _output(site: tuple[str, int], module: Any, args: tuple, output: Tensor) -> Tensor | None:
    if torch.compiler.is_compiling() or (change := STATES.get().get(site)) is None:
        return None
    return change(output)


def _keep_states(net: Any, kept: dict[Any, Tensor]) -> Any:
    def keep(site: tuple[str, int], x: Tensor) -> None:
        kept[site] = x.detach()

    sites = [("encoder", 0)] + [(side, i + 1) for side in ("encoder", "decoder") for i in range(net.config.n_layers)]
    return attached(STATES, {site: partial(keep, site) for site in sites})


def _patch_states(patches: dict[Any, tuple[Tensor, Tensor]]) -> Any:
    def patch(gate: Tensor, states: Tensor, x: Tensor) -> Tensor:
        return x + gate.to(x.dtype)[:, :, None] * (states.to(x.dtype) - x)

    return attached(STATES, {site: partial(patch, *pair) for site, pair in patches.items()})


STATE_SITES = Sites(keep=_keep_states, attach=_patch_states)
