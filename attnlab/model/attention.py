"""Eq. (1), scaled dot-product attention, and its restricted form (Table 1's last row).

`attention` is the explicit softmax(QKᵀ/√d_k)·V that returns its weights (what recording reads);
the model runs PyTorch's fused kernel instead when nothing is recorded. Called directly, it checks
that the shapes fit first; the model calls `explicit_attention`, the same without that check.
`local_attention` lets each query meet only the keys within distance r, in O(n·r·d) time and
memory, which is what makes restricted self-attention cheaper than global attention for long
sequences; it equals `attention` under `window_mask` (tested), so recording a restricted model
stays exact.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.errors import ModelInputError


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, Eq. (1): softmax(QKᵀ/√d_k)·V, returning the weights too.

    q: (..., Lq, d_k), k: (..., Lk, d_k), v: (..., Lk, d_v), their leading dimensions broadcasting
    together; `mask` broadcasts to the weights' (..., Lq, Lk) and is True where attending is
    allowed (a bool tensor: PyTorch's additive float masks mean something else). Masked cells get
    exactly zero weight; a row with no allowed key (which attnlab never builds) gets all zeros
    instead of NaN, and only such a row: a NaN in q, k or v stays visible. Shapes that do not fit,
    and q, k, v that are not floating-point tensors of one dtype and device, are one line naming
    them (PyTorch's error from inside a product before, a NumPy array's "axes don't match array",
    or a mask broadcast into more dimensions without a word).
    """
    check_inputs(q, k, v, mask)
    return explicit_attention(q, k, v, mask)


def check_inputs(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> None:
    """`attention`'s check, from the types and shapes alone (no tensor operation, nothing read
    from the device). The model's own calls skip it: their inputs fit by construction, and its
    ~9 µs of Python are a seventh of one incremental-decoding call on the CPU (one query over 20 keys)."""
    given = {"q": q, "k": k, "v": v, **({} if mask is None else {"mask": mask})}
    if not all(isinstance(x, Tensor) for x in given.values()):
        kinds = ", ".join(f"{name} {type(x).__name__}" for name, x in given.items())
        raise ModelInputError(f"attention takes torch tensors (torch.as_tensor turns arrays into them); got {kinds}")
    if not q.is_floating_point() or len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
        kinds = ", ".join(f"{name} {x.dtype} on {x.device}" for name, x in given.items() if name != "mask")
        raise ModelInputError(f"attention takes q, k and v of one floating-point dtype on one device; got {kinds}")
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    batch = _broadcast(qs[:-2], ks[:-2]) if min(len(qs), len(ks), len(vs)) >= 2 else None
    fits = batch is not None and qs[-1] == ks[-1] and ks[-2] == vs[-2] and _broadcast(batch, vs[:-2]) is not None
    if fits and mask is not None:  # into the weights' (..., Lq, Lk), never enlarging them
        weights = (*batch, qs[-2], ks[-2])
        fits = _broadcast(tuple(mask.shape), weights) == weights
    if not fits:
        given = f"q {qs}, k {ks}, v {vs}" + ("" if mask is None else f", mask {tuple(mask.shape)}")
        raise ModelInputError(
            "attention takes q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v), their leading dimensions "
            f"broadcasting together, and a mask that broadcasts to (..., Lq, Lk); got {given}"
        )


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape `a` and `b` broadcast to (NumPy's rule), or None where they do not."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b, strict=True)):
        return None
    return tuple(x if y == 1 else y for x, y in zip(a, b, strict=True))


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """`attention` without the shape check: what the model's inner path calls. `dropout` drops
    weights before they weigh the values (training's attention dropout); the weights returned
    are the softmax's, as a recording reads them."""
    if mask is not None and mask.dtype != torch.bool:
        raise ModelInputError(f"the mask must be a bool tensor, True where attending is allowed; got {mask.dtype}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return (F.dropout(weights, dropout) if dropout else weights) @ v, weights


BANDED_FROM = 12  # the banded kernel once a sequence is this many windows (2r + 1) long; below, the
# fused dense kernel is faster on the CPU (benchmarks/local_attention.py: about 200 positions at r = 8)


def window_mask(queries: int, keys: int, window: int, causal: bool, device: torch.device | str) -> Tensor:
    """(1, 1, Lq, Lk) restricted self-attention, True where allowed: the queries are the last Lq
    of the Lk positions; each sees keys within distance `window`, and with `causal` none after it."""
    q = torch.arange(keys - queries, keys, device=device)[:, None]
    k = torch.arange(keys, device=device)[None, :]
    allowed = (q - k <= window) & (k <= q) if causal else (q - k).abs() <= window
    return allowed[None, None]


def local_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool, keep: Tensor | None = None, dropout: float = 0.0
) -> Tensor:
    """Eq. (1) restricted to the keys within `window` of each query (Table 1's last row) in
    O(n·r·d) time and memory. The queries are cut into blocks of b = max(r, 16) positions; a
    block meets only the b + 2r keys around it (causal: b + r), all blocks in one call of the
    fused kernel with the band as its mask. Equals `attention` under `window_mask`.

    q, k: (B, h, n, d_k), v: (B, h, n, d_v); `keep` (B, n) marks real (unpadded) keys; `dropout`
    as `explicit_attention`'s."""
    batch, heads, n, _ = q.shape
    left, right = window, 0 if causal else window
    block = max(window, 16)
    blocks = -(-n // block)
    tail = blocks * block - n  # queries padded to whole blocks (their rows are dropped at the end)
    span = block + left + right  # the keys one block of queries can reach

    def around(x: Tensor) -> Tensor:  # (B, h, n, d) -> (B·blocks, h, span, d): each block's keys
        near = F.pad(x, (0, 0, left, right + tail)).unfold(-2, span, block)  # (B, h, blocks, d, span)
        return near.permute(0, 2, 1, 4, 3).flatten(0, 1)

    queries = (
        F.pad(q, (0, 0, 0, tail)).unflatten(-2, (blocks, block)).transpose(1, 2).flatten(0, 1)
    )  # (B·blocks, h, b, d)
    i = torch.arange(block, device=q.device)[:, None]  # query offset in its block
    j = torch.arange(span, device=q.device)[None, :] - left  # key offset from the block's start
    allowed = ((i - j <= window) & (j <= i)) if causal else (i - j).abs() <= window  # (b, span)
    start = torch.arange(blocks, device=q.device)[:, None, None] * block
    real = (start + j >= 0) & (start + j < n)  # (blocks, 1, span): keys that exist
    allowed = (allowed & real)[None]  # (1, blocks, b, span)
    if keep is not None:
        allowed = allowed & F.pad(keep, (left, right + tail)).unfold(-1, span, block)[:, :, None, :]
    allowed = allowed | (start + i >= n)  # padded query rows: anything, so no row is empty
    mask = allowed.expand(batch, -1, -1, -1).flatten(0, 1)[:, None]  # (B·blocks, 1, b, span)
    out = F.scaled_dot_product_attention(queries, around(k), around(v), attn_mask=mask, dropout_p=dropout)
    return out.unflatten(0, (batch, blocks)).transpose(1, 2).flatten(2, 3)[:, :, :n]
