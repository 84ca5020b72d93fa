"""Direct logit attribution's views: `viz.logit_attribution_figure` (every decoder head's and
feed-forward layer's share of one output piece's logit, each in its own cell on a scale symmetric
about 0, labelled to one decimal with no "-0.0"), `viz.logit_source_figure` (the encoder–decoder
heads' shares by source piece), their one-line refusals, and the Logit lens tab's section that
draws them for a piece chosen there or tapped on the lens, with the line whose sum is the model's logit.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from bokeh.models import HoverTool
from test_explorer_views import decode, explorer, lab  # noqa: F401 (the module's fixture)
from test_patching_views import one_line

from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.patching_text import word
from attnlab.app.words import figure_words
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution
from attnlab.viz.cells import block_starts
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.logit_attribution import FOR

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
SENTENCE = "A man is riding a bicycle down the street."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def attribution(model: Model) -> LogitAttribution:
    return logit_attribution(model, model.translate(SENTENCE, record=True).trace)


def cells(fig: object) -> dict[tuple[float, float], dict[str, object]]:
    """Each cell's row of the grid's source, by where it is drawn (x, y)."""
    data = fig.select_one({"name": "cells"}).data_source.data
    return {(x, y): {k: data[k][i] for k in data} for i, (x, y) in enumerate(zip(data["x"], data["y"], strict=True))}


def synthetic(self_heads: np.ndarray, cross_heads: np.ndarray, ffn: np.ndarray) -> LogitAttribution:
    """An attribution of two positions and three source pieces with the shares given."""
    layers, heads, n = self_heads.shape
    cross_source = np.repeat(cross_heads[..., None] / 3, 3, axis=-1)
    zeros = np.zeros(n)
    return LogitAttribution(
        ["<s>", "▁a"], ["▁a", "</s>"], ["▁x", "▁y", "</s>"], "mean", ["", ""], self_heads, cross_heads, ffn,
        zeros, zeros, zeros, cross_source, self_heads.sum((0, 1)) + cross_heads.sum((0, 1)) + ffn.sum(0),
    )  # fmt: skip


def test_each_cell_holds_its_own_parts_share(attribution: LogitAttribution) -> None:
    """Found by where it is drawn: the self-attention heads' block, then the encoder–decoder
    heads', then the feed-forward column, layer 0 at the bottom; a cell anywhere else, or a share
    of another part, position or kind, fails this."""
    position = 1  # "▁Mann"
    fig = viz.logit_attribution_figure(attribution, position)
    shown = cells(fig)
    layers, heads = attribution.self_heads.shape[:2]
    assert len(shown) == layers * (2 * heads + 1) and fig.name == "logit-attribution"
    starts = block_starts([heads, heads, 1])
    for layer, head in np.ndindex(layers, heads):
        for start, shares, kind in (
            (starts[0], attribution.self_heads, "decoder"),
            (starts[1], attribution.cross_heads, "cross"),
        ):
            cell = shown[(start + head + 0.5, layer + 0.5)]
            assert cell["value"] == shares[layer, head, position]
            assert cell["label"] == f"{shares[layer, head, position]:.1f}".replace("-0.0", "0.0")
            assert cell["part"] == viz.WORDS["head.title"].format(
                kind_title=viz.WORDS[f"kind.{kind}"], layer=layer, head=head
            )
    for layer in range(layers):
        cell = shown[(starts[2] + 0.5, layer + 0.5)]
        assert cell["value"] == attribution.ffn[layer, position] and cell["reads"] == "–"
    names = fig.select_one({"name": "kinds"}).data_source.data
    assert names["text"] == [
        viz.WORDS["attribution.self"],
        viz.WORDS["attribution.cross"],
        viz.WORDS["attribution.ffn"],
    ]
    assert names["x"] == [heads / 2, starts[1] + heads / 2, starts[2] + 0.5]
    # an encoder–decoder head's hover names the source pieces with the largest share of its share there
    top = attribution.cross_heads[-1, :, position].argmax()
    split = attribution.cross_source[-1, top, position]
    most = [piece_label(spelled(attribution.source)[i]) for i in np.argsort(-np.abs(split))[:3]]
    assert [p.rsplit(" ", 1)[0] for p in shown[(starts[1] + top + 0.5, layers - 0.5)]["reads"].split(", ")] == most
    mapper = fig.select_one({"name": "cells"}).glyph.fill_color.transform
    largest = max(
        np.abs(attribution.self_heads[..., position]).max(), np.abs(attribution.cross_heads[..., position]).max()
    )
    assert mapper.low == -mapper.high and mapper.high == pytest.approx(
        max(largest, np.abs(attribution.ffn[:, position]).max())
    )
    tips = dict(fig.select_one(HoverTool).tooltips)
    assert tips[viz.WORDS["attribution.share"]] == "@share_tip" and tips[viz.WORDS["attribution.reads"]] == "@reads"
    logit = attribution.logit[position]
    assert one_line(fig.title.text) == viz.WORDS["attribution.title_mean"].format(piece="Mann", position=1, logit=logit)


def test_a_share_that_rounds_to_zero_is_written_without_a_minus() -> None:
    self_heads = np.array([[[-0.04, 0.3], [0.0, -0.0]]])  # (1 layer, 2 heads, 2 positions)
    cross_heads = np.array([[[-0.06, 2.0], [-3.0, 0.04]]])
    fig = viz.logit_attribution_figure(synthetic(self_heads, cross_heads, np.array([[-0.001, 1.0]])), 0)
    labels = fig.select_one({"name": "cells"}).data_source.data["label"]
    assert labels == ["0.0", "0.0", "-0.1", "-3.0", "0.0"]  # self heads 0, 1; cross heads 0, 1; the FFN
    mapper = fig.select_one({"name": "cells"}).glyph.fill_color.transform
    assert (mapper.low, mapper.high) == (-3.0, 3.0)  # symmetric: the largest share is negative


def test_the_bars_split_the_cross_heads_share_by_source_piece(attribution: LogitAttribution) -> None:
    position = 5  # "▁Fahrrad"
    fig = viz.logit_source_figure(attribution, position, words=figure_words("es"))
    data = fig.select_one({"name": "bars"}).data_source.data
    split = attribution.cross_source[:, :, position].sum((0, 1))
    np.testing.assert_allclose(data["share"], split)
    assert data["share"].sum() == pytest.approx(attribution.cross_heads[:, :, position].sum())
    assert [c == FOR for c in data["color"]] == (split >= 0).tolist() and (split < 0).any()
    assert list(fig.xaxis[0].major_label_overrides.values()) == [piece_label(p) for p in spelled(attribution.source)]
    assert split.argmax() == attribution.source.index("▁bicycle")  # what the decoder read into "Fahrrad"
    title = figure_words("es")["attribution.source_title"].format(piece="Fahrrad", total=split.sum())
    assert one_line(fig.title.text) == title and fig.name == "logit-source"


def test_what_the_views_cannot_draw_is_one_line(attribution: LogitAttribution) -> None:
    for draw in (viz.logit_attribution_figure, viz.logit_source_figure):
        name = draw.__name__
        for wrong in ({}, None, logit_attribution):
            with pytest.raises(AttnlabError, match=f"^{name} draws what attnlab.logit_attribution returns, got "):
                draw(wrong, 0)
        for position in (11, -12, 1.0, True, "1"):
            with pytest.raises(AttnlabError, match=r"^no position .*: choose from 0, 1, .*, 10 \(-1: the last\)$"):
                draw(attribution, position)
        with pytest.raises(AttnlabError, match="^title must be a string"):
            draw(attribution, 0, title=3)
        assert "</s>" in draw(attribution, -1).title.text  # a negative position counts from the end
    for scale in (0, -1.0, float("nan"), "2"):
        with pytest.raises(AttnlabError, match=r"^scale \(the share the colours reach\) is a number > 0, got "):
            viz.logit_attribution_figure(attribution, 0, scale=scale)


def test_the_runner_up_is_named_in_the_title(model: Model) -> None:
    against = logit_attribution(model, model.translate(SENTENCE, record=True).trace, "runner-up")
    fig = viz.logit_attribution_figure(against, 1, words=figure_words("zh"))
    said = figure_words("zh")["attribution.title_runner_up"]
    expected = said.format(piece="Mann", position=1, other=viz.piece_word(against.contrast[1]), logit=against.logit[1])
    assert "".join(fig.title.text.split()) == "".join(expected.split())  # (Chinese wraps inside a run)


# -- the explorer ----------------------------------------------------------------------------------------
def line_numbers(line: str) -> dict[str, float]:
    """The numbers of the section's line ("Embedding +0.11 · ... sum of the shares 14.48 = the model's logit −
    mean logit 14.48")."""
    numbers = [float(n) for n in re.findall(r"[-+]?\d+\.\d+", line)]
    return dict(zip(("embedding", "position", "bias", "total", "logit"), numbers, strict=True))


