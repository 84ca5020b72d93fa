"""Eq. (1) step by step for one head: QKᵀ/√d_k, the mask, softmax, ΣaV, recomputed from the
inputs the layer really received in a teacher-forced pass (captured by a forward pre-hook on
each attention module that does nothing unless this thread asked for that module's inputs: a
hook added for the pass alone also captured another thread's pass over the shared model, and
`norm_trace` came out of the other sentence, or failed on its shapes). `model` is anything with a `.model` (a `Transformer`), a `.tokenizer` and a
`.target_tokenizer`, such as what `attnlab.load()` returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.model.attention import window_mask
from attnlab.model.hooks import attached
from attnlab.model.multihead import MultiHeadAttention
from attnlab.model.transformer import Transformer
from attnlab.record.ablation import ablate
from attnlab.record.recorder import computed_in, index_in, weights_hash
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace

# {attention module: what to do with (its args, its kwargs)} for this thread's pass (`attached`)
INPUTS: ContextVar[Mapping[Any, Callable[[tuple, dict], None]]] = ContextVar(
    "attnlab_layer_inputs", default=MappingProxyType({})
)


def trace_ids(model: Any, trace: AttentionTrace) -> tuple[list[int], list[int]]:
    """(source ids, produced ids) of a trace, from its pieces and the model's vocabulary. A piece
    the vocabulary lacks means the trace was recorded by a model with another vocabulary: its
    sentence would be read as <unk>s and every number computed from it would mean nothing."""
    sides = []
    for tokenizer, pieces in ((model.tokenizer, trace.src_tokens), (model.target_tokenizer, trace.tgt_tokens)):
        ids = [tokenizer.piece_to_id(p) for p in pieces]
        unknown = [
            p for p, i in zip(pieces, ids, strict=True) if i == tokenizer.unk_id() and p != tokenizer.id_to_piece(i)
        ]
        if unknown:
            raise AttnlabError(
                f"the trace holds pieces this model's vocabulary lacks ({unknown[0]!r}, ...): it was recorded by another model"
            )
        sides.append(ids)
    return sides[0], sides[1]


def check_same_model(
    net: Any, trace: AttentionTrace, why: str = "Eq. (1) recomputed with this one would not be the map the trace shows"
) -> None:
    """A trace is recomputed only by the model that recorded it: the same weights (when both
    computed in one precision; bf16 and fp32 of one checkpoint hash differently) or at least the
    same config. The restricted model's trace recomputed by the global one came out up to 0.85
    from the map it showed, and outside the band, with no word."""
    recorded = trace.model
    config = {k: v for k, v in net.config.to_dict().items() if k != "paper"}
    theirs = {k: v for k, v in (recorded.get("config") or {}).items() if k != "paper"}
    if recorded.get("dtype") == computed_in(net) and recorded.get("weights_sha256"):
        same = recorded["weights_sha256"] == weights_hash(net)
    else:
        same = not theirs or theirs == config
    if not same:
        raise AttnlabError(
            f"the trace was recorded by another model (other weights or config): {why}; open the model that recorded it"
        )


def loaded(model: Any, what: str) -> Transformer:
    """The `Transformer` of what `attnlab.load` returns; anything else (a bare `Transformer`, whose
    tokenizers are missing to read a trace's pieces) is a one-line error naming `what` needs it."""
    if not (isinstance(getattr(model, "model", None), Transformer) and hasattr(model, "target_tokenizer")):
        raise AttnlabError(
            f"{what} needs what attnlab.load returns (its tokenizers read the trace's pieces), got {type(model).__name__}"
        )
    return model.model


def layer_inputs(model: Any, trace: AttentionTrace, modules: list[Any]) -> dict[Any, dict[str, Any]]:
    """{module: its "x", "memory" (None in self-attention) and "mask"} as each of `modules` (attention
    modules of `model.model`) received them in a teacher-forced pass over the trace's sentence pair:
    the source, then <s> and the produced pieces but the last, with the heads the trace recorded
    switched off switched off again. The trace must be this model's."""
    net = model.model
    src_ids, produced = trace_ids(model, trace)
    check_same_model(net, trace)
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]]) if produced else torch.tensor([[net.config.bos_id]])
    seen: dict[Any, dict[str, Any]] = {}

    def capture(module: Any) -> Callable[[tuple, dict], None]:
        def keep(args: tuple, kwargs: dict) -> None:
            memory = args[1] if len(args) > 1 else kwargs.get("memory")
            seen[module] = {"x": args[0], "memory": memory, "mask": kwargs.get("mask")}

        return keep

    _install(net)
    wanted = {module: capture(module) for module in modules}
    # (with the trace's heads off: all on, a later layer read other inputs)
    with attached(INPUTS, wanted), torch.no_grad(), ablate(net, trace.heads_off):
        net(src, tgt)
    return seen


