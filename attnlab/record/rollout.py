"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): where
a layer's positions draw from among the *input* tokens, through every layer below it.

One head's map says which positions of the layer below a query mixes; but those positions have
already mixed others in the layers under them, and the residual connection (§3.1: LayerNorm(x +
Sublayer(x))) carries each position's own state past every attention sub-layer. Rollout follows
both: a layer's maps, averaged over its heads, are blended with the identity (the residual's
path), Ã_l = (1 − r) · mean_h A_l + r · I with r = 0.5, and the blends are multiplied bottom up,
R_l = Ã_l · Ã_{l−1} ⋯ Ã_0. Row i of R_l is then a distribution over the input tokens: how much
of each reaches position i at layer l, if attention and the residual were all that mixed them (the
feed-forward layers act on one position at a time and are left out; LayerNorm's rescaling too).

- "encoder" and "decoder" self-attention roll out over their own layers; the decoder's keys are
  its input tokens (<s> and the output shifted right), so the causal mask stays in R.
- "cross" attention reads the encoder's *top* layer, whose positions have mixed the source
  already: row t of cross layer l's head mean, times the encoder's full rollout, says how much of
  each source token the decoder reads at layer l (the decoder's own self-attention between its
  cross-attention layers is not followed: this is the source side's flow only).

A head switched off while the trace was recorded (`meta["heads_off"]`) passed nothing on, so the
mean is over the heads that were on; a layer with all heads off is the residual alone (Ã = I).
Rollout needs every head of every layer of the kinds it multiplies; a trace that recorded fewer
is a one-line error, not a product over the layers it happens to hold.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace

RESIDUAL = 0.5  # Abnar & Zuidema's weight for the residual path


def rollout(trace: AttentionTrace, kind: str, residual: float = RESIDUAL) -> np.ndarray:
    """(layers, q, k) rollout of `kind` in `trace`: entry l is R_l, the flow from the input tokens
    to each query position of layer l (see the module's docstring); every row sums to 1. Anything
    but a trace (None, a Result in place of its .trace) is refused as the logit lens refuses it: it
    was an AttributeError from deep inside."""
    check_trace(trace, "the trace")
    if isinstance(residual, bool) or not isinstance(residual, int | float) or not 0.0 <= residual <= 1.0:
        raise AttnlabError(f"rollout's residual weight is a number in [0, 1], got {residual!r}")
    if kind == "cross":
        encoder = rollout(trace, "encoder", residual)[-1]  # (src, src): what each encoder output holds
        cross = [_head_mean(trace, "cross", layer) @ encoder for layer in _all_layers(trace, "cross")]
        return np.stack(cross).astype(np.float32)
    flow, steps = None, []
    for layer in _all_layers(trace, kind):
        mean = _head_mean(trace, kind, layer)
        blended = (1.0 - residual) * mean + residual * np.eye(*mean.shape)
        blended /= blended.sum(-1, keepdims=True)
        flow = blended if flow is None else blended @ flow
        steps.append(flow)
    return np.stack(steps).astype(np.float32)


def _all_layers(trace: AttentionTrace, kind: str) -> list[int]:
    """The layers of `kind`, 0 to the model's top, refusing a trace that did not record them all
    with all their heads."""
    trace.labels(kind)  # a kind the trace lacks: its own one-line error
    config = trace.model.get("config", {})
    layers = trace.layers[kind]
    n_layers = int(config.get("n_layers", len(layers)))
    n_heads = int(config.get("n_heads", trace.n_heads))
    heads = list(range(n_heads)) if trace.heads is None else sorted(trace.heads)
    if layers != list(range(n_layers)) or heads != list(range(n_heads)):
        # a trace without its model's config (recorded by hand) says nothing of the model's size
        size = f" ({n_layers} layers, {n_heads} heads)" if {"n_layers", "n_heads"} <= config.keys() else ""
        raise AttnlabError(
            f"rollout of {kind} attention needs every layer and head of the model{size}; this trace recorded "
            f"layers {layers} and heads {heads}: record it with all of them"
        )
    return layers


def _head_mean(trace: AttentionTrace, kind: str, layer: int) -> np.ndarray:
    """Layer `layer`'s maps averaged over the heads that were on; the identity when none was (only
    the residual carried anything), a zero map for cross attention (nothing was read)."""
    maps = trace.attention(kind, layer).astype(np.float64)
    off = trace.heads_off.get((kind, layer), [])
    on = [head for head in range(maps.shape[0]) if head not in off]
    if on:
        return maps[on].mean(0)
    return np.zeros(maps.shape[1:]) if kind == "cross" else np.eye(*maps.shape[1:])
