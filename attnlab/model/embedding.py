"""§3.4–3.5: the tables a token and a position are looked up in.

Here rather than in `transformer.py` because the model's shapes are checked, when a checkpoint
is loaded, on a model built on the meta device, and that build must draw nothing (see
`embedding_table`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def sinusoidal_positions(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same).

    `layout="halves"` puts the same sines in the first half of the vector and the cosines in
    the second (Marian's layout); the model is the same up to a permutation of its channels."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    sines, cosines = (slice(0, None, 2), slice(1, None, 2)) if layout == "interleaved" else _halves(d_model)
    table[:, sines] = torch.sin(pos * inv_freq)
    table[:, cosines] = torch.cos(pos * inv_freq)[:, : d_model // 2]
    return table.float()


def _halves(d_model: int) -> tuple[slice, slice]:
    return slice(0, (d_model + 1) // 2), slice((d_model + 1) // 2, None)


def embedding_table(rows: int, width: int, padding_idx: int | None = None) -> nn.Embedding:
    """An embedding left for `reset_parameters` to draw. nn.Embedding's own draw (`normal_`) would
    run, on the meta device where `load_model` checks a checkpoint's shapes, as a Python
    decomposition that imports PyTorch's compiler: ~1.4 s of every checkpoint load."""
    return nn.Embedding.from_pretrained(torch.empty(rows, width), freeze=False, padding_idx=padding_idx)