def _install(net: Any) -> None:
    """Put the pre-hook on `net`'s attention modules, once: a hook added and removed for each pass
    would change the modules' hook tables under another thread's pass."""
    if getattr(net, "_attnlab_input_hooks", False):
        return
    for module in net.modules():
        if isinstance(module, MultiHeadAttention):
            module.register_forward_pre_hook(_inputs, with_kwargs=True)
    net._attnlab_input_hooks = True


def _inputs(module: Any, args: tuple, kwargs: dict) -> None:
    if not torch.compiler.is_compiling() and (keep := INPUTS.get().get(module)) is not None:
        keep(args, kwargs)


def attention_parts(model: Any, trace: AttentionTrace, kind: str, layer: int, head: int) -> dict[str, np.ndarray]:
    """Recompute one head of one layer along Eq. (1), from the inputs the layer really received
    in the teacher-forced pass over the trace's sentence pair.

    Returns (q, k) `scores` = QKᵀ/√d_k, `allowed` (the mask), `masked` (−∞ where forbidden),
    `weights` = softmax, (k, d_v) `v`, (q, d_v) `out` = weights·V, and q/k vectors. A negative
    layer or head counts from the model's last, as the widgets do; 1.0, 1.5 or None is refused,
    and so are a model without its tokenizers (a bare `Transformer`) or what is not a trace
    (each was an AttributeError from inside).
    """
    check_trace(trace, "the trace")
    net = loaded(model, "Eq. (1) step by step")
    layer_index = index_in(layer, net.config.n_layers, "layer")
    head = index_in(head, net.config.n_heads, "head")
    if kind == "encoder":
        module = net.encoder["layers"][layer_index].self_attn
    elif kind in ("decoder", "cross"):
        block = net.decoder["layers"][layer_index]
        module = block.self_attn if kind == "decoder" else block.cross_attn
    else:
        raise AttnlabError(f"unknown attention kind {kind!r}")
    seen = layer_inputs(model, trace, [module])[module]
    with torch.no_grad():
        x = seen["x"]
        source = x if seen["memory"] is None else seen["memory"]
        q = module._split(module.w_q(x), module.d_k)[0, head]  # (Lq, d_k)
        k = module._split(module.w_k(source), module.d_k)[0, head]  # (Lk, d_k)
        v = module._split(module.w_v(source), module.d_v)[0, head]  # (Lk, d_v)
        scores = q @ k.T / math.sqrt(module.d_k)  # (Lq, Lk)
        mask = seen["mask"]
        allowed = (
            torch.ones_like(scores, dtype=torch.bool)
            if mask is None
            else mask.reshape(-1, mask.size(-1))[-scores.size(0) :].expand_as(scores)
        )
        if module.window is not None:  # restricted self-attention: the band the layer adds inside itself
            allowed = allowed & window_mask(*scores.shape, module.window, module.causal, scores.device)[0, 0]
        masked = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(masked, dim=-1).nan_to_num(0.0)
        out = weights @ v  # (Lq, d_v)
    as_np = {
        "q": q,
        "k": k,
        "v": v,
        "scores": scores,
        "allowed": allowed,
        "masked": masked,
        "weights": weights,
        "out": out,
    }
    return {name: t.float().numpy() if t.dtype != torch.bool else t.numpy() for name, t in as_np.items()}
