"""Switching heads off: the inverse of recording, through the same hook points. A head's output
is zeroed before W^O while a `with ablate(...)` block runs, and restored afterwards whatever
happens (the explorer's and the notebooks' ablation views decode inside it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from attnlab.model.transformer import HEAD_MASKS, Transformer, attached
from attnlab.record.recorder import hook_point


@contextmanager
def ablate(model: Transformer, heads: dict[tuple[str, int], Sequence[int]]) -> Iterator[None]:
    """Switch heads off while the block runs: {(kind, layer): [head, ...]} -> their output is 0
    before W^O, as if the head were pruned (Michel et al., 2019). Always restored on exit."""
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
