"""Attention rollout (`attnlab.record.rollout`), its figure (`attnlab.viz.rollout_figure`) and the
explorer's tab that shows it: numbers worked by hand, the properties a rollout must have on a real
model's trace, and the one-line refusals of a trace it cannot roll out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bokeh.models import ImageRGBA
from test_viz import some_heads, synthetic_trace

from attnlab import rollout, viz
from attnlab.app.words import figure_words
from attnlab.errors import AttnlabError
from attnlab.record.trace import AttentionTrace

BUNDLED = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"


def one_hot_columns(columns: list[int], tokens: int = 3, heads: int = 1) -> list[np.ndarray]:
    """Layer l's maps: every query puts all its weight on key `columns[l]`."""
    maps = []
    for column in columns:
        layer = np.zeros((heads, tokens, tokens), np.float32)
        layer[:, :, column] = 1.0
        maps.append(layer)
    return maps


def encoder_trace(maps: list[np.ndarray], **meta: object) -> AttentionTrace:
    tokens = [f"▁t{i}" for i in range(maps[0].shape[1])]
    config = {"n_layers": len(maps), "n_heads": maps[0].shape[0]}
    return AttentionTrace(tokens, tokens, {"encoder": maps}, model={"config": config}, meta=dict(meta))


def test_two_layers_by_hand() -> None:
    """Layer 0 sends every query to token 0, layer 1 to token 1. Blended half and half with the
    identity and multiplied bottom up, R_1 = Ã_1 Ã_0; the other order, Ã_0 Ã_1, gives another
    first row ([0.5, 0.5, 0]), so this fails if the layers are multiplied top down."""
    flow = rollout(encoder_trace(one_hot_columns([0, 1])), "encoder")
    assert flow.shape == (2, 3, 3) and flow.dtype == np.float32
    np.testing.assert_allclose(flow[0], [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5]])
    np.testing.assert_allclose(flow[1], [[0.75, 0.25, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]])


def test_the_residual_weight_runs_from_the_maps_alone_to_the_identity() -> None:
    trace = synthetic_trace(n_layers=3)
    mean = [m.astype(np.float64).mean(0) for m in trace.maps["encoder"]]
    np.testing.assert_allclose(rollout(trace, "encoder", 0.0)[2], mean[2] @ mean[1] @ mean[0], rtol=1e-5)
    assert np.array_equal(rollout(trace, "encoder", 1.0), np.broadcast_to(np.eye(7), (3, 7, 7)))


def test_cross_attention_is_read_through_the_encoders_full_rollout() -> None:
    trace = synthetic_trace()
    encoder_top = rollout(trace, "encoder")[-1]
    for layer in range(2):
        expected = trace.maps["cross"][layer].astype(np.float64).mean(0) @ encoder_top
        np.testing.assert_allclose(rollout(trace, "cross")[layer], expected, rtol=1e-5)


def test_a_switched_off_head_passes_nothing_on() -> None:
    """Head 1 of layer 0 was off when recorded: its (one-hot) map is drawn but left out of the
    mean; a layer with every head off is the residual alone."""
    uniform = np.full((1, 3, 3), 1 / 3, np.float32)
    layer0 = np.concatenate([uniform, one_hot_columns([2])[0]])
    layer1 = np.concatenate([uniform, uniform])
    off = rollout(encoder_trace([layer0, layer1], heads_off=[["encoder", 0, 1]]), "encoder")
    alone = rollout(encoder_trace([uniform, uniform]), "encoder")
    np.testing.assert_allclose(off, alone, rtol=1e-6)
    silent = rollout(encoder_trace([layer0, layer1], heads_off=[["encoder", 0, 0], ["encoder", 0, 1]]), "encoder")
    assert np.array_equal(silent[0], np.eye(3))


@pytest.mark.skipif(not (BUNDLED / "manifest.json").is_file(), reason="needs the bundled checkpoint")
def test_a_real_translation_rolls_out_to_distributions() -> None:
    """On the bundled translator: every row of every kind's rollout is a distribution over the
    input tokens, the decoder's keeps the causal mask, and the top encoder layer's flow is no
    longer the identity (it mixed the sentence) yet keeps more of each token at its own position
    than a head's average map does."""
    import attnlab

    trace = attnlab.load(BUNDLED).translate("A man in a blue shirt is playing the guitar.", record=True).trace
    for kind in trace.kinds:
        flow = rollout(trace, kind)
        assert flow.shape == (trace.n_layers(kind), *trace.attention(kind, 0).shape[1:])
        np.testing.assert_allclose(flow.sum(-1), 1.0, atol=1e-4)
        assert (flow >= 0).all()
    decoder = rollout(trace, "decoder")
    assert (decoder[:, ~trace.mask("decoder")] == 0).all()
    top = rollout(trace, "encoder")[-1]
    assert np.diag(top).mean() > np.diag(trace.attention("encoder", -1).mean(0)).mean()
    assert np.abs(top - np.eye(len(top))).max() > 0.1


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (
            lambda t: AttentionTrace(
                t.src_tokens, t.tgt_tokens, {"encoder": t.maps["encoder"][1:]}, layers={"encoder": [1]}, model=t.model
            ),
            "every layer and head",
        ),  # fmt: skip
        (lambda t: some_heads(t, [0, 2]), "every layer and head"),
        (
            lambda t: AttentionTrace(t.src_tokens, t.tgt_tokens, {"encoder": t.maps["encoder"]}, model=t.model),
            "no cross attention",
        ),  # fmt: skip
    ],
)
def test_a_trace_that_lacks_layers_heads_or_a_kind_is_one_line(make, said: str) -> None:
    trace = make(synthetic_trace())
    with pytest.raises(AttnlabError, match=said):
        rollout(trace, "cross")


