"""attnlab's Dropout: the Bernoulli(1 − p) mask of §5.4, drawn from 16-bit random words on the
CPU, with nn.Dropout's scaling and train/eval switch; by the compiled kernel (a counter-based
generator) or by its PyTorch twin (`ATTNLAB_KERNELS=0`), each test on both unless it is about one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab import Transformer, preset
from attnlab.model.dropout import Dropout
from attnlab.model.kernels import extension
from attnlab.model.multihead import MultiHeadAttention

MASK64 = (1 << 64) - 1


@pytest.fixture(params=["kernel", "twin"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "twin":
        monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    elif extension() is None:
        pytest.skip("the kernels could not be built here")
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.3])
def test_mask_rate_and_scaling(p: float, dtype: torch.dtype, path: str) -> None:
    """Over 2M elements the dropped share is p within 6 binomial standard deviations (±0.0013 at
    p = 0.1: a mask off by one 16-bit level per thousand would still pass, one that keeps the
    wrong side, 1 − p, or drops nothing would not), and a kept element is x / (1 − p) exactly."""
    torch.manual_seed(0)
    x = (torch.rand(2_000_000) + 1.0).to(dtype)  # no zeros of its own
    y = Dropout(p).train()(x)
    assert y.dtype == dtype
    dropped = (y == 0).double().mean().item()
    sigma = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(dropped - p) < 6 * sigma, (dropped, p)
    kept = y != 0
    assert torch.equal(y[kept], x[kept] * (1.0 / (1.0 - p)))


def test_masks_are_fresh_and_seeded_and_independent_of_neighbours(path: str) -> None:
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
    # and successive masks (successive seeds: successive words of one generator) are unrelated
    calls = torch.stack([m, (b.flatten() != 0).double()]).corrcoef()[0, 1].item()
    assert abs(calls) < 0.03  # 36k elements: the standard error is 0.005


def test_eval_zero_and_one_and_other_devices_match_nn_dropout() -> None:
    x = torch.randn(5, 7)
    assert torch.equal(Dropout(0.1).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert isinstance(Dropout(0.1), nn.Dropout)  # state dicts, repr and .p as before
    assert Dropout(0.1).state_dict() == {}


def test_gradient_flows_through_kept_elements_only(path: str) -> None:
    torch.manual_seed(1)
    x = torch.randn(1000, requires_grad=True)
    y = Dropout(0.5).train()(x)
    y.sum().backward()
    assert torch.equal(x.grad, (y != 0).float() * 2.0)


def test_mask_is_made_once_in_the_activation_dtype_and_no_kernel_reads_a_bool_tensor(path: str) -> None:
    """The 0/1 mask is made in x's dtype once (the kernel writes it so; the twin converts it, one
    conversion of x's size, in the forward pass) and reused backward; no kernel reads a bool
    tensor of x's size (`where`, a product with a bool mask: 2-8x slower on the CPU than a
    product of two bf16 tensors, 2% of a base step)."""
    x = torch.randn(64, 512, dtype=torch.bfloat16, requires_grad=True)
    drop = Dropout(0.1).train()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        drop(x).sum().backward()
    sized = [e.name for e in prof.events() if e.input_shapes and e.input_shapes[0] == [64, 512]]
    assert sized.count("aten::copy_") == (1 if path == "twin" else 0), sized
    words = [[(64 * 512 + 3) // 4]]  # the twin's int64 words; the kernel draws only its seed
    assert any(e.name == "aten::random_" and e.input_shapes[:1] == words for e in prof.events()) is (path == "twin")
    assert not {"aten::where", "aten::ge", "aten::masked_fill", "aten::masked_fill_"} & set(sized), sized


def test_twin_mask_is_the_old_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int16 arithmetic keeps exactly the elements whose 16 random bits are ≥ t, as the
    comparison it replaces did: same seed, same masks, same values as before."""
    monkeypatch.setenv("ATTNLAB_KERNELS", "0")
    x = torch.randn(2, 1_000_001)  # ~30 elements fall on the threshold itself
    torch.manual_seed(5)
    y = Dropout(0.1).train()(x)
    torch.manual_seed(5)
    words = torch.randint(-(2**63), 2**63 - 1, ((x.numel() + 3) // 4,), dtype=torch.int64)
    keep = words.view(torch.int16)[: x.numel()].view(x.shape) >= round(0.1 * 2**16) - 2**15
    assert torch.equal(y, torch.where(keep, x, 0.0) * (1.0 / 0.9))


def _splitmix_keep(seed: int, n: int, threshold: int) -> list[bool]:
    """The kernel's definition, in Python integers: element i reads bits 16·(i % 4) … of word
    i // 4, SplitMix64's output function of seed + (i // 4 + 1)·φ mod 2⁶⁴."""
    keep = []
    for i in range(n):
        z = (seed + (i // 4 + 1) * 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        keep.append((z >> (16 * (i % 4))) & 0xFFFF >= threshold)
    return keep


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_mask_is_splitmix64_of_its_seed(dtype: torch.dtype) -> None:
    """Every element, vector blocks of 32 and the ragged tail alike (100 = 3 × 32 + 4), is kept
    exactly where the published generator says, written as 1 or 0 in x's dtype. A seed near 2⁶⁴
    checks the wrap-around; threshold 0 keeps all, 65,535 almost none."""
    module = extension()
    if module is None:
        pytest.skip("the kernels could not be built here")
    for seed, threshold in ((0, 6554), (-(2**63) + 12345, 32768), (-1, 0), (987654321, 65535)):
        keep = module.dropout_keep(torch.empty(100, dtype=dtype), seed, threshold)
        assert keep.dtype == dtype and keep.shape == (100,)
        expected = torch.tensor(_splitmix_keep(seed & MASK64, 100, threshold), dtype=dtype)
        assert torch.equal(keep, expected), (seed, threshold)
    with pytest.raises(RuntimeError, match="threshold"):
        module.dropout_keep(torch.empty(4), 0, 65536)


def test_kernel_mask_keeps_shape_of_a_strided_input() -> None:
    if extension() is None:
        pytest.skip("the kernels could not be built here")
    x = torch.ones(64, 40).t()  # not contiguous
    y = Dropout(0.1).train()(x)
    assert y.shape == (40, 64) and set(y.unique().tolist()) == {0.0, torch.tensor(1.0 / 0.9).item()}


def test_dropout_where_section_5_4_puts_it() -> None:
    """§5.4: dropout on each sub-layer's output (before it is added to the sub-layer's input and
    normalised) and on the sums of the embeddings and the positional encodings in both stacks,
    nowhere else (attention weights: only with `p_attn_drop`, 0 here as in every translation preset):
    2 + n_layers × (2 + 3) calls a forward pass.
    (Leaving the embeddings' dropout out passed every other test.)"""
    torch.manual_seed(0)
    config = preset("tiny", p_drop=0.5)
    model = Transformer(config).train()
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.register_forward_hook(lambda _, args, out: calls.append((args[0].detach(), out.detach())))
    src, tgt = torch.randint(4, config.vocab_size, (2, 9)), torch.randint(4, config.vocab_size, (2, 7))
    model(src, tgt)
    assert len(calls) == 2 + config.n_layers * 5
    for x, out in calls:  # each drops about half of what it is given and doubles the rest
        dropped = (out == 0) & (x != 0)
        assert 0.4 < dropped.float().mean() < 0.6
        torch.testing.assert_close(out[~dropped], 2 * x[~dropped], rtol=0, atol=0)
    with torch.no_grad():  # the first call of each stack: embeddings × √d_model + positions
        for ids, call in ((src, calls[0]), (tgt, calls[1 + 2 * config.n_layers])):
            summed = model.embed(ids) * config.d_model**0.5 + model.pe[: ids.size(1)]
            torch.testing.assert_close(call[0], summed)


@pytest.mark.parametrize(
    ("route", "dtype", "window"),
    [("fused", torch.float32, None), ("explicit", torch.bfloat16, None), ("banded", torch.float32, 1)],
)
def test_attention_dropout_drops_weights_while_training_only(
    route: str, dtype: torch.dtype, window: int | None
) -> None:
    """`p_attn_drop` (§6.3's attention dropout) drops attention weights while training, on each
    path Eq. (1) takes: PyTorch's fused kernel (fp32), the explicit products (bf16 on the CPU) and
    the banded kernel of a restricted model (48 positions ≥ 12 windows). W^V and W^O are the
    identity and position j's input is the j-th unit vector, so each output row is the weights
    themselves: in training about half of those the eval pass gives are 0, the rest doubled."""
    torch.manual_seed(0)
    config = preset("tiny", n_heads=1, p_attn_drop=0.5, attn_window=window)
    attn = MultiHeadAttention(config, "encoder").to(dtype)
    with torch.no_grad():
        attn.w_v.weight.copy_(torch.eye(64))
        attn.w_o.weight.copy_(torch.eye(64))
        for layer in (attn.w_v, attn.w_o, attn.w_q, attn.w_k):
            if layer.bias is not None:
                layer.bias.zero_()
    x = torch.eye(64, dtype=dtype)[:48].expand(8, 48, 64)  # (B, L, d_model): position j is e_j
    with torch.no_grad():
        weights = attn.eval()(x)[..., :48]
        dropped = attn.train()(x)[..., :48]
    assert (weights > 0).float().mean() > (0.99 if window is None else 3 * 46 / 48**2)  # the band's 2r + 1 keys
    gone = (dropped == 0) & (weights > 0)
    share = gone.sum() / (weights > 0).sum()
    assert 0.45 < share < 0.55, (route, share)
    torch.testing.assert_close(
        dropped[~gone], 2 * weights[~gone], rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=0
    )
