"""fp32 matrix products through oneDNN for inference on the CPU.

PyTorch computes fp32 products with MKL, which runs AVX2 kernels on AMD CPUs (`perf` shows
`mkl_blas_def_sgemm_kernel_0_zen` for 52% of a decode); oneDNN, which PyTorch also ships,
JIT-compiles AVX-512 ones: 5-23% faster for the decoder's products on the 2-core AMD EPYC,
9-12% on a whole test2016 decode (docs/BENCHMARKS.md, decoding round three). PyTorch reaches
oneDNN's fp32 product only through `torch.ops.mkldnn._linear_pointwise`, the op its own compiler
emits for linear layers on CPUs; `linear` calls it where it applies and `F.linear` everywhere
else (gradients, bf16, a GPU, a build without oneDNN), so training and every other path are
unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`; through oneDNN for fp32 on the CPU when no gradient is kept."""
    if ONEDNN and not torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


class InferenceLinear(nn.Linear):
    """An `nn.Linear` whose forward is `linear` (same parameters, same state dict)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def for_inference(model: nn.Module) -> nn.Module:
    """Route every `nn.Linear` of `model` through `linear`, in place: what `attnlab.load` does for
    fp32 models. Not done at construction: int8 quantization (`quantize_dynamic`) swaps exact
    `nn.Linear`s only."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = InferenceLinear
    return model
