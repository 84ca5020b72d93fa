"""Inference products through oneDNN (`attnlab.model.linear`): the same numbers as `F.linear` up
to rounding, taken only where no gradient is kept, on packed copies that follow every change of
their weight, and a loaded model decodes what the plain one decodes."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import attnlab
from attnlab import preset
from attnlab.decode.search import generate
from attnlab.model import linear as linear_module
from attnlab.model.linear import (
    ONEDNN,
    ONEDNN_BF16,
    InferenceLinear,
    PackedWeight,
    for_inference,
    linear,
    mkl_runs_avx512,
)
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


def test_load_routes_fp32_and_bf16() -> None:
    models = {dtype: attnlab.load(BUNDLED, dtype=dtype).model for dtype in ("fp32", "bf16", "int8")}
    kinds = {dtype: {type(m).__name__ for m in model.modules()} for dtype, model in models.items()}
    assert "InferenceLinear" in kinds["fp32"] and "Linear" not in kinds["fp32"]
    assert "InferenceLinear" in kinds["bf16"] and "Linear" not in kinds["bf16"]
    assert "InferenceLinear" not in kinds["int8"]  # quantize_dynamic swapped the exact nn.Linears


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_load_inside_inference_mode_builds_ordinary_weights(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`attnlab.load` called in a caller's `torch.inference_mode()` block (a benchmark, a
    server) once made inference tensors: a trace's weights hash raised, and the packed oneDNN
    copies (keyed on version counters) were silently never used."""
    monkeypatch.setattr(linear_module, "MKL_AVX512", False)  # fp32 layers packed, as on a non-Intel CPU
    with torch.inference_mode():
        model = attnlab.load(BUNDLED, dtype=dtype)
        result = model.translate("A dog runs.", record=True)
        assert result.trace is not None and result.tokens
        weights = [p for p in model.model.parameters()]
        assert not any(p.is_inference() for p in weights)
        assert all(m.packed.made is not None for m in model.model.modules() if isinstance(m, InferenceLinear))


