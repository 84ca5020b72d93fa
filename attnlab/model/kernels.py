"""attnlab's hand-written kernels, compiled on first use, and their PyTorch twins.

`cached_attention` is Eq. (1) for one new query per row over a beam search's key/value store
(`attnlab.model.cache`), gathering each row's history while it reads instead of copying the
cache into the beams' new order every step (csrc/cached_attention.cpp says how). PyTorch has no
operation that attends through an index, and the copy it would need is what the kernel saves: on
test2016 it makes fp32 decoding 1.1x faster (docs/BENCHMARKS.md, round eight). `top_k` is the
search's per-row top-k in one pass, `few_rows_linear` a layer's product for one sentence's few
rows (4 a step with beam 4), where oneDNN's per-call cost is most of the time (decoding round
twelve), and `dropout_keep` dropout's mask from a counter-based generator that any thread can
compute any part of (csrc/dropout_mask.cpp), where PyTorch's CPU generator draws serially
(training round seven), `smoothed_loss` training's label-smoothed loss with its gradient
written in the same pass over the logits (csrc/smoothed_loss.cpp; `train.regime.OnePassLoss`),
and `grad_norm` the update's gradient norm in one parallel pass over all the gradients.

The kernels are compiled with the machine's own compiler the first time one is needed (about
30-45 s on two cores, said in one line; `make setup` does it ahead), for this CPU's vector
instructions, and cached on disk per PyTorch version, source, checkout and CPU (`build_name`;
`TORCH_EXTENSIONS_DIR`, by default ~/.cache/torch_extensions). Written by hand because no
library offers them: PyTorch has no gather-while-attending operation, no parallel CPU generator
and no loss that writes its gradient as it goes, its products (oneDNN, MKL) spend ~20 µs a call
before four rows' worth of work, and CTranslate2's own kernels are not callable on PyTorch
tensors. Where they cannot be built (no C++ compiler), attnlab warns once, in one line, and runs
the twins, the same maths in PyTorch operations (tested equal; the twin of `dropout_keep` draws
its masks from PyTorch's generator instead; `few_rows_linear`'s is oneDNN's product; the loss's
is `label_smoothed_loss`) and slower; `ATTNLAB_KERNELS=0` chooses that path.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from attnlab.errors import warn
from attnlab.model.attention import explicit_attention
from attnlab.model.cpu import cpu_signature

SOURCES = sorted(Path(__file__).with_name("csrc").glob("*.cpp"))
HEADERS = sorted(Path(__file__).with_name("csrc").glob("*.h"))
_built: dict[str, ModuleType | None] = {}
_NO_LENGTHS = torch.empty(0, dtype=torch.int32)  # the kernel's "every row sees every position"


def enabled() -> bool:
    """Whether attnlab may use its compiled kernels: `ATTNLAB_KERNELS=0` turns them off (to
    compare the two paths, or on a machine where compiling is unwelcome)."""
    return os.environ.get("ATTNLAB_KERNELS", "1") != "0"


def build_name(cpu: str) -> str:
    """The extension's name, one per PyTorch version, source text, source folder and CPU: two
    attnlab checkouts never load each other's build, nor rebuild it (with the same text at
    another path, PyTorch's ninja file changes and the whole build ran again, 80 s, each time
    the other checkout ran), and a home directory shared by machines with other CPUs never
    loads another CPU's (compiled with -march=native, a build made where AMX is may use it, and
    an illegal instruction kills a process on a CPU without it)."""
    text = b"".join(path.read_bytes() for path in [*SOURCES, *HEADERS])
    digest = hashlib.sha1(text + str(SOURCES[0].parent.resolve()).encode() + cpu.encode())
    version = re.sub(r"\W", "_", torch.__version__)
    return f"attnlab_kernels_{version}_{digest.hexdigest()[:10]}"


def extension() -> ModuleType | None:
    """The compiled kernels, built once per process (and cached on disk across processes); None
    where they cannot be built, said once in one line. A build, which takes a while, is announced
    in one line on stderr first."""
    if "module" not in _built:
        _built["module"] = None
        try:
            from torch.utils import cpp_extension  # lazy: pulls in setuptools, only when used

            name = build_name(cpu_signature())
            directory = Path(cpp_extension._get_build_directory(name, verbose=False))
            _built["module"] = _built_before(cpp_extension, name, directory)
            if _built["module"] is None:
                _wait_or_clear(directory / "lock")
                print("attnlab: compiling its C++ kernels for this CPU, once (30-60 s)", file=sys.stderr, flush=True)
                with _ninja_on_path():
                    _built["module"] = cpp_extension.load(
                        name=name,
                        sources=[str(path) for path in SOURCES],
                        extra_cflags=["-O3", "-march=native", "-fopenmp"],
                        extra_ldflags=["-fopenmp"],
                    )
        except Exception as error:  # noqa: BLE001 - any build failure means: use the PyTorch twin
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            warn(f"attnlab's kernels could not be built ({reason}); decoding and dropout run in PyTorch operations")
    return _built["module"]


def _built_before(cpp_extension: ModuleType, name: str, directory: Path) -> ModuleType | None:
    """The build on disk, imported without PyTorch's build lock (its name says which sources,
    CPU and PyTorch made it); None where there is none that imports. `cpp_extension.load` takes
    the lock in every process, to run ninja, and waits for it with no end: a process killed while
    it held it (0.2-2 s of every start) left every later `train` and `translate` waiting forever."""
    if not (directory / f"{name}.so").exists():
        return None
    try:
        return cpp_extension._import_module_from_library(name, str(directory), True)
    except (ImportError, OSError):  # a build cut short: built again
        return None


def _wait_or_clear(lock: Path, stale_after_s: float = 900.0) -> None:
    """Say so before waiting for another process's build, and clear a lock older than any build
    (one takes 30-90 s): PyTorch waits for it to go, forever and without a word."""
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return  # no lock: nothing to wait for
    if age > stale_after_s:
        warn(f"removing {lock}, left by a build of attnlab's kernels that was stopped {age / 60:.0f} min ago")
        lock.unlink(missing_ok=True)
    else:
        warn(f"waiting for another process's build of attnlab's kernels (if none is running, remove {lock})")


@contextmanager
def _ninja_on_path() -> Iterator[None]:
    """PyTorch runs `ninja` from PATH; the `ninja` package (a dependency) keeps its binary beside
    the interpreter's scripts, which are not on PATH when `.venv/bin/python` runs unactivated."""
    saved = os.environ.get("PATH", "")
    try:
        import ninja  # optional: a system ninja on PATH serves as well

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + saved
    except ImportError:
        pass
    try:
        yield
    finally:
        os.environ["PATH"] = saved


