"""The paper's training choices as small functions: the learning rate of Eq. (3), label-smoothed
cross-entropy (§5.4), Adam(0.9, 0.98, 1e-9) (§5.3), and which attention kernel trains fastest
where.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel


def learning_rate(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """Eq. (3): d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_loss(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed (label-smoothed loss, NLL) over non-pad targets (§5.4, Szegedy et al.).

    q = (1 - ε)·one_hot + ε/V; the NLL is returned separately because perplexity is of it.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, L, V)
    keep = target.ne(pad_id)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(-1)
    loss = (1.0 - eps) * nll + eps * smooth
    # where(), not loss[keep]: boolean indexing has a data-dependent shape (a graph break and a
    # host synchronisation when compiled); the masked sum adds the same terms.
    return torch.where(keep, loss, 0.0).sum(), torch.where(keep, nll, 0.0).sum()


def make_optimizer(model: torch.nn.Module) -> torch.optim.Adam:
    """§5.3: Adam(β1 0.9, β2 0.98, ε 1e-9); the learning rate is set every step by Eq. (3).
    `fused`: one kernel for all parameters instead of a few per tensor (same update rule)."""
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)


def make_loss(compile: bool = False):
    """The loss function to train with. Compiled, log-softmax, gather and mean over the
    vocabulary fuse (3× faster on CPU) at ~20 s of compilation, so it comes with --compile."""
    return torch.compile(label_smoothed_loss, dynamic=True) if compile else label_smoothed_loss


def training_kernels(device_type: str, autocast: bool) -> contextlib.AbstractContextManager:
    """On CPU in bf16, PyTorch's fused attention backward is ~3× slower than the math kernel
    (profile in docs/BENCHMARKS.md): train on the math kernel there. Same maths, other kernel."""
    if device_type == "cpu" and autocast:
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()
