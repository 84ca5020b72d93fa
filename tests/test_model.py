"""The model of §3: presets, parameter counts (Table 3), masks, tying, and that it learns."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from attnlab import attention, preset
from attnlab.errors import ConfigError, ModelInputError
from attnlab.model import multihead, transformer
from attnlab.model.config import PRESETS, ModelConfig, parse_overrides, resolve_device
from attnlab.model.embedding import sinusoidal_positions
from attnlab.model.transformer import Residual, Transformer, count_parameters

BUNDLED = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"

FIT_VOCAB = 40_000  # the one shared vocabulary size at which Table 3's params column fits best


@pytest.mark.parametrize("name", [n for n, c in PRESETS.items() if "params_millions" in c.paper])
def test_table3_params_column(name: str) -> None:
    config = preset(name, vocab_size=FIT_VOCAB)
    with torch.device("meta"):
        count = count_parameters(Transformer(config))
    paper = config.paper["params_millions"] * 1e6
    assert abs(count - paper) / paper < 0.03, f"{name}: {count / 1e6:.1f}M vs paper {paper / 1e6:.0f}M"


def test_the_attention_projections_have_no_biases_as_in_the_paper(tmp_path: Path) -> None:
    """§3.2.2 (and tensor2tensor) project without biases; attnlab's had them. A config.json written
    before the field (every checkpoint until then, the bundled ones too) loads with its biases."""
    for name in PRESETS:
        layer = Transformer(preset(name, vocab_size=1000, n_layers=1)).encoder["layers"][0].self_attn
        assert all(getattr(layer, w).bias is None for w in ("w_q", "w_k", "w_v", "w_o")), name
    older = {k: v for k, v in preset("tiny").to_dict().items() if k not in ("attn_bias", "paper")}
    assert ModelConfig.from_dict(older).attn_bias and not ModelConfig.from_dict({**older, "attn_bias": False}).attn_bias
    bundled = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
    if (bundled / "manifest.json").is_file():
        assert attnlab.load(bundled).model.encoder["layers"][0].self_attn.w_k.bias is not None


def test_presets_mirror_table3() -> None:
    rows = {name: preset(name) for name in ("base", "big")}  # N, d_model, d_ff, h, P_drop, ε_ls of Table 3
    assert {n: (c.n_layers, c.d_model, c.d_ff, c.n_heads, c.p_drop, c.eps_ls) for n, c in rows.items()} == {
        "base": (6, 512, 2048, 8, 0.1, 0.1),
        "big": (6, 1024, 4096, 16, 0.3, 0.1),
    }
    assert preset("base").d_k == 64 and preset("base").d_v == 64
    for heads, dk in ((1, 512), (4, 128), (16, 32), (32, 16)):
        c = preset(f"A-h{heads}")
        assert (c.n_heads, c.d_k, c.d_v) == (heads, dk, dk)
    assert (preset("B-dk16").d_k, preset("B-dk16").d_v) == (16, 64)
    assert preset("big").p_drop == 0.3 and preset("big").d_k == 64
    assert preset("E-learned").positional == "learned"
    parse = preset("parse")  # §6.3: 4 layers, d_model 1024, "all other parameters" as base
    assert (parse.n_layers, parse.d_model, parse.d_ff, parse.n_heads, parse.d_k, parse.vocab_size) == (
        4,
        1024,
        2048,
        8,
        128,
        16000,
    )
    assert preset("D-ls0").eps_ls == 0.0 and preset("D-drop0.2").p_drop == 0.2


def test_config_errors_are_one_line() -> None:
    messages = []
    for make, expected in (
        (lambda: ModelConfig(d_model=512, n_heads=7), "does not divide"),
        (lambda: ModelConfig.from_dict({"d_modle": 3}), "unknown config key"),
        (lambda: preset("huge"), "unknown preset"),
        (lambda: preset("base", p_drop=1.5), "p_drop"),
        (lambda: parse_overrides(["n_layers=two"]), "not a valid int"),
        (lambda: preset("tiny", n_heads=0), "n_heads must be a positive integer"),  # was ZeroDivisionError
        (lambda: preset("tiny", max_len=1), "max_len must be from 2"),
        (lambda: preset("tiny", max_len=2**40), "max_len must be from 2"),  # an edited config: 8 TB of positions
        (  # a 4 MB crafted checkpoint's config: its position table, in no weights file, was 17 GB
            lambda: ModelConfig(
                n_layers=1, d_model=2**16, d_ff=1, n_heads=1, d_k=1, d_v=1, vocab_size=4, max_len=2**16
            ),
            r"max_len × d_model must be at most 33,554,432 values .* got 65,536 × 65,536; lower max_len",
        ),
        (lambda: preset("base", d_k=0), "d_k must be a positive integer"),  # was replaced by d_model / h
        (lambda: ModelConfig.from_dict({"d_v": 0}), "d_v must be a positive integer"),
        (lambda: ModelConfig.from_dict({"bos_id": True}), "bos_id must be a whole number, got True"),  # decoded from 1
        (lambda: preset("tiny", pad_id=1.5), "pad_id must be a whole number, got 1.5"),  # was an IndexError
        (lambda: preset("tiny", eos_id=3.0), "eos_id must be a whole number, got 3.0"),
        (lambda: preset("tiny", vocab_size=2**63), "vocab_size must be at most 16,777,216"),  # torch.empty overflowed
        (lambda: preset("tiny", share_embeddings=False, tgt_vocab_size=2**62), "tgt_vocab_size must be at most"),
        (lambda: preset("tiny", d_model=2**31), "d_model must be at most 1,048,576"),
        (lambda: preset("tiny", d_ff=2**62), "d_ff must be at most"),
        (lambda: preset("tiny", n_layers=10**9), "n_layers must be at most 1,024"),  # an endless build
        (lambda: preset("tiny", n_heads=2**11, d_k=8, d_v=8), "n_heads must be at most 1,024"),
    ):
        with pytest.raises(ConfigError, match=expected) as error:
            make()
        messages.append(str(error.value))
    assert len(messages) == 20 and all(message and "\n" not in message for message in messages), messages
    assert ModelConfig(d_model=512, n_heads=7, d_k=64, d_v=64).d_k == 64
    assert parse_overrides(["--d_model=256", "p_drop=0.3"]) == {"d_model": 256, "p_drop": 0.3}


def test_a_config_that_is_not_a_mapping_or_a_preset_name_is_one_line() -> None:
    """`ModelConfig.from_dict(None)`, of a list or of {1: 2} was a TypeError from joining its keys;
    `preset(["base"])` one from hashing the list."""
    for data in (None, [1, 2], {1: 2}, "base"):
        with pytest.raises(ConfigError, match="a model config is a mapping of field names to values") as error:
            ModelConfig.from_dict(data)
        assert "\n" not in str(error.value)
    for name in (["base"], None, 1):
        with pytest.raises(ConfigError, match="unknown preset .*; choose one of: base, big"):
            preset(name)


def test_numpy_numbers_make_a_config_of_python_numbers() -> None:
    """`preset("small", n_layers=np.int64(2))` said "n_layers must be a positive integer"."""
    import json

    import numpy as np

    config = preset("small", n_layers=np.int64(2), p_drop=np.float64(0.2), attn_window=np.int32(3))
    assert (config.n_layers, config.p_drop, config.attn_window) == (2, 0.2, 3)
    assert type(config.n_layers) is int and type(config.p_drop) is float and type(config.attn_window) is int
    assert ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config  # written as JSON
    with pytest.raises(ConfigError, match=r"n_layers must be a positive integer, got 2\.0"):
        preset("small", n_layers=np.float64(2.0))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a GPU")
@pytest.mark.parametrize(
    ("name", "match"), [("cuda", "no GPU is visible"), ("cuda:3", "no GPU is visible"), ("tpu", "device must be")]
)
def test_a_device_this_machine_lacks_is_one_line(name: str, match: str) -> None:
    """Before, `attnlab.load(..., device="cuda")` on a CPU-only torch raised an AssertionError
    ("Torch not compiled with CUDA enabled") and a misspelt device a list of every device type."""
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=match) as error:
        resolve_device(name)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=match):
        attnlab.load(BUNDLED, device=name)


def test_positional_encoding_formula() -> None:
    d = 512
    pe = sinusoidal_positions(200, d)
    for pos in (0, 1, 17, 199):
        for i in (0, 1, 100, 255):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def _tiny(**kw) -> Transformer:
    model = Transformer(preset("tiny", **kw))
    return model.eval()


def test_output_projection_shares_embedding_storage() -> None:
    model = _tiny()
    hidden = torch.randn(1, 3, model.config.d_model)
    assert torch.equal(model.logits(hidden), hidden @ model.embed.weight.T)
    names = [n for n, _ in model.named_parameters()]
    assert sum("embed" in n for n in names) == 1  # one matrix for source, target and softmax


def test_embeddings_scaled_by_sqrt_d_model() -> None:
    model = _tiny(p_drop=0.0)
    ids = torch.tensor([[5, 6, 7]])
    expected = model.embed.weight[ids] * math.sqrt(model.config.d_model) + model.pe[:3]
    assert torch.allclose(model.embed_tokens(ids), expected)


def test_future_target_tokens_never_change_earlier_outputs() -> None:
    model = _tiny()
    src = torch.randint(4, 1000, (2, 7))
    tgt = torch.randint(4, 1000, (2, 9))
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(4, 1000, (2, 4))
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_padding_never_changes_real_outputs() -> None:
    model = _tiny()
    src = torch.randint(4, 1000, (1, 6))
    tgt = torch.randint(4, 1000, (1, 5))
    padded_src = torch.cat([src, torch.zeros(1, 4, dtype=torch.long)], 1)
    padded_tgt = torch.cat([tgt, torch.zeros(1, 3, dtype=torch.long)], 1)
    assert torch.allclose(model(src, tgt), model(padded_src, padded_tgt)[:, :5], atol=1e-5)  # measured: 2e-6
    # the tolerance is sized against the effect: the same padding, left visible, moves the logits by ~1
    visible = torch.ones(1, 1, 1, padded_src.size(1), dtype=torch.bool)
    leaked = model.logits(model.decode(padded_tgt, model.encode(padded_src, visible), visible))[:, :5]
    assert (leaked - model(src, tgt)).abs().amax() > 0.1
    # and inside a batch with a longer neighbour
    other = torch.randint(4, 1000, (1, 10))
    batch_src = torch.cat([padded_src, other])
    batch_tgt = torch.cat([padded_tgt, torch.randint(4, 1000, (1, 8))])
    assert torch.allclose(model(src, tgt)[0], model(batch_src, batch_tgt)[0, :5], atol=1e-5)


def test_scored_positions_get_exactly_their_logits() -> None:
    """The trainer scores non-pad targets only: their logits are the full pass's rows, in order."""
    torch.manual_seed(0)
    model = _tiny()
    src, tgt = torch.randint(4, 1000, (3, 6)), torch.randint(4, 1000, (3, 5))
    scored = torch.tensor([0, 1, 2, 5, 6, 10])  # rows 0 and 1 partly, row 2 at its first position
    full = model(src, tgt)
    assert torch.allclose(model(src, tgt, scored), full.flatten(0, 1)[scored], atol=1e-6)


