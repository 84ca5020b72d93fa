"""Training's label-smoothed loss by attnlab's kernel (`kernels.smoothed_loss`, `OnePassLoss`):
the same loss, NLL and gradient as `label_smoothed_loss`, to rounding, and the trainer's loss
function takes it only where it applies."""

from __future__ import annotations

import pytest
import torch

from attnlab.model import kernels
from attnlab.train import regime
from attnlab.train.regime import OnePassLoss, label_smoothed_loss, make_loss

PAD = 0


def batch(rows: int, vocab: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits with a spread of ~3, the target's raised by 10 in every other row (as a trained
    model raises it: p(target) ~0.9 there, ~0 to ~0.7 elsewhere), and every fifth position
    padded."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * 3
    target = torch.randint(1, vocab, (rows,), generator=generator)
    logits[torch.arange(0, rows, 2), target[::2]] += 10
    target[::5] = PAD
    logits = logits.to(dtype)
    return logits, target


def exact(logits: torch.Tensor, target: torch.Tensor, eps: float) -> tuple[float, float, torch.Tensor]:
    """The loss, NLL and gradient of §5.4 in fp64, from q = (1 − ε)·one_hot + ε/V written out."""
    x = logits.double().requires_grad_()
    log_p = torch.log_softmax(x, -1)
    q = torch.full_like(log_p, eps / x.size(-1))
    q[torch.arange(len(target)), target] += 1 - eps
    keep = target.ne(PAD)
    loss = -(q * log_p).sum(-1)[keep].sum()
    nll = -log_p[torch.arange(len(target)), target][keep].sum()
    loss.backward()
    return loss.item(), nll.item(), x.grad


# vocabularies: under one vector, a whole number of 16-lane blocks plus a tail, and base's
@pytest.mark.parametrize("vocab", [11, 1003, 37000])
@pytest.mark.parametrize("eps", [0.1, 0.0])
def test_the_kernel_gives_the_loss_nll_and_gradient_of_section_5_4(vocab: int, eps: float) -> None:
    """fp32 logits: the gradient as close to fp64's as PyTorch's own loss gets it (or within
    2e-7). Summing a lane's 2,300 e^x in one fp32 sum, at V = 37,000, put it 5.4e-7 off, against
    1.4e-7 for PyTorch's and 0.6e-7 for the kernel's blocks; a missing ε/V (1e-4 at V = 1,003)
    or target term (0.9) is far outside."""
    logits, target = batch(64, vocab, torch.float32)
    loss, nll, grad = kernels.smoothed_loss(logits, target, eps, PAD)
    want_loss, want_nll, want_grad = exact(logits, target, eps)
    assert loss.sum().item() == pytest.approx(want_loss, rel=1e-6)
    assert nll.sum().item() == pytest.approx(want_nll, rel=1e-6)
    theirs = logits.clone().requires_grad_()
    label_smoothed_loss(theirs, target, eps, PAD)[0].backward()
    pytorchs = (theirs.grad.double() - want_grad).abs().max().item()
    assert (grad.double() - want_grad).abs().max().item() <= max(pytorchs, 2e-7)
    assert grad[::5].eq(0).all() and loss[::5].eq(0).all()  # padded positions: no loss, no gradient


def test_bf16_logits_get_the_bf16_gradient_to_one_rounding() -> None:
    """bf16 logits (training under autocast): the gradient in bf16, each element the exact one
    rounded, or its neighbour (e^x's own error can cross a rounding boundary), but for the fp32
    arithmetic's error where p and ε/V cancel (p = 1.19e-9 + ε/V: 1.0e-11 off here, PyTorch's
    fp32 loss 4.0e-11)."""
    logits, target = batch(64, 1003, torch.bfloat16)
    loss, _, grad = kernels.smoothed_loss(logits, target, 0.1, PAD)
    want_loss, _, want_grad = exact(logits, target, 0.1)
    assert grad.dtype == torch.bfloat16
    step = torch.finfo(torch.bfloat16).eps * want_grad.abs()  # one bf16 step at that size
    cancelled = torch.finfo(torch.float32).eps * 0.1 / 1003  # the rounding of ε/V in fp32
    assert ((grad.double() - want_grad).abs() <= step + cancelled).all()
    assert loss.sum().item() == pytest.approx(want_loss, rel=1e-6)


def test_the_trainers_loss_backpropagates_the_same_gradient() -> None:
    """`make_loss`'s function on a CPU: `OnePassLoss`, whose backward scales the forward's
    gradient by the incoming one, as `(loss * world / tokens).backward()` gives it."""
    logits, target = batch(48, 500, torch.float32, seed=1)
    mine, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss, nll = make_loss()(mine.view(6, 8, 500), target.view(6, 8), 0.1, PAD)
    (loss * 2 / 37).backward()
    want_loss, want_nll = label_smoothed_loss(theirs, target, 0.1, PAD)
    (want_loss * 2 / 37).backward()
    assert loss.grad_fn.name().endswith("OnePassLossBackward")
    assert (loss.item(), nll.item()) == pytest.approx((want_loss.item(), want_nll.item()), rel=1e-6)
    assert not nll.requires_grad  # a measurement
    torch.testing.assert_close(mine.grad, theirs.grad, rtol=0, atol=1e-7)


def test_a_non_finite_logit_makes_a_non_finite_loss() -> None:
    """A NaN in the logits must reach the loss, where the update sees it and skips the step,
    not vanish into a finite loss (the row's maximum ignores a NaN; its e^x must not)."""
    logits, target = batch(8, 100, torch.bfloat16)
    logits[3, 7] = float("nan")
    loss, nll, grad = kernels.smoothed_loss(logits, target, 0.1, PAD)
    assert loss[3].isnan() and nll[3].isnan() and grad[3].isnan().all()
    assert loss[[1, 2, 4]].isfinite().all()


def test_a_target_outside_the_vocabulary_is_refused() -> None:
    logits, target = batch(8, 100, torch.float32)
    target[2] = 100
    with pytest.raises(RuntimeError, match="target id is out of range"):
        kernels.smoothed_loss(logits, target, 0.1, PAD)


def test_the_loss_takes_one_backward_pass() -> None:
    logits, target = batch(8, 100, torch.float32)
    loss, _ = OnePassLoss.apply(logits.requires_grad_(), target, 0.1, PAD)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):
        loss.backward()


def test_without_the_kernel_or_a_gradient_the_loss_is_pytorchs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ATTNLAB_KERNELS=0`, or logits that need no gradient (the kernel would write one): the
    `label_smoothed_loss` path, with the same values."""
    logits, target = batch(8, 100, torch.float32)
    calls = []
    monkeypatch.setattr(regime, "label_smoothed_loss", lambda *a: calls.append(1) or label_smoothed_loss(*a))
    fn = make_loss()
    fn(logits, target, 0.1, PAD)
    assert calls == [1]
    monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    loss, _ = fn(logits.clone().requires_grad_(), target, 0.1, PAD)
    assert calls == [1, 1] and loss.grad_fn.name() != "OnePassLossBackward"
