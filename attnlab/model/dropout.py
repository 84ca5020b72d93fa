"""Dropout (§5.4, P_drop = 0.1) with a cheaper mask on the CPU.

`nn.Dropout` draws its mask with `bernoulli_`, which on a CPU without Intel's MKL path (AMD, Arm)
runs one serial Mersenne-Twister draw per element: 7 ms for a base-sized (120, 17, 512) batch,
17% of a `small` training step here. This module keeps an element when its 16 random bits are at
least P_drop · 2¹⁶ (the same Bernoulli(1 − P_drop) mask up to rounding P_drop to a multiple of
2⁻¹⁶: 0.1 becomes 0.100006). The bits come from attnlab's compiled kernel
(`attnlab.model.kernels.dropout_keep`: a counter-based generator seeded from PyTorch's, all
cores, vectorised, the mask written in x's dtype; 15x faster than its twin; one opaque operation
inside a compiled graph) or, where it is not built, from the twin here: 64 random bits per four
elements from one `randint` over the full int64 range (3.5x faster than `bernoulli_`, and
traceable by `torch.compile` without a graph break, which `Tensor.random_` is not). Both draw
from PyTorch's generator, so a seed fixes every mask; they draw different masks from one seed. On
other devices `nn.Dropout`'s fused kernel is already fast and is used as it is.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.model.kernels import dropout_keep

_LEVELS = 1 << 16  # an element's 16 random bits, read as int16 in [-2¹⁵, 2¹⁵)


class Dropout(nn.Dropout):
    """`nn.Dropout` (same state, same train/eval switch, same 1/(1 − p) scaling)."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:  # x itself, as nn.Dropout returns it, without calling
            return x  # PyTorch (a decoding step passes three dropouts a layer)
        if x.device.type != "cpu":
            return super().forward(x)
        if self.p == 1.0:
            return torch.zeros_like(x)
        keep = dropout_keep(x, self.p)  # the compiled kernel's mask, where it applies
        if keep is None:
            keep = self._twin_mask(x)
        return x * keep * (1.0 / (1.0 - self.p))

    def _twin_mask(self, x: Tensor) -> Tensor:
        """The keep mask in PyTorch operations: 0/1 in x's dtype."""
        n = x.numel()
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device)
        bits = words.view(torch.int16)[:n].view(x.shape)
        # keep = (bits ≥ t) as 0/1 in x's dtype, by a clamp to {t − 1, t} and a subtraction in
        # int16 (neither overflows) and one conversion; the backward pass reuses it. CPU kernels
        # that read a bool tensor (`torch.where`, `x * keep` for a bool keep) ran 2-8x slower
        # than a product of two bf16 tensors, forward and backward (docs/BENCHMARKS.md, training
        # round four). x · keep is exactly x or 0, and the scaling then rounds as nn.Dropout's.
        below = round(self.p * _LEVELS) - _LEVELS // 2 - 1  # t − 1: the largest dropped value
        return bits.clamp(below, below + 1).sub_(below).to(x.dtype)