def test_attention_function_is_eq1() -> None:
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 6)
    mask = torch.rand(2, 1, 4, 5) > 0.3
    mask[..., 0] = True
    out, weights = attention(q, k, v, mask)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    assert torch.allclose(weights, expected) and torch.allclose(out, expected @ v)
    assert (~mask).any() and (weights[~mask.expand_as(weights)] == 0).all()  # some cells are masked, all exactly 0
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(out, fused, atol=1e-5)


@pytest.mark.parametrize("how", ["autocast", "bf16 model"])
def test_cpu_bf16_runs_eq1_with_bf16_products(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """In bf16 on the CPU, under autocast (training) or as a bf16 model (`attnlab.load(...,
    dtype="bf16")`), the model runs the explicit Eq. (1), not the fused kernel, which upcasts
    everything to fp32 there and takes twice as long with the backward pass, 1.5-2x as long
    forward only; masks still hold and the outputs stay those of the fp32 model to bf16 rounding."""
    fused_calls = []
    fused = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: fused_calls.append(1) or fused(*a, **k))
    torch.manual_seed(0)
    model = _tiny()
    src = torch.cat([torch.randint(4, 1000, (2, 6)), torch.zeros(2, 3, dtype=torch.long)], 1)
    tgt = torch.randint(4, 1000, (2, 7))
    if how == "autocast":
        with torch.autocast("cpu", torch.bfloat16):
            low = model(src, tgt)
    else:
        low = copy.deepcopy(model).to(torch.bfloat16)(src, tgt)
    assert not fused_calls and low.dtype == torch.bfloat16
    exact = model(src, tgt)
    assert fused_calls  # fp32 keeps the fused kernel
    # measured: 0.03 (autocast) and 0.04 (bf16 model) apart; padding left visible moves the logits by ~1 (test above)
    assert (low.float() - exact).abs().amax() < 0.15


