"""The incremental-decoding state of the decoder's attention layers (fairseq's layout)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Incremental-decoding state: per decoder layer, self-attention K/V so far and the
    encoder-decoder K/V, computed once per source (as fairseq does).

    Reordering (every beam-search step) copies each row's self-attention K/V into a buffer one
    position longer, `k_room`/`v_room`, whose last slot the next step fills in place: one copy of
    the prefix per step instead of two (reorder, then concatenate), half the time of the two."""

    layers: list[dict[str, dict[str, Tensor]]] = field(default_factory=list)  # [{"self": {k, v}, "cross": {k, v}}]
    length: int = 0  # target positions already processed

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Follow the beams: row i of the new batch continues row index[i] of the old one. The
        encoder-decoder K/V follow `memory_index` instead when they are kept once per sentence
        rather than once per row (see `MultiHeadAttention.forward`); None: they follow `index`."""
        cross = index if memory_index is None else memory_index
        unchanged = torch.equal(cross, torch.arange(len(cross)))
        for layer in self.layers:
            past = layer["self"]
            for name in ("k", "v"):
                # a second reorder before the next step moves the room's filled part
                prefix = past.pop(name) if name in past else past.pop(f"{name}_room")[:, :, :-1]
                room = prefix.new_empty(len(index), prefix.size(1), prefix.size(2) + 1, prefix.size(3))
                torch.index_select(prefix, 0, index.to(prefix.device), out=room[:, :, :-1])
                past[f"{name}_room"] = room
            for name, tensor in layer["cross"].items():
                if not (unchanged and tensor.size(0) == len(cross)):  # else: nothing moves
                    layer["cross"][name] = tensor.index_select(0, cross.to(tensor.device))
