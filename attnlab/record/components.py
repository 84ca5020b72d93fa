"""The parts of a Transformer a path goes through, as path patching (`attnlab.record.paths`) and
circuits (`attnlab.record.circuit`) name and reach them: every attention head, as (kind, layer,
head), and every feed-forward layer, as ("ffn", side, layer); their order in the stacks (what reads
what a part writes), and forward hooks on the feed-forward layers that hold or read their output.

The hooks are put on a model once and left there; each reads what this thread attached (a context
variable, as recording does), so a model shared by a server's sessions is patched for one caller
only. Before the first path patching call a model has no such hook and pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

from attnlab.model.multihead import MultiHeadAttention
from attnlab.record.recorder import hook_point
from attnlab.record.trace import KINDS, whole_number

SIDES = ("encoder", "decoder")  # the feed-forward layers' two stacks, the rows of `PathPatching.ffn`

# {FeedForward module: what to do with its (B, L, d_model) output: keep it (None) or replace it}
FFN_OUTPUTS: ContextVar[Mapping[Any, Callable[[Tensor], Tensor | None]]] = ContextVar(
    "attnlab_ffn_outputs", default=MappingProxyType({})
)

Node = tuple[str, Any, int]  # a head, or a feed-forward layer ("ffn", side, layer): what a path goes through
NODE_SHAPE = (
    'a head (kind, layer, head), kind "encoder", "decoder" or "cross", '
    'or a feed-forward layer ("ffn", side, layer), side "encoder" or "decoder"'
)  # what a refusal says a sender is


def is_node(value: object) -> bool:
    """Whether `value` has a `Node`'s shape, checked before it is looked up: ("cross", 1) failed
    as an IndexError, ("ffn", "cross", 1) as tuple.index's ValueError, and ("cross", True, 1) was
    read as layer 1 (True == 1), though a bool is refused as a layer everywhere else."""
    if not (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], str)):
        return False
    kind, where, index = value
    if kind == "ffn":
        return isinstance(where, str) and where in SIDES and whole_number(index)
    return kind in KINDS and whole_number(where) and whole_number(index)


def node_name(node: Node | str) -> str:
    """A head, a feed-forward layer or the output as the command's tables write it: "cross L1 H1",
    "decoder FFN L2", "output"; anything else as it is."""
    if not is_node(node):
        return str(node)
    return f"{node[1]} FFN L{node[2]}" if node[0] == "ffn" else f"{node[0]} L{node[1]} H{node[2]}"


def module_of(net: Any, sender: Node) -> Any:
    """The attention module of a head, or the feed-forward module of ("ffn", side, layer)."""
    if sender[0] == "ffn":
        return ffn_modules(net)[SIDES.index(sender[1]) * net.config.n_layers + sender[2]]
    return next(m for m in net.attention_modules() if hook_point(m) == sender[:2])


def ffn_modules(net: Any) -> list[Any]:
    return [layer.ffn for side in (net.encoder, net.decoder) for layer in side["layers"]]


def ffn_site(net: Any, module: Any) -> tuple[int, int]:
    """(side, layer) of a feed-forward module."""
    index = ffn_modules(net).index(module)
    return divmod(index, net.config.n_layers)


def downstream(net: Any, module: Any) -> list[Any]:
    """The components that read the residual stream `module` (an attention or feed-forward module)
    writes to, in order: (attention module, head) for heads, feed-forward modules as they are. An
    encoder sub-layer's change reaches the later encoder sub-layers and every cross head (through the
    encoder's output); a decoder sub-layer's, the decoder's later sub-layers."""
    encoder = [c for layer in net.encoder["layers"] for c in (layer.self_attn, layer.ffn)]
    decoder = [c for layer in net.decoder["layers"] for c in (layer.self_attn, layer.cross_attn, layer.ffn)]
    if any(module is c for c in encoder):
        later = encoder[encoder.index(module) + 1 :] + [layer.cross_attn for layer in net.decoder["layers"]]
    else:
        later = decoder[decoder.index(module) + 1 :]
    heads = range(net.config.n_heads)
    return [c for m in later for c in ([(m, h) for h in heads] if isinstance(m, MultiHeadAttention) else [m])]


def install(net: Any) -> None:
    """Put a forward hook on each feed-forward layer, once: it does nothing unless this thread attached something."""
    if getattr(net, "_attnlab_ffn_hooks", False):
        return
    for module in ffn_modules(net):
        module.register_forward_hook(_ffn_output)
    net._attnlab_ffn_hooks = True


def _ffn_output(module: Any, args: tuple, output: Tensor) -> Tensor | None:
    if torch.compiler.is_compiling() or (change := FFN_OUTPUTS.get().get(module)) is None:
        return None
    return change(output)