def test_the_lens_tab_says_who_wrote_each_piece(lab: dict[str, Path]) -> None:  # noqa: F811 (the fixture)
    """Drawn when the tab opens, on the piece the model was surest of; another piece redraws both
    figures and the line, whose sum is the model's logit; the runner-up is read when chosen; a tap on
    a lens cell chooses that column's piece (and still opens what the layer read there)."""
    shown = explorer(lab, tiny="translate")
    box, store = shown.lens.attribution, shown.store
    assert box.grid.object is None and box.bars.object is None  # a hidden tab draws nothing
    shown.tabs.active = 8
    expected = logit_attribution(store.model, store.trace)
    first = int(np.argmax(expected.logit))
    grid, bars = box.grid.object, box.bars.object
    assert box.position.value == first and grid.name == "logit-attribution" and bars.name == "logit-source"
    assert list(box.position.options.values()) == list(range(len(store.trace.tgt_tokens)))
    said = line_numbers(box.line.object)
    assert said["total"] == said["logit"] == round(float(expected.logit[first]), 2)
    assert "= the model&#x27;s logit − mean logit " in box.line.object  # as the grid's title reads it
    assert [said[k] for k in ("embedding", "position", "bias")] == [
        round(float(getattr(expected, k)[first]), 2) for k in ("embedding", "position", "bias")
    ]
    other = (first + 1) % len(expected.produced)
    box.position.value = other
    assert box.grid.object is not grid and box.bars.object is not bars
    assert one_line(box.grid.object.title.text).startswith(
        f"“{piece_label(spelled(expected.produced)[other])}” (position {other})"  # (<0x36>: "6")
    )
    np.testing.assert_array_equal(
        box.bars.object.select_one({"name": "bars"}).data_source.data["share"],
        expected.cross_source[:, :, other].sum((0, 1)),
    )
    assert line_numbers(box.line.object)["logit"] == round(float(expected.logit[other]), 2)
    box.against.value = "runner-up"
    runner_up = logit_attribution(store.model, store.trace, "runner-up")
    assert box.position.value == other and "runner-up" in box.grid.object.title.text
    assert line_numbers(box.line.object)["total"] == round(float(runner_up.logit[other]), 2)
    assert f"− the logit of “{word(runner_up.contrast, other)}” " in box.line.object
    from bokeh.events import Tap

    lens = shown.lens.figure.object
    lens._trigger_event(Tap(lens, x=2.5, y=0.5))  # the cell of layer 0, position 2
    assert box.position.value == 2 and "(position 2)" in one_line(box.grid.object.title.text)
    assert (store.kind, store.layer, store.query, shown.tabs.active) == ("cross", 0, 2, 1) and not store.error
    shown.tabs.active = 8
    drawn = box.grid.object
    decode(shown, "a girl sits on a red bike .")
    assert box.grid.object is not drawn and len(box.position.options) == len(store.trace.tgt_tokens)
    assert text("attribution.heading") in box.layout[0].object