def _activation_casts(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> tuple[int, int]:
    """Casts of source- and target-shaped activations in one mixed-precision training pass."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.autocast("cpu", torch.bfloat16):
            out = model(src, tgt)
        out.float().sum().backward()
    shapes = [e.input_shapes[0] for e in prof.events() if e.name == "aten::_to_copy"]
    d = model.config.d_model
    return shapes.count([*src.shape, d]), shapes.count([*tgt.shape, d])


def test_mixed_precision_casts_each_shared_activation_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Self-attention's q, k, v read one activation, every decoder layer's k and v the encoder
    output: each is cast to bf16 once (and its gradient back once), not once per projection. Per
    layer that saves 2 casts forward and 2 backward in each self-attention, and 2L − 1 casts of
    the encoder output each way."""
    torch.manual_seed(0)
    model = _tiny().train()
    layers = model.config.n_layers
    src, tgt = torch.randint(4, 1000, (2, 9)), torch.randint(4, 1000, (2, 7))
    once = _activation_casts(model, src, tgt)
    for module in (multihead, transformer):  # (the attention's casts, and the decoder's of the encoder output)
        monkeypatch.setattr(module, "cast_once", lambda x: x)
    each = _activation_casts(model, src, tgt)
    assert each[0] - once[0] == 4 * layers + 2 * (2 * layers - 1) and each[1] - once[1] == 4 * layers


def test_bad_input_is_a_clear_error() -> None:
    model = _tiny()
    with pytest.raises(ModelInputError, match="outside the vocabulary"):
        model(torch.tensor([[1, 5000]]), torch.tensor([[2]]))
    with pytest.raises(ModelInputError, match="shape"):
        model(torch.tensor([1, 2]), torch.tensor([[2]]))
    with pytest.raises(ModelInputError, match="max_len"):
        model(torch.ones(1, 300, dtype=torch.long), torch.tensor([[2]]))
    with pytest.raises(ModelInputError, match="integer"):
        model(torch.ones(1, 3), torch.tensor([[2]]))
    with pytest.raises(ModelInputError, match="batch"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))
    for src, tgt, what in (([[5, 3]], torch.tensor([[2]]), "source"), (torch.tensor([[5, 3]]), [[2]], "target")):
        with pytest.raises(
            ModelInputError, match=rf"^{what} must be a \(batch, length\) tensor of token ids, got list$"
        ):
            model(src, tgt)  # was an AttributeError
    with pytest.raises(ConfigError, match="^Transformer takes a ModelConfig, e.g. attnlab.preset"):
        Transformer("small")  # type: ignore[arg-type]


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residual_blocks_normalise_where_the_config_says(norm: str) -> None:
    """§3.1 and §5.4: each sub-layer's output is LayerNorm(x + Dropout(Sublayer(x))), post-norm, as
    the paper has it; `norm="pre"` is x + Dropout(Sublayer(LayerNorm(x))). (Swapping the two passed
    every other test.)"""
    torch.manual_seed(0)
    config = preset("tiny", norm=norm)
    block, sublayer = Residual(config).eval(), nn.Linear(config.d_model, config.d_model)
    nn.init.normal_(block.norm.weight)
    nn.init.normal_(block.norm.bias)
    x = torch.randn(2, 5, config.d_model) * 3 + 1

    def layer_norm(y: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(y, (config.d_model,), block.norm.weight, block.norm.bias)

    expected = layer_norm(x + sublayer(x)) if norm == "post" else x + sublayer(layer_norm(x))
    with torch.no_grad():
        torch.testing.assert_close(block(x, sublayer), expected.detach())


def test_learned_positions_and_pre_norm_run() -> None:
    for kw in ({"positional": "learned"}, {"norm": "pre"}):
        model = _tiny(**kw)
        assert model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])).shape == (1, 2, 1000)


