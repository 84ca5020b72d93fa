"""fp32 inference products through oneDNN (`attnlab.model.linear`): the same numbers as
`F.linear` up to rounding, taken only where no gradient is kept, and a loaded fp32 model decodes
what the plain one decodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab import preset
from attnlab.decode.search import generate
from attnlab.model.linear import ONEDNN, InferenceLinear, for_inference, linear
from attnlab.model.transformer import Transformer

pytestmark = pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")
BUNDLED = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"


def _ops(call) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    return {event.key for event in prof.key_averages()}


@pytest.mark.parametrize("shape", [(7, 32), (3, 5, 32)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_is_f_linear_through_onednn_without_gradients(shape: tuple[int, ...], with_bias: bool) -> None:
    torch.manual_seed(0)
    x, weight = torch.randn(*shape), torch.randn(48, 32)
    bias = torch.randn(48) if with_bias else None
    with torch.no_grad():
        assert "mkldnn::_linear_pointwise" in _ops(lambda: linear(x, weight, bias))
        out = linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 48)
    # values of size ~6: fp32 rounding in another summation order stays near 1e-6 of them
    assert torch.allclose(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_linear_keeps_f_linear_where_onednn_does_not_apply() -> None:
    """With gradients (training), in bf16: `F.linear` itself, exactly, and gradients flow."""
    torch.manual_seed(0)
    x, weight, bias = torch.randn(4, 8), torch.randn(6, 8, requires_grad=True), torch.randn(6)
    assert "mkldnn::_linear_pointwise" not in _ops(lambda: linear(x, weight, bias))
    out = linear(x, weight, bias)
    assert torch.equal(out, F.linear(x, weight, bias))
    out.sum().backward()
    assert weight.grad is not None and torch.equal(weight.grad, x.sum(0).expand(6, 8))
    with torch.no_grad():
        half = (x.bfloat16(), weight.bfloat16(), bias.bfloat16())
        assert torch.equal(linear(*half), F.linear(*half))


def test_for_inference_decodes_what_the_plain_model_decodes() -> None:
    torch.manual_seed(1)
    model = Transformer(preset("tiny", n_layers=2)).eval()
    src = torch.randint(4, 1000, (3, 8))
    plain = generate(model, src, beam=4, max_len_b=10)
    keys = list(model.state_dict())
    assert for_inference(model) is model
    assert list(model.state_dict()) == keys
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is InferenceLinear for m in linears)
    fast = generate(model, src, beam=4, max_len_b=10)
    assert [[h.tokens for h in s] for s in fast] == [[h.tokens for h in s] for s in plain]
    assert [h.score for s in fast for h in s] == pytest.approx([h.score for s in plain for h in s], abs=1e-4)


def test_load_routes_fp32_only() -> None:
    kinds = {
        dtype: {type(m).__name__ for m in attnlab.load(BUNDLED, dtype=dtype).model.modules()}
        for dtype in ("fp32", "bf16", "int8")
    }
    assert "InferenceLinear" in kinds["fp32"] and "Linear" not in kinds["fp32"]
    assert "InferenceLinear" not in kinds["bf16"] and "Linear" in kinds["bf16"]
    assert "InferenceLinear" not in kinds["int8"]  # quantize_dynamic swapped the exact nn.Linears
