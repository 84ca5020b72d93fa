"""Restricted self-attention (`attn_window` r, Table 1's last row): the band holds in both
attention paths and in incremental decoding, traces record it, and r ≥ the length is global."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.decode.search import greedy_search
from attnlab.decode.stepper import TransformerStepper
from attnlab.model import multihead
from attnlab.model.attention import attention, local_attention, window_mask
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer
from attnlab.record.recorder import record


def model(window: int | None, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(preset("tiny", attn_window=window, p_drop=0.0)).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sources (the second padded) and teacher-forced targets."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 1000, (2, 12), generator=generator)
    src[1, 9:] = 0
    tgt = torch.randint(4, 1000, (2, 10), generator=generator)
    tgt[:, 0] = 2
    return src, tgt


@pytest.mark.parametrize("window", [0, 1, 3])
def test_recorded_weights_are_zero_outside_the_band(window: int) -> None:
    net = model(window)
    src, tgt = batch()
    with torch.no_grad(), record(net) as rec:
        net(src, tgt)
    traces = rec.traces(src, tgt, [["x"] * 12, ["x"] * 9], [["y"] * 10, ["y"] * 10], pad_id=0)
    for trace in traces:
        for kind, causal in (("encoder", False), ("decoder", True)):
            n = trace.attention(kind, 0).shape[-1]
            i, j = np.indices((n, n))
            band = (np.abs(i - j) <= window) & ((j <= i) if causal else True)
            assert np.array_equal(trace.mask(kind), band)  # the views draw the band from here
            for layer in trace.layers[kind]:
                weights = trace.attention(kind, layer)
                assert np.all(weights[:, ~band] == 0.0) and np.all(weights[:, band & (i == j)] > 0)
                np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        cross = trace.attention("cross", -1)
        assert np.all(cross > 0)  # encoder-decoder attention stays global


@pytest.mark.parametrize("window", [1, 3])
def test_fused_and_recorded_paths_agree_and_the_window_matters(window: int) -> None:
    net, src, tgt = model(window), *batch()
    with torch.no_grad():
        fused = net(src, tgt)
        with record(net):
            recorded = net(src, tgt)
        unrestricted = model(None)(src, tgt)
    torch.testing.assert_close(recorded, fused, atol=1e-5, rtol=1e-5)
    assert (fused - unrestricted).abs().max() > 1e-2  # the same weights without the window differ


@pytest.mark.parametrize("window", [0, 2, 5])
def test_cached_decoding_equals_uncached(window: int) -> None:
    net, (src, _) = model(window), batch()
    with torch.no_grad():
        # </s> masked: every sentence runs to 30 tokens, far past the window
        steppers = [TransformerStepper(net, src, cache=cache, mask_tokens=[3]) for cache in (True, False)]
        found = [greedy_search(stepper, [30, 30]) for stepper in steppers]
    assert [h.tokens for h in found[0]] == [h.tokens for h in found[1]]
    for a, b in zip(found[0], found[1], strict=True):
        np.testing.assert_allclose(a.step_logprobs, b.step_logprobs, atol=1e-4)
    assert min(len(h.tokens) for h in found[0]) == 30


def test_a_window_as_long_as_the_sentence_is_global_attention_bit_for_bit() -> None:
    src, tgt = batch()
    with torch.no_grad():
        wide, everywhere = model(src.size(1)), model(None)
        assert torch.equal(wide(src, tgt), everywhere(src, tgt))
        narrow = model(1)(src, tgt)
    assert not torch.equal(narrow, everywhere(src, tgt))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [0, 2, 7])
def test_the_banded_kernel_equals_eq1_under_the_band_with_gradients(window: int, causal: bool) -> None:
    generator = torch.Generator().manual_seed(window)
    q, k, v = (torch.randn(2, 3, 40, 8, generator=generator, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 40, dtype=torch.bool)
    keep[1, 31:] = False  # the second sentence is padded
    mask = window_mask(40, 40, window, causal, "cpu") & keep[:, None, None, :]
    dense, _ = attention(q, k, v, mask)
    banded = local_attention(q, k, v, window, causal, keep)
    torch.testing.assert_close(banded, dense, atol=1e-5, rtol=1e-5)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v)) for out in (dense, banded)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    assert (dense - attention(q, k, v, keep[:, None, None, :])[0]).abs().max() > 1e-2  # the band matters


def test_long_inputs_take_the_banded_kernel_and_match_the_recorded_path(monkeypatch: pytest.MonkeyPatch) -> None:
    net = model(1)  # banded from 12 windows of 2r + 1 = 3: 36 positions
    generator = torch.Generator().manual_seed(2)
    src = torch.randint(4, 1000, (2, 130), generator=generator)
    src[1, 100:] = 0
    tgt = torch.randint(4, 1000, (2, 120), generator=generator)
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return local_attention(*args, **kwargs)

    monkeypatch.setattr(multihead, "local_attention", counting)
    with torch.no_grad():
        fused = net(src, tgt)
        assert len(calls) == 2 * 2  # encoder and decoder self-attention, both layers: the O(n·r) kernel
        with record(net):
            recorded = net(src, tgt)  # the explicit Eq. (1) under the band, as the hooks need the weights
    assert len(calls) == 4
    torch.testing.assert_close(fused, recorded, atol=1e-4, rtol=1e-4)
