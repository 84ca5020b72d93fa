"""Inference products through oneDNN on the CPU, with weights packed once.

PyTorch computes fp32 products with MKL, which runs AVX2 kernels on AMD CPUs (`perf` shows
`mkl_blas_def_sgemm_kernel_0_zen` for 52% of a decode); oneDNN, which PyTorch also ships,
JIT-compiles AVX-512 ones. PyTorch reaches oneDNN's product only through
`torch.ops.mkldnn._linear_pointwise`, the op its own compiler emits for linear layers on CPUs,
and that op takes the weight either as it is (re-laid out by oneDNN on every call) or already in
oneDNN's blocked layout (`_reorder_linear_weight`), as Inductor's frozen graphs pass it. Decoding
multiplies the same weights by a few hundred rows a step, or four (one sentence, beam 4), so the
layout is made once per weight (`PackedWeight`) and every step reuses it: on the 2-core AMD EPYC
the (256 × 8,000) output projection takes 1.7 ms instead of 3.7 ms (oneDNN unpacked) or 4.7 ms
(MKL) for 64 rows (docs/BENCHMARKS.md, decoding round four). `linear` takes that path where it
applies (fp32 or bf16 on the CPU, no gradient kept) and `F.linear` everywhere else, so training
and every other path are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedWeight:
    """A frozen weight's copy in oneDNN's blocked layout, remade whenever the weight is not the
    one it was made from (another tensor, another dtype, or changed in place: `load_state_dict`,
    an edit under `no_grad`), so a stale copy is never multiplied. Weights that still train
    (`requires_grad`) are never packed: fused optimizers update them in place without bumping
    the version counter that would tell."""

    def __init__(self) -> None:
        self.made: tuple[tuple[int, int, torch.dtype], Tensor] | None = None

    def of(self, weight: Tensor) -> Tensor | None:
        """The packed copy, or None where there is none to use."""
        if weight.requires_grad or weight.is_inference() or weight.dtype not in (torch.float32, torch.bfloat16):
            return None  # (inference tensors keep no version counter)
        key = (weight.data_ptr(), weight._version, weight.dtype)
        if self.made is None or self.made[0] != key:
            self.made = (key, torch.ops.mkldnn._reorder_linear_weight(weight))  # one tuple: a thread-safe swap
        return self.made[1]

    def __getstate__(self) -> dict[str, None]:
        """Copies and pickles start empty: oneDNN's opaque tensor has no storage to copy."""
        return {"made": None}


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: PackedWeight | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN on the CPU when no gradient is kept: on the
    packed copy where `packed` has one (fp32, bf16), else on the weight as it is (fp32)."""
    if ONEDNN and not torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == weight.dtype:
        blocked = None if packed is None else packed.of(weight)
        if blocked is not None or x.dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise(x, weight if blocked is None else blocked, bias, "none", [], "")
    return F.linear(x, weight, bias)


class InferenceLinear(nn.Linear):
    """An `nn.Linear` whose forward is `linear` on a packed copy of its weight (same
    parameters, same state dict)."""

    packed: PackedWeight

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.packed)


def for_inference(model: nn.Module) -> nn.Module:
    """Freeze `model` and route every `nn.Linear` of it through `linear` on packed weights, in
    place: what `attnlab.load` does for fp32 and bf16 models. Not done at construction: int8
    quantization (`quantize_dynamic`) swaps exact `nn.Linear`s only."""
    model.requires_grad_(False)
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = InferenceLinear
            module.packed = PackedWeight()
    return model