def test_tiny_model_learns_to_reverse() -> None:
    """A 2-layer model learns to reverse 5-token sequences on the CPU in seconds: greedy decoding
    reverses (almost) every one of 256 unseen sequences and ends them with </s>. Sized to converge
    (loss ~0.002) whichever CPU's rounding it trains with: at 300 steps one sequence in ten was
    still wrong, so a single example passed on one CPU and failed on another."""
    torch.manual_seed(0)
    config = preset("tiny", vocab_size=16, p_drop=0.0, d_model=64, d_ff=128)
    model = Transformer(config)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    first = None
    for _step in range(500):
        body = torch.randint(4, 16, (64, 5))
        src = torch.cat([body, torch.full((64, 1), 3)], 1)
        out = torch.cat([body.flip(1), torch.full((64, 1), 3)], 1)
        tgt_in = torch.cat([torch.full((64, 1), 2), out[:, :-1]], 1)
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), out)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first or loss.item()
    assert loss.item() < first / 100
    model.eval()
    body = torch.randint(4, 16, (256, 5), generator=torch.Generator().manual_seed(1))
    src = torch.cat([body, torch.full((256, 1), 3)], 1)
    ys = torch.full((256, 1), 2)
    with torch.no_grad():
        for _ in range(6):
            ys = torch.cat([ys, model(src, ys)[:, -1:].argmax(-1)], 1)
    assert (ys[:, 1:6] == body.flip(1)).all(1).float().mean() >= 0.98 and (ys[:, 6] == 3).float().mean() >= 0.98


