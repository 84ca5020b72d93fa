"""Attention weighed by what each key writes (`attnlab.record.norms`, Kobayashi et al. 2020): the
vectors f(x_j) must be the layer's output taken apart, and the weighed trace every view's input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab import load, viz
from attnlab.errors import AttnlabError
from attnlab.record.equation import layer_inputs
from attnlab.record.norms import NORMED, norm_trace, shift, written
from attnlab.record.recorder import hook_point
from attnlab.record.trace import AttentionTrace

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def model() -> object:
    return load(CHECKPOINTS / "multi30k-en-de")


@pytest.fixture(scope="module")
def trace(model: object) -> AttentionTrace:
    return model.score("Two dogs run across the grass .", "Zwei Hunde rennen über das Gras .", record=True).trace


def test_what_each_key_writes_adds_up_to_the_layers_output(model: object, trace: AttentionTrace) -> None:
    """Σ_h Σ_j α_ij f_h(x_j) + b^O is each attention layer's output, in every kind and layer: the
    f(x_j) are its value vectors carried through each head's own slice of W^O."""
    vectors = written(model, trace)
    modules = {hook_point(m): m for m in model.model.attention_modules()}
    inputs = layer_inputs(model, trace, list(modules.values()))
    assert set(vectors) == set(modules)
    for (kind, layer), module in modules.items():
        seen = inputs[module]
        with torch.no_grad():
            out = module(seen["x"], seen["memory"], mask=seen["mask"])[0]
        alpha = torch.from_numpy(trace.attention(kind, layer).copy())
        rebuilt = torch.einsum("hqk,hkd->qd", alpha, vectors[(kind, layer)]) + module.w_o.bias
        assert out.abs().max() > 0.5  # (a tolerance the outputs' size can fail)
        torch.testing.assert_close(rebuilt, out, atol=2e-4, rtol=1e-4, msg=f"{kind} layer {layer}")


def test_the_weighed_trace_holds_each_keys_share_of_what_a_head_writes(model: object, trace: AttentionTrace) -> None:
    """Each row of a weighed map is α_ij‖f(x_j)‖ over its sum: 1 along each row, 0 where the mask
    forbade, and a short vector's key reads less than its weight (the sink Kobayashi et al. saw)."""
    normed = norm_trace(model, trace)
    assert normed.meta["weighed"] == NORMED and normed.layers == trace.layers and normed.kinds == trace.kinds
    norms = {point: v.norm(dim=-1).numpy() for point, v in written(model, trace).items()}
    for kind in trace.kinds:
        for layer in trace.layers[kind]:
            alpha, share = trace.attention(kind, layer), normed.attention(kind, layer)
            expected = alpha * norms[(kind, layer)][:, None, :]
            np.testing.assert_allclose(share, expected / expected.sum(-1, keepdims=True), atol=1e-6)
            np.testing.assert_allclose(share.sum(-1), 1.0, atol=1e-5)
            assert (share[:, ~trace.mask(kind)] == 0).all()
            kept = normed.meta["key_norms"][kind][trace.layers[kind].index(layer)]
            np.testing.assert_allclose(np.array(kept), norms[(kind, layer)], rtol=1e-6)
    for layer in trace.layers["cross"]:  # </s>'s vector is short in every cross head: it moves less than it is read
        weights, shares = trace.attention("cross", layer).mean(1), normed.attention("cross", layer).mean(1)
        assert (shares[:, -1] < 0.9 * weights[:, -1]).all(), (layer, weights[:, -1], shares[:, -1])
    key, weight, written_share = shift(trace, normed, "cross", 0, 3)
    assert trace.src_tokens[key] == "</s>" and weight > 0.2 and written_share < 0.7 * weight, (
        key,
        weight,
        written_share,
    )
    said = f"{weight:.0%} of the weight, {written_share:.0%} of what the head writes"  # the README's example
    assert said in " ".join((CHECKPOINTS.parent / "README.md").read_text(encoding="utf-8").split()), said


