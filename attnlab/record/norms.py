"""What a head moves, not only where it looks: attention weighed by the norm of what each key
writes (Kobayashi et al., 2020, "Attention is not only a weight: analyzing Transformers with
vector norms").

A head's share of the layer's output at query i is Σ_j α_ij f(x_j), where f(x_j) =
(x_j W^V_h + b^V_h) W^O_h is key j's value carried through the head's slice of W^O (the output
projection's bias is no key's). A key read with a large weight but a short f(x_j) adds little:
Clark et al. (2019) saw heads park most of their weight on [SEP], and Kobayashi et al. showed
those vectors are short, the weight close to a no-op. ‖α_ij f(x_j)‖ says which keys a head really
moves into a query; `norm_trace` scales each row of it to sum to 1, so that it reads on the
weights' own scale and every view of a trace draws it.

The f(x_j) come from one teacher-forced pass over the trace's sentence pair (the inputs each
layer really received, as `attnlab.record.equation` recomputes Eq. (1)); the weights are the
trace's own. A head switched off while the trace was recorded is off again in that pass (the
layers above it read what it did not write), and weighed as if it were on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.errors import AttnlabError
from attnlab.record.equation import layer_inputs, loaded
from attnlab.record.logit_attribution import linear_weight
from attnlab.record.recorder import hook_point
from attnlab.record.stats import check_trace
from attnlab.record.trace import KINDS, AttentionTrace

NORMED = "norm"  # `meta["weighed"]` of a trace whose maps are norm shares (views name it in their titles)


def written(model: Any, trace: AttentionTrace, kinds: tuple[str, ...] | None = None) -> dict[tuple[str, int], Tensor]:
    """{(kind, model layer): (n_heads, keys, d_model) f(x_j)} for every layer the trace holds of
    `kinds` (None: every kind it holds), every head of the model, from one teacher-forced pass
    (`model` as `attnlab.load` returns it, the one that recorded the trace)."""
    net = loaded(model, "weighing attention by what it writes")
    check_trace(trace, "the trace")
    modules = {hook_point(m): m for m in net.attention_modules()}
    kinds = trace.kinds if kinds is None else [kind for kind in trace.kinds if kind in kinds]
    wanted = {(kind, layer): modules[(kind, layer)] for kind in kinds for layer in trace.layers[kind]}
    inputs = layer_inputs(model, trace, list(wanted.values()))
    out: dict[tuple[str, int], Tensor] = {}
    with torch.no_grad():
        for point, module in wanted.items():
            seen = inputs[module]
            source = seen["x"] if seen["memory"] is None else seen["memory"]
            values = module._split(module.w_v(source), module.d_v)[0].float()  # (h, keys, d_v), in the model's dtype
            w_o = linear_weight(module.w_o).float().view(-1, module.n_heads, module.d_v)  # (d_model, h, d_v); int8 too
            out[point] = torch.einsum("hkv,dhv->hkd", values, w_o)
    return out


def norm_trace(model: Any, trace: AttentionTrace) -> AttentionTrace:
    """`trace` with each map's weights α_ij replaced by ‖α_ij f(x_j)‖ over its row's sum: how
    much of what a head writes into query i comes from key j. Its `meta["weighed"]` is `NORMED`
    and `meta["key_norms"]` holds ‖f(x_j)‖ by kind, as (layers, heads, keys) lists."""
    loaded(model, "weighing attention by what it writes")
    if check_trace(trace, "the trace").meta.get("weighed") == NORMED:  # (its shares were weighed again)
        raise AttnlabError("the trace is already weighed by what each key writes; weigh the recorded one")
    vectors_by_layer = written(model, trace)
    held = trace.heads if trace.heads is not None else list(range(trace.n_heads))
    maps: dict[str, list[np.ndarray]] = {}
    key_norms: dict[str, list] = {}
    for (kind, layer), vectors in vectors_by_layer.items():
        norms = vectors.norm(dim=-1)[held].numpy()  # (heads held, keys)
        weighed = trace.attention(kind, layer) * norms[:, None, :]
        total = weighed.sum(axis=-1, keepdims=True)
        maps.setdefault(kind, []).append(np.divide(weighed, total, out=np.zeros_like(weighed), where=total > 0))
        key_norms.setdefault(kind, []).append(norms.tolist())
    meta = {**trace.meta, "weighed": NORMED, "key_norms": key_norms}
    return AttentionTrace(
        src_tokens=list(trace.src_tokens),
        tgt_tokens=list(trace.tgt_tokens),
        maps=maps,
        masks=dict(trace.masks),
        layers={kind: list(layers) for kind, layers in trace.layers.items()},
        heads=None if trace.heads is None else list(trace.heads),
        model=dict(trace.model),
        meta=meta,
    )


def shift(trace: AttentionTrace, normed: AttentionTrace, kind: str, layer: int, head: int) -> tuple[int, float, float]:
    """(key, weight, share) for the key whose part in one head changes most when `trace` is
    weighed by what each key writes (`normed`, from `norm_trace`): its weight and its share of
    what the head writes, each averaged over the queries ("</s> takes 31% of the weight but brings
    18% of what it writes"). The piece a head reads most is often not it: on a diagonal head every
    piece keeps its part, and the one that changes is the one worth a word."""
    row = trace.head_row(head)
    weights = trace.attention(kind, layer)[row].mean(axis=0)
    shares = normed.attention(kind, layer)[row].mean(axis=0)
    key = int(np.abs(shares - weights).argmax())
    return key, float(weights[key]), float(shares[key])


def layer_norms(model: Any, trace: AttentionTrace, kind: str = "cross") -> dict[int, np.ndarray]:
    """{model layer: (queries, keys) ‖Σ_h α_ij f_h(x_j)‖}: how much the whole layer (its heads
    together, before W^O's bias) moves from key j into query i. Kobayashi et al. read a
    translator's cross-attention layer so, and it aligned words better than the layer's weights."""
    if kind not in KINDS:
        raise AttnlabError(f"unknown attention kind {kind!r}; choose from {KINDS}")
    held = trace.heads if trace.heads is not None else list(range(trace.n_heads))
    out = {}
    for (_, layer), vectors in written(model, trace, (kind,)).items():
        alpha = torch.as_tensor(trace.attention(kind, layer).copy())  # (heads held, queries, keys)
        out[layer] = torch.einsum("hqk,hkd->qkd", alpha, vectors[held]).norm(dim=-1).numpy()
    return out