def compiled(x: Tensor) -> ModuleType | None:
    """The kernel where it applies to `x`'s device and dtype (fp32 or bf16 on the CPU) and is
    built and wanted, else None."""
    usable = x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and enabled()
    return extension() if usable else None


def cached_attention(
    q: Tensor, k: Tensor, v: Tensor, slots: Tensor, first: int, length: int, lengths: Tensor | None = None
) -> Tensor:
    """softmax(q·Kᵀ/√d_k)·V for one query per row over positions [first, length) of a store.

    q: (N, h, d_k); k: (T, S, h, d_k) and v: (T, S, h, d_v), position t of slot s at [t, s] (any
    strides but the last two dimensions'); slots: (N, ≥ length) int32, the slot of row i's
    position t (a stride of 0 along positions: one slot throughout); `lengths` (N,) int32: row i
    sees only positions below lengths[i] (a padded source). Returns (N, h, d_v). The compiled
    kernel where it applies, else `gathered_attention`."""
    module = compiled(q)
    if module is None:
        return gathered_attention(q, k, v, slots, first, length, lengths)
    lengths = _NO_LENGTHS if lengths is None else lengths
    return module.cached_attention(q.contiguous(), k, v, slots, lengths, first, length)


def gather(store: Tensor, slots: Tensor, first: int, length: int) -> Tensor:
    """Rows' histories from a (T, S, h, d) store: (N, h, length - first, d), in order."""
    positions = torch.arange(first, length, device=store.device)
    return store[positions[None, :], slots[:, first:length].long()].permute(0, 2, 1, 3)


