"""The paper's training choices as small functions: the learning rate of Eq. (3), label-smoothed
cross-entropy (§5.4), Adam(0.9, 0.98, 1e-9) (§5.3), and which attention kernel trains fastest
where.
"""

from __future__ import annotations

import contextlib
import numbers
import shutil
import sys

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnlab.errors import ConfigError, ModelInputError
from attnlab.model import kernels


def learning_rate(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """Eq. (3): d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
    for name, value in (("d_model", d_model), ("warmup", warmup)):  # (-4: a complex number; 0: ZeroDivisionError)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{name} must be a positive whole number, got {value!r}")
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_loss(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed (label-smoothed loss, NLL) over non-pad targets (§5.4, Szegedy et al.).

    q = (1 - ε)·one_hot + ε/V; the NLL is returned separately because perplexity is of it.
    Written with log Z = logsumexp(logits), as log p = logits − log Z: −log p_target and the mean
    of −log p over V are log Z − logits_target and log Z − mean(logits), so no (B, L, V) table of
    log-probabilities is written and kept for the backward pass (compiled on a 2-core CPU, base's
    37,000-word loss: 71-78 ms instead of 93-107 ms forward and backward; the same values).
    """
    _check_loss_inputs(logits, target, eps)
    x = logits.float()  # (B, L, V)
    log_z = torch.logsumexp(x, dim=-1)
    keep = target.ne(pad_id)
    nll = log_z - _target_logit(x, target)
    smooth = log_z - x.mean(-1)
    loss = (1.0 - eps) * nll + eps * smooth
    # where(), not loss[keep]: boolean indexing has a data-dependent shape (a graph break and a
    # host synchronisation when compiled); the masked sum adds the same terms.
    return torch.where(keep, loss, 0.0).sum(), torch.where(keep, nll, 0.0).sum()


def _check_loss_inputs(logits: Tensor, target: Tensor, eps: float) -> None:
    """One line for ε outside [0, 1) (2.0 gave the vocabulary negative weights) and for shapes or
    ids torch refused deep inside. Shapes are free to check when compiled (guards); the ids only
    eagerly on the CPU: elsewhere reading them back waits for the device (or breaks the graph)."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0.0 <= eps < 1.0:
        raise ConfigError(f"eps must be a number in [0, 1), got {eps!r}")
    if not isinstance(logits, Tensor) or not isinstance(target, Tensor) or target.dtype != torch.int64:
        got = " and ".join(str(getattr(t, "dtype", type(t).__name__)) for t in (logits, target))
        raise ModelInputError(f"logits must be a float tensor and target a tensor of int64 ids, got {got}")
    if logits.dim() < 1 or logits.shape[:-1] != target.shape:
        shapes = f"{tuple(logits.shape)} and {tuple(target.shape)}"
        raise ModelInputError(f"logits must be (..., V) and target (...), the same leading shape; got {shapes}")
    if target.device.type == "cpu" and target.numel() and not torch.compiler.is_compiling():
        low, high = (int(bound) for bound in torch.aminmax(target))
        if low < 0 or high >= logits.size(-1):
            bad = low if low < 0 else high
            raise ModelInputError(f"target holds id {bad}, outside the logits' vocabulary [0, {logits.size(-1)})")


def _target_logit(x: Tensor, target: Tensor) -> Tensor:
    """x[..., target]: eagerly a gather; compiled, the one non-zero term of a where()-sum over the
    vocabulary, which Inductor folds into the pass that takes log Z, and whose backward joins the
    softmax's in one pass over the (N, V) gradient. A gather's backward is a scatter into a new
    zeroed (N, V) float table, written and read again. Compiled, base's 37,000-word loss over
    1,924 positions in fp32, forward and backward on one CPU thread: 494 → 386 ms (about 2% of a
    base step); on an H200 at 25k positions, as fast as before (5.0-5.2 ms) but the step's peak
    memory 13.2 → 9.9 GiB (docs/BENCHMARKS.md, GPU paper runs). Same values: the sum adds exact
    zeros to the one logit. The ids are compared as int32, not int64: Inductor's CPU code makes
    and compares a vector of indices for every 32 logits, twice as many registers in int64, and
    base's loss, forward and backward on two threads of the Intel Xeon, took 72-77 ms with int64
    and 57-58 with int32 (docs/BENCHMARKS.md, training round twenty-three)."""
    if not torch.compiler.is_compiling():  # eagerly, the where() would write a whole (N, V) table
        return x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    vocab = torch.arange(x.size(-1), device=x.device, dtype=torch.int32)  # (a vocabulary is < 2^31 words)
    return torch.where(vocab == target.int().unsqueeze(-1), x, 0.0).sum(-1)


def make_optimizer(model: torch.nn.Module) -> torch.optim.Adam:
    """§5.3: Adam(β1 0.9, β2 0.98, ε 1e-9); the learning rate is set every step by Eq. (3).
    `fused`: one kernel for all parameters instead of a few per tensor (same update rule)."""
    if not isinstance(model, torch.nn.Module):  # (None was an AttributeError)
        raise ConfigError(f"make_optimizer takes a torch.nn.Module, got {model!r:.80}")
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)


class OnePassLoss(torch.autograd.Function):
    """`label_smoothed_loss` by attnlab's kernel (`kernels.smoothed_loss`): the forward pass
    writes the loss's gradient while each row of logits is in cache, and the backward pass only
    scales it by the incoming gradient, in place. Compiled by Inductor, the forward reads the
    (rows, V) logits and the backward reads them again to write the gradient, taking e^x twice;
    here once. Base's 37,000-word loss over 1,936 rows in bf16, forward and backward on two
    threads of the Intel Xeon: 61 → 34 ms (docs/BENCHMARKS.md, training round twenty-four). The
    NLL is a measurement: no gradient flows from it. One backward pass per forward (the gradient
    is scaled in place)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
        made = kernels.smoothed_loss(logits.reshape(-1, logits.size(-1)), target.reshape(-1), eps, pad_id)
        assert made is not None  # (`make_loss` calls it only where the kernel applies)
        loss, nll, grad = made
        ctx.grad = grad.view(logits.shape)
        nll = nll.sum()
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll

    @staticmethod
    def backward(ctx, d_loss: Tensor, d_nll: Tensor) -> tuple[Tensor, None, None, None]:
        if ctx.grad is None:
            raise RuntimeError("attnlab's one-pass loss takes one backward pass (retain_graph is not supported)")
        grad, ctx.grad = ctx.grad, None
        return kernels.scale_(grad, d_loss), None, None, None


def make_loss(compile: bool = False, shapes: str = "dynamic"):
    """The loss function to train with: on a CPU where attnlab's kernels are built, `OnePassLoss`
    for logits that need a gradient; elsewhere (a GPU, `ATTNLAB_KERNELS=0`, no gradient)
    `label_smoothed_loss`, compiled if `compile` (log-softmax, gather and mean over the
    vocabulary fuse into one pass: 3× faster than eager at ~20 s of compilation, done on first
    use); `shapes` as `compile_model`'s."""
    other = _compiled_loss(shapes) if compile else label_smoothed_loss

    def loss(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
        if logits.requires_grad and kernels.compiled(logits) is not None:
            return OnePassLoss.apply(logits, target, eps, pad_id)
        return other(logits, target, eps, pad_id)

    return loss


def _compiled_loss(shapes: str):
    """`label_smoothed_loss` compiled. "dynamic" compiles one graph for every number of rows but
    keeps the vocabulary's width a constant: with all sizes symbolic, each element's index into
    the (N, V) table took a division by an unknown V, and on an H200 base's loss ran 5.2 ms a step
    against 2.6 ms for a graph whose sizes were all known (docs/BENCHMARKS.md, GPU round three);
    on one CPU thread, base's loss over 1,924 rows forward and backward, 443 → 413 ms."""
    if shapes != "dynamic":
        return torch.compile(label_smoothed_loss, **COMPILE_SHAPES[shapes])
    compiled = torch.compile(label_smoothed_loss, dynamic=None)  # sizes known unless marked

    def rows_vary(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
        for dim in range(target.dim()):  # the rows, (N,) or (B, L); never the vocabulary
            torch._dynamo.maybe_mark_dynamic(logits, dim)
            torch._dynamo.maybe_mark_dynamic(target, dim)
        return compiled(logits, target, eps, pad_id)

    return rows_vary


COMPILE_MODES = ("auto", "off", "loss", "model")
COMPILE_PAYS_FROM = 500  # updates: below, ~20 s of compiling the loss is not won back on a CPU
MODEL_PAYS_FROM = 4000  # updates: the model's extra ~2 min of compiling, won back in bf16 on a CPU


def compile_setting(requested: object) -> str:
    """The mode `requested` names, one of COMPILE_MODES, or one line (`TrainConfig` checks it when
    built: refused here only, a bad one left an empty run directory behind)."""
    if isinstance(requested, bool):  # run configs before 2026-12 stored a flag: model and loss, or nothing
        return "model" if requested else "off"
    if not isinstance(requested, str) or requested not in COMPILE_MODES:
        raise ConfigError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {requested!r}")
    return requested


def compile_mode(requested: str | bool, device_type: str, steps: int, bf16: bool = False) -> tuple[str, str]:
    """The `torch.compile` mode a run uses ("off", "loss" or "model": model and loss) and one
    line saying why. "auto" compiles where it pays, as measured by benchmarks/train_throughput.py
    on a 2-core CPU (training round eight): there the loss, and the model too in bf16 for a run of
    MODEL_PAYS_FROM updates or more (base and small steps ~15% faster, after ~2 min more of
    compiling and recompiling, won back by ~1,600 updates of the recipes' 6,000 tokens; in fp32,
    where the matrix products are nearly all of a step, 0-3% faster, so not); on a GPU
    the model and the loss; and neither for a run shorter than COMPILE_PAYS_FROM updates, or
    where no compiler is found (inductor needs a C++ compiler on a CPU, Triton on a GPU). On a
    CPU where attnlab's kernels are built, training's loss is its one-pass kernel in every mode
    (`make_loss`), and a compiled loss is compiled only if the kernel does not take it."""
    requested = compile_setting(requested)
    if requested == "off":
        return "off", "torch.compile: off (--compile off)"
    missing = _missing_compiler(device_type)
    if missing:
        return "off", f"torch.compile: off, {missing}; training eagerly (slower, same maths)"
    if requested != "auto":
        return requested, f"torch.compile: {requested} (--compile {requested})"
    if steps < COMPILE_PAYS_FROM:
        return (
            "off",
            f"torch.compile: off for a run of {steps} < {COMPILE_PAYS_FROM} updates (--compile loss forces it)",
        )
    if device_type == "cuda" or (bf16 and steps >= MODEL_PAYS_FROM):
        return "model", f"torch.compile: model (auto on {device_type}{'' if device_type == 'cuda' else ' in bf16'})"
    if device_type == "cpu" and kernels.enabled():
        return "loss", "torch.compile: loss (auto on cpu), where attnlab's own loss kernel does not take it"
    return "loss", f"torch.compile: loss (auto on {device_type})"


def _missing_compiler(device_type: str) -> str:
    """Why `torch.compile` cannot run here, or "" when it can."""
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version_info.major}.{sys.version_info.minor} here"
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        return "" if has_triton() else "Triton is not installed"
    if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++/clang++) on PATH"
    return ""


# How a compiled graph treats shapes. "dynamic", what `attnlab train` compiles: one graph for
# every batch shape, as token-budget batches vary in width. "static": a graph per shape, whose
# kernels know their sizes (reductions over a known width). "graphs": static, and each graph
# replayed as a CUDA graph (mode "reduce-overhead": one launch instead of hundreds). The last two
# are measured against the first by benchmarks/gpu_paper_runs.py --variants.
COMPILE_SHAPES: dict[str, dict] = {
    "dynamic": {"dynamic": True},
    "static": {"dynamic": False},
    "graphs": {"dynamic": False, "options": {"triton.cudagraphs": True}},
}


def compile_model(model: torch.nn.Module, shapes: str = "dynamic") -> torch.nn.Module:
    """The whole model compiled for training: shapes vary with every token-budget batch, so
    dynamic from the start (`COMPILE_SHAPES`). Dropout's masks are drawn as eagerly: on a CPU by
    attnlab's kernel, one opaque operation in the graph (`kernels.dropout_keep`), elsewhere by
    PyTorch's kernels (`fallback_random`), so a compiled run follows the same random stream (and
    losses) as an eager one."""
    how = COMPILE_SHAPES[shapes]
    options = {"fallback_random": True, **how.get("options", {})}
    return torch.compile(model, dynamic=how["dynamic"], options=options)


def training_kernels(device_type: str, autocast: bool) -> contextlib.AbstractContextManager:
    """On CPU in bf16, PyTorch's fused attention backward is ~3× slower than the math kernel
    (profile in docs/BENCHMARKS.md): where the fused kernel still runs there (restricted
    attention's banded blocks; the model's global attention runs the explicit Eq. (1) under CPU
    autocast, see `MultiHeadAttention._attend`), train on the math kernel. Same maths."""
    if device_type == "cpu" and autocast:
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()
