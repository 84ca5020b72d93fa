"""attnlab's Dropout: the Bernoulli(1 − p) mask of §5.4, drawn from 16-bit random words on the
CPU, with nn.Dropout's scaling and train/eval switch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.model.dropout import Dropout


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_mask_rate_and_scaling(p: float) -> None:
    """Over 2M elements the dropped share is p within 6 binomial standard deviations (±0.0013 at
    p = 0.1: a mask off by one 16-bit level per thousand would still pass, one that keeps the
    wrong side, 1 − p, or drops nothing would not), and a kept element is x / (1 − p) exactly."""
    torch.manual_seed(0)
    x = torch.rand(2_000_000) + 1.0  # no zeros of its own
    y = Dropout(p).train()(x)
    dropped = (y == 0).double().mean().item()
    sigma = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(dropped - p) < 6 * sigma, (dropped, p)
    kept = y != 0
    assert torch.equal(y[kept], x[kept] * (1.0 / (1.0 - p)))


def test_masks_are_fresh_and_seeded_and_independent_of_neighbours() -> None:
    x = torch.ones(64, 33, 17, dtype=torch.bfloat16)  # not a multiple of 4 elements per row
    drop = Dropout(0.1).train()
    torch.manual_seed(3)
    a, b = drop(x), drop(x)
    torch.manual_seed(3)
    assert torch.equal(drop(x), a)  # the trainer's resume and DDP masks rely on the seed
    assert not torch.equal(a, b)
    # adjacent elements come from the same 64-bit word: their masks must still be uncorrelated
    m = (a.flatten() != 0).double()
    pairs = torch.stack([m[0::4], m[1::4]]).corrcoef()[0, 1].item()
    assert abs(pairs) < 0.03


def test_eval_zero_and_one_and_other_devices_match_nn_dropout() -> None:
    x = torch.randn(5, 7)
    assert torch.equal(Dropout(0.1).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert isinstance(Dropout(0.1), nn.Dropout)  # state dicts, repr and .p as before
    assert Dropout(0.1).state_dict() == {}


def test_gradient_flows_through_kept_elements_only() -> None:
    torch.manual_seed(1)
    x = torch.randn(1000, requires_grad=True)
    y = Dropout(0.5).train()(x)
    y.sum().backward()
    assert torch.equal(x.grad, (y != 0).float() * 2.0)


def test_mask_is_made_once_in_the_activation_dtype_and_no_kernel_reads_a_bool_tensor() -> None:
    """The 0/1 mask is made in x's dtype once (one conversion of x's size, in the forward pass)
    and reused backward; no kernel reads a bool tensor of x's size (`where`, a product with a
    bool mask: 2-8x slower on the CPU than a product of two bf16 tensors, 2% of a base step)."""
    x = torch.randn(64, 512, dtype=torch.bfloat16, requires_grad=True)
    drop = Dropout(0.1).train()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        drop(x).sum().backward()
    sized = [e.name for e in prof.events() if e.input_shapes and e.input_shapes[0] == [64, 512]]
    assert sized.count("aten::copy_") == 1, sized
    assert not {"aten::where", "aten::ge", "aten::masked_fill", "aten::masked_fill_"} & set(sized), sized


def test_mask_is_the_old_comparison() -> None:
    """The int16 arithmetic keeps exactly the elements whose 16 random bits are ≥ t, as the
    comparison it replaces did: same seed, same masks, same values as before."""
    x = torch.randn(2, 1_000_001)  # ~30 elements fall on the threshold itself
    torch.manual_seed(5)
    y = Dropout(0.1).train()(x)
    torch.manual_seed(5)
    words = torch.randint(-(2**63), 2**63 - 1, ((x.numel() + 3) // 4,), dtype=torch.int64)
    keep = words.view(torch.int16)[: x.numel()].view(x.shape) >= round(0.1 * 2**16) - 2**15
    assert torch.equal(y, torch.where(keep, x, 0.0) * (1.0 / 0.9))
