"""Dropout (§5.4, P_drop = 0.1) with a cheaper mask on the CPU.

`nn.Dropout` draws its mask with `bernoulli_`, which on a CPU without Intel's MKL path (AMD, Arm)
runs one serial Mersenne-Twister draw per element: 7 ms for a base-sized (120, 17, 512) batch,
17% of a `small` training step here. This module draws 64 random bits per four elements instead
(one vectorised `randint` over the full int64 range) and keeps an element when its 16 bits are at
least P_drop · 2¹⁶ above the minimum: the same Bernoulli(1 − P_drop) mask up to rounding P_drop
to a multiple of 2⁻¹⁶ (0.1 becomes 0.100006), 3.5× faster, and traceable by `torch.compile`
without a graph break (`Tensor.random_` is not). On other devices `nn.Dropout`'s fused kernel
is already fast and is used as it is.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LEVELS = 1 << 16  # an element's 16 random bits, read as int16 in [-2¹⁵, 2¹⁵)


class Dropout(nn.Dropout):
    """`nn.Dropout` (same state, same train/eval switch, same 1/(1 − p) scaling)."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:  # x itself, as nn.Dropout returns it (and no call: decoding
            return x  # passes 3 dropouts a layer a step)
        if x.device.type != "cpu":
            return super().forward(x)
        if self.p == 1.0:
            return torch.zeros_like(x)
        n = x.numel()
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device)
        bits = words.view(torch.int16)[:n].view(x.shape)
        # keep = (bits ≥ t) as 0/1 in x's dtype, by a clamp to {t − 1, t} and a subtraction in
        # int16 (neither overflows) and one conversion; the backward pass reuses it. CPU kernels
        # that read a bool tensor (`torch.where`, `x * keep` for a bool keep) ran 2-8x slower
        # than a product of two bf16 tensors, forward and backward (docs/BENCHMARKS.md, training
        # round four). x · keep is exactly x or 0, and the scaling then rounds as nn.Dropout's.
        below = round(self.p * _LEVELS) - _LEVELS // 2 - 1  # t − 1: the largest dropped value
        keep = bits.clamp(below, below + 1).sub_(below).to(x.dtype)
        return x * keep * (1.0 / (1.0 - self.p))