def gathered_attention(
    q: Tensor, k: Tensor, v: Tensor, slots: Tensor, first: int, length: int, lengths: Tensor | None = None
) -> Tensor:
    """`cached_attention` in PyTorch operations: copy the histories out, then Eq. (1) as
    `attention` computes it (a row that sees no key gets zeros there too)."""
    keys, values = gather(k, slots, first, length), gather(v, slots, first, length)
    mask = None
    if lengths is not None:  # (N, 1, 1, L): the positions each row sees
        mask = (torch.arange(first, length, device=q.device) < lengths.to(q.device)[:, None])[:, None, None, :]
    return explicit_attention(q[:, :, None], keys, values, mask)[0][:, :, 0]


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor] | None:
    """Each row's k largest values (largest first) and their columns, for a (rows, columns) fp32
    tensor, in one pass over it where the kernel applies (else None: the caller's `topk`). Among
    equal values the earlier column is kept, where `torch.topk` promises no order."""
    module = compiled(x) if x.dtype == torch.float32 and x.dim() == 2 and 0 < k <= x.size(1) else None
    return None if module is None else module.top_k(x.contiguous(), k)


def log_softmax_top_k(logits: Tensor, k: int, skip: Tensor, column: int) -> tuple[Tensor, Tensor, Tensor] | None:
    """For (rows, V) logits (fp32 or bf16): each row's k most likely columns under
    `log_softmax`, never one in `skip` (which still count in the normaliser), as fp32
    log-probabilities (best first) and columns, and column `column`'s log-probability (rows,):
    one pass a row, the (rows, V) log-softmax never written. None where the kernel does not
    apply (the caller's `log_softmax` and `top_moves` then). The same numbers to rounding: its
    e^x and its sum's order are its own (tests/test_kernels.py)."""
    usable = logits.dim() == 2 and 0 < k <= logits.size(1) and 0 <= column < logits.size(1)
    module = compiled(logits) if usable else None
    return None if module is None else module.log_softmax_top_k(logits.contiguous(), k, skip.cpu(), column)


FEW_ROWS = 4  # up to here the kernel beats oneDNN's packed product at every layer shape measured
TILE = 64  # output columns per tile (csrc/few_rows.cpp)


def column_tiles(weight: Tensor) -> Tensor:
    """An (N, K) weight as `few_rows_linear` reads it: (⌈N / 64⌉, K, 64), tile t holding
    columns [64t, 64t + 64) of Wᵀ contiguously (zeros past N)."""
    n, k = weight.shape
    padded = torch.nn.functional.pad(weight.detach(), (0, 0, 0, -n % TILE))
    return padded.view(-1, TILE, k).transpose(1, 2).contiguous()


def few_rows_linear(x: Tensor, tiles: Tensor, bias: Tensor | None, out_features: int) -> Tensor | None:
    """`F.linear(x, W, bias)` for x with at most `FEW_ROWS` rows (any leading shape), W given as
    `column_tiles(W)`, in x's dtype (fp32 or bf16; sums in fp32); None where the kernel does not
    apply (the caller's product then)."""
    module = compiled(x)
    if module is None:
        return None
    rows = x.reshape(-1, x.size(-1)).contiguous()
    bias = None if bias is None else bias.contiguous()
    return module.few_rows_linear(rows, tiles, bias, out_features).view(*x.shape[:-1], out_features)


