"""Switching heads off: the inverse of recording, through the same hook points. A head's output
is zeroed before W^O while a `with ablate(...)` block runs, and restored afterwards whatever
happens (the explorer's and the notebooks' ablation views decode inside it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

from attnlab.errors import AttnlabError
from attnlab.model.config import ModelConfig
from attnlab.model.hooks import HEAD_MASKS, attached
from attnlab.model.transformer import Transformer
from attnlab.record.recorder import hook_point, index_in, transformer_of
from attnlab.record.trace import KINDS


@contextmanager
def ablate(model: Transformer, heads: Mapping[tuple[str, int], Sequence[int]]) -> Iterator[None]:
    """Switch heads off while the block runs: {(kind, layer): [head, ...]} -> their output is 0
    before W^O, as if the head were pruned (Michel et al., 2019). Always restored on exit.
    Blocks nest: a head switched off by an enclosing block stays off inside this one (the masks
    multiply), where replacing the module's mask would switch the outer block's heads back on.
    `model` is a `Transformer` or what `attnlab.load` returns."""
    model = transformer_of(model)
    off = heads_off(model.config, heads)
    enclosing = HEAD_MASKS.get()
    chosen = {}
    for module in model.attention_modules():
        point = hook_point(module)
        if point in off:
            mask = torch.ones(model.config.n_heads, device=module.w_o.weight.device)
            mask[off[point]] = 0.0
            outer = enclosing.get(module)
            chosen[module] = mask if outer is None else mask * outer
    with attached(HEAD_MASKS, chosen):  # this thread's decoding only, like a recording
        yield


def heads_off(config: ModelConfig, heads: Mapping[tuple[str, int], Sequence[int]]) -> dict[tuple[str, int], list[int]]:
    """{(kind, layer ≥ 0): sorted heads ≥ 0}. A typo must not silently ablate nothing, and a
    layer or head named twice (2 and -1 in a 3-layer model) is one head, switched off once,
    whichever of its names each entry uses."""
    if not isinstance(heads, Mapping):
        raise AttnlabError(f"heads to switch off are a dict {{(kind, layer): [head, ...]}}, got {type(heads).__name__}")
    merged: dict[tuple[str, int], set[int]] = {}
    for key, off in heads.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise AttnlabError(f"a key of the heads to switch off is (kind, layer), e.g. ('cross', 0); got {key!r}")
        kind, layer = key
        if kind not in KINDS:
            raise AttnlabError(f"unknown attention kind {kind!r}; choose from {', '.join(KINDS)}")
        if isinstance(off, str | bytes | Mapping) or not isinstance(off, Iterable):
            raise AttnlabError(f"the heads of {key!r} are a list of head indices, got {off!r}")
        point = (kind, index_in(layer, config.n_layers, "layer"))
        merged.setdefault(point, set()).update(index_in(head, config.n_heads, "head") for head in off)
    return {point: sorted(off) for point, off in merged.items() if off}