def test_a_weighed_trace_is_drawn_saved_and_loaded_like_any_other(
    model: object, trace: AttentionTrace, tmp_path: Path
) -> None:
    """Every view reads it; its titles say the weights are weighed; a file keeps it whole."""
    normed = norm_trace(model, trace)
    assert (
        viz.heatmap(normed, "cross", 1, 2).title.text
        == "encoder–decoder attention · layer 1 · head 2 · weighed by ‖αf(x)‖"
    )
    assert viz.heatmap(trace, "cross", 1, 2).title.text == "encoder–decoder attention · layer 1 · head 2"
    assert AttentionTrace.load(normed.save(tmp_path / "normed.trace")) == normed
    maps = {kind: [trace.attention(kind, 2)[[1, 3]]] for kind in trace.kinds}
    subset = AttentionTrace(
        trace.src_tokens, trace.tgt_tokens, maps, trace.masks, dict.fromkeys(maps, [2]), [1, 3], trace.model
    )
    weighed = norm_trace(model, subset)
    assert weighed.heads == [1, 3] and weighed.attention("cross", 2).shape == subset.attention("cross", 2).shape


def test_weighing_refuses_another_models_trace_or_a_bare_transformer(model: object, trace: AttentionTrace) -> None:
    other = load(CHECKPOINTS / "multi30k-en-de-r3")
    for args, match in (
        ((other, trace), "recorded by another model"),
        ((model.model, trace), "^weighing attention by what it writes needs what attnlab.load returns"),
        ((model, None), "^the trace is a NoneType"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            norm_trace(*args)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_a_bf16_or_int8_model_weighs_as_its_fp32_weights_do(model: object, dtype: str) -> None:
    """`attnlab.load(dtype=...)` models: bf16 activations meet bf16 weights (a float32 cast was a
    dtype error) and an int8 W^O is dequantized (its `weight` is a method)."""
    pair = ("Two dogs run across the grass .", "Zwei Hunde rennen über das Gras .")
    other = load(CHECKPOINTS / "multi30k-en-de", dtype=dtype)
    expected, got = (norm_trace(m, m.score(*pair, record=True).trace) for m in (model, other))
    np.testing.assert_allclose(got.attention("cross", 0), expected.attention("cross", 0), atol=0.03)


def test_an_ablated_trace_is_weighed_with_its_heads_off_and_a_weighed_one_not_again(model: object) -> None:
    """A trace recorded with heads off was weighed from a pass with every head on: the layers
    above them read other inputs (cross shares off by up to 0.10). Weighing a weighed trace again
    weighed its shares and still said "norm"."""
    import attnlab

    off = {("encoder", 0): [0, 1, 2]}
    trace = model.translate("Two dogs run across the grass .", record=True, ablate_heads=off).trace
    with attnlab.ablate(model, off):  # the model as it was when the trace was recorded
        expected = norm_trace(model, trace)
    np.testing.assert_allclose(
        norm_trace(model, trace).attention("cross", 0), expected.attention("cross", 0), atol=1e-5
    )
    with pytest.raises(AttnlabError, match="^the trace is already weighed by what each key writes"):
        norm_trace(model, expected)


def test_another_threads_pass_is_not_read_as_this_ones(trace: AttentionTrace) -> None:
    """The inputs Eq. (1) and the norms are recomputed from were captured by a hook every
    thread's pass ran: with another thread scoring a longer sentence on the same model,
    `norm_trace` failed on its shapes ("operands could not be broadcast together"), or came out
    of the other sentence where both were as long."""
    import threading

    from attnlab.record.equation import attention_parts

    model = load(CHECKPOINTS / "multi30k-en-de")  # (its own: the module's model stays as it was)
    alone = norm_trace(model, trace)
    parts = attention_parts(model, trace, "encoder", 1, 0)["weights"]
    done = threading.Event()

    def score() -> None:
        while not done.is_set():
            model.score("A cat walks slowly across the green grass near the old house.", "Eine Katze geht langsam .")

    worker = threading.Thread(target=score)
    worker.start()
    try:
        for _ in range(5):
            beside = norm_trace(model, trace)
            for kind in alone.kinds:
                for layer in alone.layers[kind]:
                    assert np.array_equal(beside.attention(kind, layer), alone.attention(kind, layer)), (kind, layer)
            assert np.array_equal(attention_parts(model, trace, "encoder", 1, 0)["weights"], parts)
    finally:
        done.set()
        worker.join()
