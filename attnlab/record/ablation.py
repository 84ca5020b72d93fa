"""Switching heads off: the inverse of recording, through the same hook points. A head's output
is zeroed before W^O while a `with ablate(...)` block runs, and restored afterwards whatever
happens (the explorer's and the notebooks' ablation views decode inside it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_MASKS, attached
from attnlab.model.transformer import Transformer
from attnlab.record.recorder import hook_point
from attnlab.record.trace import KINDS


@contextmanager
def ablate(model: Transformer, heads: dict[tuple[str, int], Sequence[int]]) -> Iterator[None]:
    """Switch heads off while the block runs: {(kind, layer): [head, ...]} -> their output is 0
    before W^O, as if the head were pruned (Michel et al., 2019). Always restored on exit."""
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    for (kind, layer), off in heads.items():  # a typo must not silently ablate nothing
        if kind not in KINDS:
            raise AttnlabError(f"unknown attention kind {kind!r}; choose from {', '.join(KINDS)}")
        if not -n_layers <= layer < n_layers:
            raise AttnlabError(f"layer {layer} does not exist: this model has {n_layers} layers")
        if any(not -n_heads <= head < n_heads for head in off):
            raise AttnlabError(f"head indices must lie in [0, {n_heads}), got {sorted(off)}")
    chosen = {}
    for module in model.attention_modules():
        kind, layer = hook_point(module)
        off = heads.get((kind, layer)) or heads.get((kind, layer - model.config.n_layers))
        if off:
            mask = torch.ones(model.config.n_heads, device=module.w_o.weight.device)
            mask[list(off)] = 0.0
            chosen[module] = mask
    with attached(HEAD_MASKS, chosen):  # this thread's decoding only, like a recording
        yield