def test_what_is_not_a_trace_is_refused_as_the_logit_lens_refuses_it() -> None:
    """`rollout(None, ...)` and `rollout(result, ...)` (a Result, not its .trace) were an
    AttributeError from inside the rollout."""
    import attnlab

    model = attnlab.load(BUNDLED)
    result = model.translate("A dog runs.")
    for given in (None, result):  # (result.trace is None: translated without record=True)
        with pytest.raises(AttnlabError) as lens:
            attnlab.logit_lens(model, given)
        for kind in ("encoder", "cross"):
            with pytest.raises(AttnlabError) as error:
                rollout(given, kind)
            assert str(error.value) == str(lens.value) and "not an AttentionTrace" in str(error.value)


@pytest.mark.parametrize("residual", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_a_residual_weight_outside_zero_to_one_is_one_line(residual: object) -> None:
    with pytest.raises(AttnlabError, match="residual weight"):
        rollout(synthetic_trace(), "encoder", residual)


def test_the_figure_shows_the_flow_up_to_a_layer_in_the_pages_language() -> None:
    trace = synthetic_trace()
    fig = viz.rollout_figure(trace, "encoder", -1)
    assert fig.title.text == "attention rollout · encoder self-attention · up to layer 1"
    image = fig.select_one({"name": "cells"}).data_source.data["image"][0]
    np.testing.assert_allclose(image[::-1], rollout(trace, "encoder")[1], rtol=1e-6)
    assert fig.xaxis.axis_label == "input token" and not fig.select({"type": ImageRGBA})  # no hatch: nothing forbidden
    assert fig.select_one({"name": "cells"}).glyph.color_mapper.high == pytest.approx(float(image.max()))  # own top
    decoder = viz.rollout_figure(trace, "decoder", 0, words=figure_words("es"))
    assert decoder.title.text.startswith("rollout de la atención") and decoder.title.text.endswith("hasta la capa 0")
    assert decoder.select({"type": ImageRGBA})  # the causal mask's cells hatched
    with pytest.raises(AttnlabError, match="layer 5"):
        viz.rollout_figure(trace, "encoder", 5)


def test_the_table_reads_the_flow_cell_by_cell() -> None:
    """What a screen reader gets of the map: a row a query, a column an input token, each share
    to three decimals; the decoder's causal mask "—"; the figure's own title as the caption."""
    import html
    import re

    trace = synthetic_trace()
    table = viz.rollout_table(trace, "encoder", -1)
    flow = rollout(trace, "encoder")[1]
    cells = [float(c) for c in re.findall(r"<td>([^<]*)</td>", table)]
    np.testing.assert_allclose(np.reshape(cells, flow.shape), flow, atol=5e-4)
    assert table.count("<th scope='col'>") == flow.shape[1] + 1 and table.count("<th scope='row'>") == flow.shape[0]
    title = viz.rollout_figure(trace, "encoder", -1).title.text
    assert f"<caption>{html.escape(' '.join(title.split()))}</caption>" in table
    decoder = viz.rollout_table(trace, "decoder", 0, words=figure_words("es"))
    shown = re.findall(r"<td[^>]*>([^<]*)</td>", decoder)
    assert [c == "—" for c in shown] == (~trace.mask("decoder")).ravel().tolist()
    assert "<caption>rollout de la atención" in decoder
    with pytest.raises(AttnlabError, match="more than 2 pieces a side"):
        viz.rollout_table(trace, "encoder", most=2)
    for most in (0, -1, 2.5, "3", True):  # -1 said "a table of 5 × 5 weights is more than -1 pieces a side"
        with pytest.raises(
            AttnlabError, match=f"^most must be a whole number of pieces ≥ 1, got {re.escape(repr(most))}$"
        ):
            viz.rollout_table(trace, "encoder", most=most)
