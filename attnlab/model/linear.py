"""Inference products through oneDNN on the CPU, with weights packed once.

PyTorch computes fp32 products with MKL, which runs AVX2 kernels on AMD CPUs (`perf` shows
`mkl_blas_def_sgemm_kernel_0_zen` for 52% of a decode); oneDNN, which PyTorch also ships,
JIT-compiles AVX-512 ones. PyTorch reaches oneDNN's product only through
`torch.ops.mkldnn._linear_pointwise`, the op its own compiler emits for linear layers on CPUs,
and that op takes the weight either as it is (re-laid out by oneDNN on every call) or already in
oneDNN's blocked layout (`_reorder_linear_weight`), as Inductor's frozen graphs pass it. Decoding
multiplies the same weights by a few hundred rows a step, or four (one sentence, beam 4), so the
layout is made once per weight (`PackedWeight`) and every step reuses it: on the AMD EPYC, one
thread, the (256 × 8,000) output projection of 64 rows takes 2.8 ms instead of 3.4 ms (oneDNN
unpacked) or 4.1 ms (MKL), of 4 rows 0.19 ms instead of 0.43 or 0.70 (docs/BENCHMARKS.md,
decoding round four). `linear` takes that path where it applies (fp32 or bf16 on the CPU, no
gradient kept, not compiled) and `F.linear` everywhere else, so training and every other path
are unchanged. One sentence at a time a step multiplies four rows, and there oneDNN's ~20 µs a
call is most of the time: up to `kernels.FEW_ROWS` rows `linear` takes attnlab's own kernel on
another copy of the weight, laid out for it (decoding round twelve). `quantized` is the other
inference form, int8 (`attnlab.load(dtype="int8")`).

MKL chooses its kernels by the CPU's vendor: on Intel's own CPUs it runs AVX-512 ones, and there
its fp32 products beat oneDNN's packed ones at the layers' shapes (a Xeon with AMX, one thread:
256 × 256 of 4 rows in 9 µs against 21, of 1,200 rows in 1.0 ms against 1.1), so fp32 layers
use `F.linear` there (`MKL_AVX512`); the output projection keeps its pack (4 rows: 0.35 ms against
0.60), as does bf16, where oneDNN runs AMX (docs/BENCHMARKS.md, decoding round nine).
"""

from __future__ import annotations

import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from attnlab.errors import AttnlabError, warn
from attnlab.model import kernels
from attnlab.model.cpu import BF16_EMULATED, bf16_products, cpu_vendor

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
ONEDNN_BF16 = ONEDNN and bf16_products()  # elsewhere packing a bf16 weight raises: bf16 takes `F.linear`


def mkl_runs_avx512(vendor: str) -> bool:
    """Whether this torch's MKL runs its AVX-512 kernels: it has MKL, the CPU has AVX-512, and
    the CPU is Intel's (elsewhere MKL runs generic AVX2 kernels, whatever the CPU supports)."""
    avx512 = getattr(torch.cpu, "_is_avx512_supported", lambda: False)()  # (a private probe: absent, say no)
    return torch.backends.mkl.is_available() and avx512 and vendor == "GenuineIntel"


MKL_AVX512 = mkl_runs_avx512(cpu_vendor())


class PackedWeight:
    """A weight's copies laid out for the products that read it (`form`: oneDNN's blocked layout,
    or the column tiles of `kernels.few_rows_linear`), each made on first use and all remade
    whenever they may no longer match: the
    weight is another tensor (checked by identity, not by address, which a new tensor can
    reuse), its storage moved (`.to()`, `.data = ...`), it was changed in place (its version
    counter: `load_state_dict`, an edit under `no_grad`), or any optimizer has taken a step
    since (fused Adam updates parameters in place without bumping their version counter). A
    change made through `.data` bumps nothing and is not seen: the one way to fool it."""

    def __init__(self) -> None:
        self.made: tuple[weakref.ref[Tensor], tuple[int, int, int], dict[str, Tensor]] | None = None

    def of(self, weight: Tensor, form: str = "onednn") -> Tensor | None:
        """The copy in `form` ("onednn" or "tiles"), or None where there is none to use."""
        if weight.is_inference() or weight.dtype not in (torch.float32, torch.bfloat16):
            return None  # (inference tensors keep no version counter)
        key = (weight.data_ptr(), weight._version, _updates[0])
        made = self.made
        if made is None or made[0]() is not weight or made[1] != key:
            made = (weakref.ref(weight), key, {})
            self.made = made  # one tuple: a thread-safe swap
        copies = made[2]
        if form == "onednn" and weight.dtype == torch.bfloat16 and not ONEDNN_BF16:
            return None
        if form not in copies:
            copies[form] = _PACKERS[form](weight.detach())
        return copies[form]

    def __getstate__(self) -> dict[str, None]:
        """Copies and pickles start empty: oneDNN's opaque tensor has no storage to copy."""
        return {"made": None}