@pytest.mark.parametrize("intel", [True, False])
def test_fp32_layers_take_mkl_where_it_runs_its_avx512_kernels(intel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Intel's CPUs MKL's fp32 products beat oneDNN's packed ones at the layers' shapes: a
    layer is then `F.linear` itself and packs nothing; bf16 layers stay on oneDNN (AMX) either way,
    where oneDNN multiplies bf16 at all."""
    monkeypatch.setattr(linear_module, "MKL_AVX512", intel)
    torch.manual_seed(0)
    layer, x = for_inference(nn.Linear(32, 48)), torch.randn(8, 32)  # 8: more than `FEW_ROWS`
    with torch.no_grad():
        ops = _ops(lambda: layer(x))
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        assert ("mkldnn::_linear_pointwise" in ops) is not intel
        assert (layer.packed.made is None) is intel
        layer.to(torch.bfloat16)
        assert ("mkldnn::_linear_pointwise" in _ops(lambda: layer(x.bfloat16()))) is ONEDNN_BF16


def test_bf16_layers_take_f_linear_where_onednn_has_no_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AVX2 CPU (no AVX-512, no AVX-NE-CONVERT) oneDNN refuses bf16 products: packing a
    bf16 weight raised there, and every bf16 decode with it. Such a CPU is simulated here."""
    monkeypatch.setattr(linear_module, "ONEDNN_BF16", False)
    torch.manual_seed(0)
    layer, x = for_inference(nn.Linear(32, 48)).to(torch.bfloat16), torch.randn(8, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        ops = _ops(lambda: layer(x))
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert "mkldnn::_linear_pointwise" not in ops and "mkldnn::_reorder_linear_weight" not in ops


@pytest.mark.parametrize("products", [True, False])
def test_a_bf16_model_on_a_cpu_without_bf16_products_is_warned_about(
    products: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """There a batch decodes ~4x slower in bf16 than in fp32: `attnlab.load(dtype="bf16")` says
    so in one line (the command line prints it as `attnlab translate: warning: ...`)."""
    import warnings

    monkeypatch.setattr(linear_module, "ONEDNN_BF16", products)
    for dtype in (torch.float32, torch.bfloat16):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for_inference(nn.Sequential(nn.Linear(8, 8)).to(dtype))
        said = [str(w.message) for w in caught]
        expected = dtype == torch.bfloat16 and not products
        assert len(said) == expected and all("no bf16 matrix instructions" in line for line in said)


def test_mkl_counts_as_avx512_on_intel_cpus_only() -> None:
    assert not mkl_runs_avx512("AuthenticAMD") and not mkl_runs_avx512("")
    intel = torch.backends.mkl.is_available() and torch.cpu._is_avx512_supported()
    assert mkl_runs_avx512("GenuineIntel") is intel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_weight_is_f_linear_for_any_number_of_rows(dtype: torch.dtype) -> None:
    """One packing serves every batch size a decode meets (4 rows for one sentence, hundreds
    for a batch); the packing is made once, not per call."""
    torch.manual_seed(0)
    weight, bias = torch.randn(300, 64, dtype=dtype), torch.randn(300, dtype=dtype)
    packed = PackedWeight()
    with torch.no_grad():
        for rows in (1, 4, 37, 400):
            x = torch.randn(rows, 64, dtype=dtype)
            # fp32: sums of 64 products of size ~1 agree to ~1e-5; bf16: to its 8-bit mantissa
            tol = 1e-4 if dtype == torch.float32 else 0.05
            assert torch.allclose(
                linear(x, weight, bias, packed).float(), F.linear(x, weight, bias).float(), rtol=tol, atol=tol
            )
        made = packed.made
        ops = _ops(lambda: linear(x, weight, bias, packed))
    onednn = dtype == torch.float32 or ONEDNN_BF16  # (an AVX2 CPU's oneDNN has no bf16 product)
    assert ("mkldnn::_linear_pointwise" in ops) is onednn and "mkldnn::_reorder_linear_weight" not in ops
    assert packed.made is made and sorted(made[2]) == ["onednn", "tiles"][not onednn :]  # 1 and 4 rows: the tiles


# fp32: sums of up to 256 products of size ~1, rounded in another order (~1e-5 off where they cancel)
@pytest.mark.parametrize("dtype, rtol, atol", [(torch.float32, 1e-5, 1e-4), (torch.bfloat16, 2**-8, 1e-3)])
@pytest.mark.parametrize("shape", [(1, 64), (4, 256), (2, 2, 33), (0, 16)])  # 33: not whole vectors
@pytest.mark.parametrize("out_features", [300, 64, 5])  # 300, 5: a tile only partly filled
@pytest.mark.parametrize("with_bias", [True, False])
def test_few_rows_take_attnlabs_kernel(
    dtype: torch.dtype, rtol: float, atol: float, shape: tuple[int, ...], out_features: int, with_bias: bool
) -> None:
    """Up to `FEW_ROWS` rows (one sentence's beam) a packed product runs attnlab's kernel on
    column tiles, not oneDNN, and gives F.linear's numbers: to fp32 rounding, or to bf16's
    rounding of the output (its sums are fp32)."""
    torch.manual_seed(0)
    x, weight = torch.randn(*shape, dtype=dtype), torch.randn(out_features, shape[-1], dtype=dtype)
    bias = torch.randn(out_features, dtype=dtype) if with_bias else None
    packed = PackedWeight()
    with torch.no_grad():
        ops = _ops(lambda: linear(x, weight, bias, packed))
        out = linear(x, weight, bias, packed)
    exact = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    assert "mkldnn::_linear_pointwise" not in ops and sorted(packed.made[2]) == ["tiles"]
    assert out.dtype == dtype and out.shape == exact.shape
    torch.testing.assert_close(out.double(), exact, rtol=rtol, atol=atol)


@pytest.mark.parametrize("rows", [2, 5])  # attnlab's tiles, oneDNN's copy
def test_packed_weight_follows_its_weight(rows: int) -> None:
    """A weight changed in place (an edit, `load_state_dict`) or replaced (`.to()`) is packed
    anew: a stale copy would silently compute with the old numbers."""
    torch.manual_seed(0)
    layer = for_inference(nn.Linear(16, 8))
    x = torch.randn(rows, 16)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2)
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer.load_state_dict({"weight": torch.zeros(8, 16), "bias": torch.ones(8)})
        assert torch.equal(layer(x), torch.ones(rows, 8))
        layer.to(torch.bfloat16)
        assert layer(x.bfloat16()).dtype == torch.bfloat16 and torch.equal(
            layer(x.bfloat16()).float(), torch.ones(rows, 8)
        )
    assert not torch.allclose(before, torch.ones(rows, 8))


@pytest.mark.parametrize("rows", [2, 5])
def test_an_optimizer_step_repacks_even_without_a_version_bump(rows: int) -> None:
    """Fused Adam updates parameters in place without bumping their version counter; a loaded
    model still trains, and what it decodes between updates uses the updated weights."""
    torch.manual_seed(0)
    layer = for_inference(nn.Linear(16, 8))
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.randn(rows, 16)
    for _ in range(2):
        with torch.no_grad():
            assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer(x).sum().backward()  # with gradients: F.linear
        version = layer.weight._version
        optimizer.step()
        assert layer.weight._version == version  # what the optimizer hook is there for
    with torch.no_grad():
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)


def test_another_tensor_at_the_same_address_is_packed_anew() -> None:
    """Address and version do not name a tensor: another one at the same address with the same
    version (as a new weight can be, once the old one is freed) must not get the old pack."""
    torch.manual_seed(0)
    x, packed = torch.randn(5, 16), PackedWeight()
    old = torch.randn(8, 16)
    old.mul_(1.0)  # version 1
    with torch.no_grad():
        linear(x, old, None, packed)
        new = torch.empty(0).set_(old.untyped_storage(), 0, old.shape, old.stride())  # its own version: 1
        old.mul_(3.0)  # the numbers change under `new`, whose version stays
        assert (new.data_ptr(), new._version) == (packed.made[1][0], packed.made[1][1])  # the case itself
        assert torch.allclose(linear(x, new, None, packed), F.linear(x, new), atol=1e-5)


def test_models_with_packed_weights_copy_and_pickle() -> None:
    """oneDNN's packed tensors cannot be copied or pickled; a decoded-with model still can."""
    model = attnlab.load(BUNDLED).model
    with torch.no_grad():
        model.logits(torch.randn(8, model.config.d_model))  # 8 rows: oneDNN's opaque copy
    assert model.packed_output.made is not None
    twin = copy.deepcopy(model)
    assert twin.packed_output.made is None
    assert pickle.loads(pickle.dumps(model)).packed_output.made is None


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_a_model_with_its_own_output_matrix_decodes_in_every_dtype(tmp_path: Path, dtype: str) -> None:
    """An untied output matrix (`tie_output=False`, Marian's `tie_word_embeddings: false`) is a
    layer: int8 quantizes it, and its logits were an AttributeError (`weight` is a method there)."""
    from attnlab.model.checkpoint import save_checkpoint

    torch.manual_seed(0)
    config = preset("small", n_layers=1, d_model=64, n_heads=2, d_ff=128, vocab_size=8000, tie_output=False)
    save_checkpoint(tmp_path / "untied", Transformer(config).eval(), BUNDLED / "spm.model")
    loaded, plain = attnlab.load(tmp_path / "untied", dtype=dtype), attnlab.load(tmp_path / "untied")
    assert loaded.translate("A dog runs.", beam=1).tokens  # (an AttributeError in int8)
    with torch.no_grad():
        hidden = torch.randn(3, 64).to(next(loaded.model.target_embedding.parameters()).dtype)
        ours, fp32 = loaded.model.logits(hidden).float(), plain.model.logits(hidden.float())
    # int8 rounds the matrix to 1/127 of its largest weight: 5.5% of the logits' spread at most here
    assert (ours - fp32).abs().max() < 0.1 * fp32.std()
    if dtype == "int8":
        assert type(loaded.model.out_proj).__module__.startswith("torch.ao.nn.quantized")