def smoothed_loss(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor, Tensor] | None:
    """For (rows, V) logits (fp32 or bf16) and (rows,) target ids: each row's label-smoothed loss
    and NLL (fp32, 0 where the target is `pad_id`) and the loss's gradient with respect to the
    logits, softmax(x) − q, in their dtype (zero rows at `pad_id`), in one pass a row
    (csrc/smoothed_loss.cpp). None where the kernel does not apply (the caller's
    `label_smoothed_loss` then). The same numbers to rounding: its e^x and its sums' order are
    its own (tests/test_one_pass_loss.py)."""
    module = compiled(logits) if logits.dim() == 2 and target.dim() == 1 else None
    if module is None:
        return None
    return module.smoothed_loss(logits.contiguous(), target.long().contiguous(), eps, pad_id)


def scale_(x: Tensor, by: Tensor) -> Tensor:
    """x *= by (one value, a tensor: a gradient as autograd passes it, read here and not by the
    caller), in x's dtype, and x: a loss's gradient times the incoming one. The kernel takes
    6.5 ms for a bf16 (1,936, 37,000) table on two threads, `Tensor.mul_` 13."""
    module = compiled(x) if x.is_contiguous() and by.device == x.device else None
    if module is None:
        return x.mul_(by)
    module.scale_(x, by)
    return x


def grad_norm(tensors: list[Tensor]) -> Tensor | None:
    """The L2 norm of all of `tensors`' values together (an fp32 0-dim tensor), as
    `torch.nn.utils.get_total_norm` gives it, where all are contiguous fp32 CPU tensors and the
    kernels are built; else None (the caller's `get_total_norm`). Base's gradients on two threads:
    10 ms against 24, and nearer fp64's sum (csrc/grad_norm.cpp)."""
    usable = bool(tensors) and all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors)
    module = compiled(tensors[0]) if usable and all(t.device.type == "cpu" for t in tensors) else None
    return None if module is None else module.grad_norm(tensors)


def dropout_keep(x: Tensor, p: float) -> Tensor | None:
    """Dropout's keep mask for `x`: 1 with probability 1 − p (p rounded to a multiple of 2⁻¹⁶),
    else 0, in x's dtype and shape, seeded from PyTorch's generator; None where the kernel does
    not apply (the caller's PyTorch twin draws the mask then). Inside a compiled graph the kernel
    is one opaque operation (`attnlab::dropout_keep`), so a compiled model draws eager
    training's masks, without a graph break."""
    threshold = round(p * 2**16)
    if threshold > 0xFFFF:
        return None
    if torch.compiler.is_compiling():
        return torch.ops.attnlab.dropout_keep(x.detach(), threshold) if _built_for(x.device.type, x.dtype) else None
    module = compiled(x)
    return None if module is None else _draw_mask(module, x, threshold)


def _draw_mask(module: ModuleType, x: Tensor, threshold: int) -> Tensor:
    seed = int(torch.randint(-(2**63), 2**63 - 1, (1,), dtype=torch.int64))
    return module.dropout_keep(x, seed, threshold)


def _built_for(device_type: str, dtype: torch.dtype) -> bool:
    """`compiled` for a graph being traced, answered once then (building the kernels if needed)."""
    return compiled(torch.empty(0, dtype=dtype, device=device_type)) is not None


# Dynamo calls it once while tracing and keeps the answer as a constant, rather than tracing into
# `extension()` (a graph break). This attribute is all `torch.compiler.assume_constant_result`
# sets, but the decorator imports torch._dynamo, which made `import attnlab` 2 s slower (every
# command that loads no checkpoint: `attnlab --help` 4.1 s, now 2.1). tests/test_compile.py
# (`..._first_loaded_while_tracing_...`) fails if the attribute stops working, and
# tests/test_layout.py if `import attnlab` imports dynamo again.
_built_for._dynamo_marked_constant = True  # type: ignore[attr-defined]


@torch.library.custom_op("attnlab::dropout_keep", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,))
def _dropout_keep_op(x: Tensor, threshold: int) -> Tensor:
    module = compiled(x)
    assert module is not None  # (`_built_for` said so when the graph was traced)
    return _draw_mask(module, x, threshold)


@_dropout_keep_op.register_fake
def _(x: Tensor, threshold: int) -> Tensor:
    return x.new_empty(x.shape)  # contiguous, as the kernel writes it