def test_the_section_speaks_the_page_language(lab: dict[str, Path]) -> None:  # noqa: F811 (the fixture)
    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots

    shown = Explorer({"tiny": str(lab["translate"])}, CheckpointRoots([lab["root"]]), lang="zh")
    shown.open_listed("tiny")
    shown.tabs.active = 8
    box = shown.lens.attribution
    assert box.position.label == text("attribution.position", "zh") and list(box.against.options) == [
        text("attribution.mean", "zh"),
        text("attribution.runner_up", "zh"),
    ]
    assert box.line.object.startswith("<p>词嵌入") and box.grid.object.yaxis[0].axis_label == text(
        "figure.lens_layer", "zh"
    )
    assert text("attribution.about", "zh") in box.layout[-1].objects[-1].object


def test_a_model_it_cannot_read_is_the_sections_line(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The lens stays drawn; the section says why it has no figures, in one line."""
    from attnlab.app.explorer import attribution as section

    def refuse(*_args: object) -> None:
        raise AttnlabError("direct logit attribution reads a model in eval mode; call .eval() on it first")

    monkeypatch.setattr(section, "logit_attribution", refuse)
    shown = explorer(lab, tiny="translate")
    shown.tabs.active = 8
    box = shown.lens.attribution
    assert shown.lens.figure.object is not None and box.grid.object is None and not shown.store.error
    assert "eval mode" in box.line.object and "attn-attribution-error" in box.line.object