_PACKERS = {"onednn": lambda weight: torch.ops.mkldnn._reorder_linear_weight(weight), "tiles": kernels.column_tiles}
_updates = [0]  # optimizer steps taken in this process, the part of a pack's key that fused steps move


def _count_update(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
    _updates[0] += 1


register_optimizer_step_post_hook(_count_update)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: PackedWeight | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN on the CPU when no gradient is kept and the
    call runs eagerly: on the packed copy where `packed` has one (fp32, bf16), else on the
    weight as it is (fp32). Up to `kernels.FEW_ROWS` rows with a `packed`, attnlab's own kernel
    on column tiles instead (one sentence's beam: 4-5x faster than oneDNN for a 256 × 256 layer)."""
    if torch.compiler.is_compiling():  # a compiled graph chooses its own kernels (and packs for itself)
        return F.linear(x, weight, bias)
    if ONEDNN and not torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == weight.dtype:
        if packed is not None and x.numel() <= kernels.FEW_ROWS * x.size(-1) and kernels.compiled(x) is not None:
            tiles = packed.of(weight, "tiles")
            out = None if tiles is None else kernels.few_rows_linear(x, tiles, bias, weight.size(0))
            if out is not None:
                return out
        blocked = None if packed is None else packed.of(weight)
        if blocked is not None or x.dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise(x, weight if blocked is None else blocked, bias, "none", [], "")
    return F.linear(x, weight, bias)


class InferenceLinear(nn.Linear):
    """An `nn.Linear` whose forward is `linear` on a packed copy of its weight (same
    parameters, same state dict), or MKL's product in fp32 where MKL runs its AVX-512 kernels."""

    packed: PackedWeight

    def forward(self, x: Tensor) -> Tensor:
        if MKL_AVX512 and x.dtype == torch.float32:
            return F.linear(x, self.weight, self.bias)
        return linear(x, self.weight, self.bias, self.packed)


def for_inference(model: nn.Module) -> nn.Module:
    """Route every `nn.Linear` of `model` through `linear` on packed weights, in place: what
    `attnlab.load` does for fp32 and bf16 models (they still train as they are: with gradients
    `linear` is `F.linear`). Not done at construction: int8 quantization (`quantize_dynamic`)
    swaps exact `nn.Linear`s only. A bf16 model on a CPU without bf16 products is warned about:
    there it decodes a batch ~4x slower than in fp32 (test2016's first 200 lines on an AVX2 EPYC:
    12.1 s against 2.9)."""
    if not ONEDNN_BF16 and any(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in model.parameters()):
        warn(f"{BF16_EMULATED}: bf16 decodes batches ~4x slower than fp32 here; use fp32")
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = InferenceLinear
            module.packed = PackedWeight()
    return model


def quantized(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear with int8 weights (per tensor) and activations quantized per call
    (`torch.ao.quantization.quantize_dynamic`); the embedding, the tied output projection and
    attention itself stay fp32 (an untied output matrix is an nn.Linear: int8 too). Its deprecation notice (the API moves to torchao) is silenced:
    it says nothing a reader of a translation can act on."""
    if next(model.parameters()).device.type != "cpu":
        raise AttnlabError("dtype int8 runs on the CPU only (use bf16 on a GPU)")
    from torch.ao.quantization import quantize_dynamic  # lazy: only int8 loads need it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
