"""Eq. (1), scaled dot-product attention, and its restricted form (Table 1's last row).

`attention` is the explicit softmax(QKᵀ/√d_k)·V that returns its weights (what recording reads);
the model runs PyTorch's fused kernel instead when nothing is recorded. `local_attention` lets
each query meet only the keys within distance r, in O(n·r·d) time and memory, which is what
makes restricted self-attention cheaper than global attention for long sequences; it equals
`attention` under `window_mask` (tested), so recording a restricted model stays exact.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, Eq. (1): softmax(QKᵀ/√d_k)·V, returning the weights too.

    q: (..., Lq, d_k), k: (..., Lk, d_k), v: (..., Lk, d_v); `mask` broadcasts to (..., Lq, Lk)
    and is True where attending is allowed. Masked cells get exactly zero weight; a row with no
    allowed key (which attnlab never builds) gets all zeros instead of NaN.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights


BANDED_FROM = 4  # banded kernel once the sequence is this many windows long (below, dense is faster)


def window_mask(queries: int, keys: int, window: int, causal: bool, device: torch.device | str) -> Tensor:
    """(1, 1, Lq, Lk) restricted self-attention, True where allowed: the queries are the last Lq
    of the Lk positions; each sees keys within distance `window`, and with `causal` none after it."""
    q = torch.arange(keys - queries, keys, device=device)[:, None]
    k = torch.arange(keys, device=device)[None, :]
    allowed = (q - k <= window) & (k <= q) if causal else (q - k).abs() <= window
    return allowed[None, None]


def local_attention(q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool, keep: Tensor | None = None) -> Tensor:
    """Eq. (1) restricted to the keys within `window` of each query (Table 1's last row) in
    O(n·r·d) time and memory: each query meets only its 2r + 1 (causal: r + 1) neighbours, taken
    as a sliding view of the keys, instead of all n. Equals `attention` with `window_mask`.

    q, k: (B, h, n, d_k), v: (B, h, n, d_v); `keep` (B, n) marks real (unpadded) keys."""
    n, left, right = k.size(-2), window, 0 if causal else window
    width = left + 1 + right
    k_near = F.pad(k, (0, 0, left, right)).unfold(-2, width, 1)  # (B, h, n, d_k, w)
    v_near = F.pad(v, (0, 0, left, right)).unfold(-2, width, 1)  # (B, h, n, d_v, w)
    scores = torch.einsum("bhnd,bhndw->bhnw", q, k_near) / math.sqrt(q.size(-1))
    position = torch.arange(n, device=q.device)[:, None] - left + torch.arange(width, device=q.device)
    allowed = ((position >= 0) & (position < n))[None, None]  # (1, 1, n, w)
    if keep is not None:
        allowed = allowed & F.pad(keep, (left, right)).unfold(-1, width, 1)[:, None]  # (B, 1, n, w)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return torch.einsum("bhnw,bhndw->bhnd", weights, v_near)