@pytest.mark.parametrize(
    ("q", "k", "v", "mask"),
    [
        ((2, 4, 5, 16), (2, 4, 7, 8), (2, 4, 7, 16), None),  # d_k of q and k differ
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 6, 16), None),  # k and v hold different numbers of keys
        ((2, 4, 5, 16), (3, 4, 7, 16), (3, 4, 7, 16), None),  # batches that do not broadcast
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 3, 7, 16), None),  # heads of k and v differ
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 16), (2, 1, 1, 6)),  # a mask over 6 keys, not 7
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 16), (2, 1, 3, 7)),  # a mask over 3 queries, not 5
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 16), (3, 1, 1, 7)),  # a mask of another batch
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 16), (1, 2, 4, 5, 7)),  # a mask of more dimensions
        ((16,), (7, 16), (7, 16), None),  # q without a query axis
    ],
)
def test_attention_of_shapes_that_do_not_fit_is_one_line_naming_them(
    q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], mask: tuple[int, ...] | None
) -> None:
    """attnlab.attention called with tensors that do not fit Eq. (1) raised PyTorch's own error from
    inside the matrix product or masked_fill (or broadcast a mask it should not have); the check
    compares shapes only (no tensor operation, nothing read from the device)."""
    tensors = [torch.randn(shape) for shape in (q, k, v)]
    allowed = None if mask is None else torch.ones(mask, dtype=torch.bool)
    said = f"q {tuple(q)}, k {tuple(k)}, v {tuple(v)}" + ("" if mask is None else f", mask {tuple(mask)}")
    with pytest.raises(ModelInputError, match=re.escape(said)) as error:
        attention(*tensors, allowed)
    assert "\n" not in str(error.value)


def test_attention_of_what_is_not_float_tensors_of_one_kind_is_one_line() -> None:
    """A NumPy array (what `trace.attention()` returns) was "axes don't match array" from inside
    the product, mixed dtypes PyTorch's "expected scalar type Float but found Double"."""
    q, k, v = torch.randn(5, 16), torch.randn(7, 16), torch.randn(7, 8)
    cases = {
        "torch tensors .* got q ndarray, k Tensor, v Tensor": (q.numpy(), k, v),
        "torch tensors .* got q Tensor, k Tensor, v list": (q, k, v.tolist()),
        "q, k and v of one floating-point dtype .* got q torch.float64 on cpu, k torch.float32": (q.double(), k, v),
        "q, k and v of one floating-point dtype .* v torch.float16": (q, k, v.half()),
        "q, k and v of one floating-point dtype .* q torch.int64": (q.long(), k.long(), v.long()),
    }
    for said, tensors in cases.items():
        with pytest.raises(ModelInputError, match=f"^attention takes {said}") as error:
            attention(*tensors)
        assert "\n" not in str(error.value)


def test_attention_takes_every_shape_that_fits() -> None:
    """What the model passes (equal batches; a padding mask (B, 1, 1, Lk); a causal one (Lq, Lk))
    and what broadcasts (one K/V for every batch row, one head's mask for all), unchanged."""
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 7, 16), torch.randn(2, 4, 7, 8)
    for mask in (None, torch.ones(2, 1, 1, 7, dtype=torch.bool), torch.ones(5, 7, dtype=torch.bool)):
        out, weights = attention(q, k, v, mask)
        assert out.shape == (2, 4, 5, 8) and weights.shape == (2, 4, 5, 7)
    out, weights = attention(q, k[:1], v[:1], torch.ones(1, 1, 5, 7, dtype=torch.bool))
    assert out.shape == (2, 4, 5, 8)
    assert attention(torch.randn(5, 16), torch.randn(7, 16), torch.randn(7, 8))[0].shape == (5, 8)


def test_attention_takes_a_bool_mask_and_zeroes_only_rows_with_no_key() -> None:
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    allowed = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    out, weights = attention(q, k, v, allowed)
    assert torch.all(weights[..., 2, :] == 0) and torch.allclose(weights[..., :2, :].sum(-1), torch.ones(1, 2, 2))
    for wrong in (allowed.long(), torch.zeros(3, 3)):  # a 0/1 or an additive float mask
        with pytest.raises(ModelInputError, match="must be a bool tensor"):
            attention(q, k, v, wrong)
    q[0, 0, 0, 0] = float("nan")  # a NaN input stays visible: the mask once turned it into zeros
    assert torch.isnan(attention(q, k, v, allowed)[1][0, 0, 0]).all()
