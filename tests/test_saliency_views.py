"""Gradient saliency's views: `viz.saliency_figure` (a row an output piece; the source's columns,
a gap and a line, then the decoder inputs'; each cell its share of the row's |gradient × input|, so
a row sums to 1 over both groups; the decoder inputs a row cannot see hatched, not white), its
words in Spanish and Chinese, its one-line refusals; the Logit lens tab's section that draws it
once per run (and once more for SmoothGrad), with the line naming the piece that depends least on
the source; and the notebook explorer's box. The browser side is tests/test_saliency_browser.py.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pytest
from bokeh.models import ColorBar, HoverTool, Span
from test_explorer_views import decode, explorer, lab  # noqa: F401 (the module's fixture)
from test_patching_views import one_line

from attnlab import viz, widgets
from attnlab.app.explorer import saliency as section
from attnlab.app.i18n import text
from attnlab.app.patching_text import word
from attnlab.app.words import figure_words, saliency_line
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError
from attnlab.record.saliency import Saliency, saliency
from attnlab.viz.cells import FIT_PX
from attnlab.viz.labels import piece_label, spelled
from attnlab.viz.saliency import BAR_PX, MASKED, UNSEEN

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
SENTENCE = "A man is riding a bicycle down the street."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def read(model: Model) -> Saliency:
    return saliency(model, model.translate(SENTENCE, record=True).trace)


def blocks(fig: object) -> tuple[np.ndarray, np.ndarray]:
    """The two blocks' shares as drawn, rows top to bottom (bokeh draws an image's row 0 at the bottom)."""
    return tuple(
        fig.select_one({"name": f"cells-{g}"}).data_source.data["image"][0][::-1] for g in ("source", "inputs")
    )


def seen_part(inputs: np.ndarray) -> np.ndarray:
    """The decoder inputs' shares with those a row cannot see (`UNSEEN`) as 0."""
    return np.where(inputs >= 0, inputs, 0.0)


def synthetic(source: list[str], inputs: list[str], produced: list[str], seed: int = 0) -> Saliency:
    rng = np.random.default_rng(seed)
    return Saliency(
        source, inputs, produced, rng.normal(size=(len(produced), len(source))),
        np.tril(rng.normal(size=(len(produced), len(inputs)))), 0,
    )  # fmt: skip


# -- the figure ------------------------------------------------------------------------------------------
def test_each_row_shares_its_saliency_over_both_groups(read: Saliency) -> None:
    """A row sums to 1 over the source's block and the decoder inputs'; the source's part is
    `source_share`; each cell is its own |score| over the row's, in the pieces' order, and the
    decoder inputs after the row's own are below 0 (drawn grey under the hatch; the hover says the
    decoder cannot see them), never a white 0."""
    fig = viz.saliency_figure(read)
    source, inputs = blocks(fig)
    assert source.shape == read.source_scores.shape and inputs.shape == read.target_scores.shape
    seen = np.tril(np.ones(inputs.shape, bool))
    assert (inputs[~seen] == UNSEEN).all() and (inputs[seen] >= 0).all() and (source >= 0).all()
    np.testing.assert_allclose(source.sum(1) + seen_part(inputs).sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(source.sum(1), read.source_share(), rtol=1e-5)
    total = np.abs(read.source_scores).sum(1) + np.abs(read.target_scores).sum(1)
    np.testing.assert_allclose(source, np.abs(read.source_scores) / total[:, None], rtol=1e-5)
    np.testing.assert_allclose(inputs[seen], (np.abs(read.target_scores) / total[:, None])[seen], rtol=1e-5)
    assert fig.select_one({"name": "mask-overlay"}) is not None
    mapper = fig.select_one({"name": "cells-source"}).glyph.color_mapper
    assert (
        mapper.low == 0 and mapper.high == pytest.approx(max(source.max(), inputs.max())) and mapper.low_color == MASKED
    )
    assert fig.select_one({"name": "cells-inputs"}).glyph.color_mapper is mapper  # one scale for both groups
    bar = fig.select_one(ColorBar)
    assert bar.title == viz.WORDS["saliency.share"] and bar.color_mapper is mapper
    assert one_line(fig.title.text) == viz.WORDS["saliency.title"] and fig.name == "saliency"


def test_the_columns_are_the_source_then_a_gap_and_a_line_then_the_decoder_inputs(read: Saliency) -> None:
    fig = viz.saliency_figure(read)
    n_source, n_inputs, n_rows = len(read.source), len(read.inputs), len(read.produced)
    first, second = (fig.select_one({"name": f"cells-{g}"}).glyph for g in ("source", "inputs"))
    assert (first.x, first.dw, second.dw, first.dh) == (0, n_source, n_inputs, n_rows)
    assert second.x >= n_source + 1 and fig.x_range.end == second.x + n_inputs  # a gap of a column at least
    (line,) = fig.select({"type": Span})
    assert n_source < line.location < second.x and line.dimension == "height"
    pieces = fig.xaxis[0].major_label_overrides  # the top axis: every piece of each group, in order
    assert list(pieces.values()) == [piece_label(p) for p in [*spelled(read.source), *spelled(read.inputs)]]
    assert list(pieces) == [i + 0.5 for i in range(n_source)] + [second.x + i + 0.5 for i in range(n_inputs)]
    rows = fig.yaxis[0].major_label_overrides  # the first output piece on top
    assert [rows[t] for t in sorted(rows, reverse=True)] == [piece_label(p) for p in spelled(read.produced)]
    names = fig.xaxis[1].major_label_overrides  # under the columns: each group's name at its centre
    assert names == {n_source / 2: "source", second.x + n_inputs / 2: "output so far"}
    hover = fig.select_one(HoverTool)
    assert [r.name for r in hover.renderers] == ["cells-source", "cells-inputs"]
    assert dict(hover.tooltips) == {
        "output piece": "$y{custom}", "input piece": "$x{custom}",
        "share of the row": "@image{custom}", "gradient × input": "@score{custom}",
    }  # fmt: skip
    groups = hover.formatters["$x"].args["groups"]
    assert [(g[0], g[2]) for g in groups] == [(0.0, "source"), (second.x, "output so far")]
    assert groups[0][1] == [piece_label(p, None) for p in spelled(read.source)]
    scores = fig.select_one({"name": "cells-source"}).data_source.data["score"][0][::-1]
    np.testing.assert_array_equal(scores, read.source_scores)  # the signed score, at the cell's index


def test_its_words_are_the_pages(model: Model) -> None:
    """In Spanish and Chinese its title, axes, groups, colour bar and hover are the catalogue's;
    a SmoothGrad map says so and over how many copies."""
    smooth = saliency(model, model.translate(SENTENCE, record=True).trace, samples=3)
    for lang, title, group in (("es", "gradiente × entrada", "salida hasta ahí"), ("zh", "梯度 × 输入", "已输出部分")):
        said = figure_words(lang)
        fig = viz.saliency_figure(smooth, words=said)
        shown = "".join(fig.title.text.split())
        assert shown.startswith("SmoothGrad") and "3" in shown and "".join(title.split()) in shown
        assert "".join(said["saliency.title_smooth"].format(samples=3).split()) == shown  # (Chinese wraps in a run)
        assert group in fig.xaxis[1].major_label_overrides.values()
        assert fig.select_one(ColorBar).title == said["saliency.share"]
        assert fig.yaxis[0].axis_label == said["saliency.output"] and fig.xaxis[0].axis_label == said["saliency.input"]
        assert said["saliency.masked"] == fig.select_one(HoverTool).formatters["@image"].args["masked"]
        assert {t.description for t in fig.toolbar.tools} <= {v for k, v in said.items() if k.startswith("tool.")}
    assert viz.saliency_figure(smooth).title.text.startswith("SmoothGrad (gradient × input averaged over 3 noisy")


def test_byte_pieces_are_named_by_their_character() -> None:
    """A character the tokenizer spells in UTF-8 bytes (我: <0xE6> <0x88> <0x91>) reads as it, with
    each byte's place, on the axes and in the hover."""
    s = synthetic(["<0xE6>", "<0x88>", "<0x91>", "</s>"], ["<s>", "<0x32>"], ["<0x32>", "</s>"])
    fig = viz.saliency_figure(s)
    assert list(fig.xaxis[0].major_label_overrides.values())[:3] == ["我 1/3", "我 2/3", "我 3/3"]
    assert list(fig.yaxis[0].major_label_overrides.values()) == ["2", "</s>"]
    assert fig.select_one(HoverTool).formatters["$x"].args["groups"][1][1] == ["<s>", "2"]


def test_a_long_pair_is_capped_and_narrows_with_the_window() -> None:
    """Cells shrink to fit (a 120-piece pair is no 7,000 px map), and with `fit` the map narrows
    with the window down to `FIT_PX`, the rest dragged into view; a short pair fits `FIT_PX` whole."""
    pieces = [f"▁w{i}" for i in range(120)]
    long = viz.saliency_figure(synthetic(pieces, ["<s>", *pieces[:-1]], pieces), fit=True)
    assert long.width <= 1500 and long.height <= 800, (long.width, long.height)
    assert long.sizing_mode == "stretch_width" and long.min_width == FIT_PX and long.max_width == long.width
    short = viz.saliency_figure(synthetic(["▁a", "▁dog", "</s>"], ["<s>", "▁ein"], ["▁ein", "</s>"]))
    assert short.width <= FIT_PX and short.sizing_mode != "stretch_width"
    outputs = pieces[:12]  # a long source, a short output: its rows keep their height (a 3.5 px strip when square)
    wide = viz.saliency_figure(synthetic(pieces, ["<s>", *outputs[:-1]], outputs))
    assert wide.height >= 12 * 28
    assert len(wide.yaxis[0].ticker.ticks) == 12  # every row named


def test_a_row_of_zeros_stays_zero_and_what_it_cannot_draw_is_one_line(read: Saliency) -> None:
    zero = synthetic(["▁a", "</s>"], ["<s>", "▁b"], ["▁b", "</s>"])
    zero.source_scores[0], zero.target_scores[0] = 0.0, 0.0
    source, inputs = blocks(viz.saliency_figure(zero))
    assert (
        (source[0] == 0).all()
        and inputs[0, 0] == 0
        and source[1].sum() + seen_part(inputs[1]).sum() == pytest.approx(1)
    )
    bar = viz.saliency_figure(zero).select_one(ColorBar)  # two rows: the bar's title was cut at 56 px
    assert bar.title == "share of the row" and viz.saliency_figure(zero).height >= BAR_PX + 90
    said = saliency_line(zero, "en")  # the row of none is not named "0% on the source and the rest ..."
    assert said.startswith("The piece that depends least on the source: “</s>” (position 1)")
    zero.source_scores[1], zero.target_scores[1] = 0.0, 0.0
    assert saliency_line(zero, "en") == ""
    whole = synthetic(["▁a", "</s>"], ["<s>", "▁b"], ["▁b", "</s>"])
    count = Saliency(whole.source, whole.inputs, whole.produced, np.ones((2, 2), int), np.ones((2, 2), int), 0)
    assert blocks(viz.saliency_figure(count))[0].sum() == pytest.approx(1.0)  # integer scores: numpy's casting error
    for bad in (np.nan, np.inf):
        whole.source_scores[1, 0] = bad  # (drawn as a pale row, the hover writing "NaN")
        with pytest.raises(
            AttnlabError, match="^saliency_figure draws finite scores; output piece 1 has NaN or infinity$"
        ):
            viz.saliency_figure(whole)
    for wrong in ({}, None, saliency):
        with pytest.raises(AttnlabError, match="^saliency_figure draws what attnlab.record.saliency returns, got "):
            viz.saliency_figure(wrong)
    cut = Saliency(read.source[:-1], read.inputs, read.produced, read.source_scores, read.target_scores, 0)
    with pytest.raises(AttnlabError, match=r"^saliency_figure draws scores of shape \(output, source\) "):
        viz.saliency_figure(cut)
    for option, value in (("title", 3), ("budget", 0), ("name", 5)):
        with pytest.raises(AttnlabError, match=f"^{option}"):
            viz.saliency_figure(read, **{option: value})


# -- the explorer ----------------------------------------------------------------------------------------
def test_the_lens_tab_reads_each_run_once(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Drawn when the tab opens: the run's map, and the line naming the piece whose saliency is
    least on the source. A redraw reads nothing; SmoothGrad is read once when ticked, and unticking
    goes back to the map already read; a new run is read again."""
    calls: list[int] = []

    def counted(model: object, trace: object, samples: int = 0, **settings: object) -> Saliency:
        calls.append(samples)
        return saliency(model, trace, samples=samples, **settings)

    monkeypatch.setattr(section, "saliency", counted)
    shown = explorer(lab, tiny="translate")
    box, store = shown.lens.saliency, shown.store
    assert box.figure.object is None and calls == []  # a hidden tab reads nothing
    shown.tabs.active = 8
    expected = saliency(store.model, store.trace)
    fig = box.figure.object
    assert fig.name == "saliency" and calls == [0] and fig.sizing_mode == "stretch_width"  # (narrows with the page)
    np.testing.assert_allclose(blocks(fig)[0].sum(1), expected.source_share(), rtol=1e-5)
    least = int(expected.source_share().argmin())
    percent = round(100 * float(expected.source_share()[least]))
    said = text("saliency.least", "en", piece=word(expected.produced, least), position=least, percent=percent)
    assert box.line.object == f"<p>{html.escape(said)}</p>"
    shown.lens.draw()
    assert calls == [0] and box.figure.object is not fig  # redrawn, not read again
    box.smooth.value = True
    assert calls == [0, section.SAMPLES] and one_line(box.figure.object.title.text).startswith("SmoothGrad")
    box.smooth.value = False
    assert calls == [0, section.SAMPLES] and not one_line(box.figure.object.title.text).startswith("SmoothGrad")
    decode(shown, "a girl sits on a red bike .")
    assert calls == [0, section.SAMPLES, 0] and len(blocks(box.figure.object)[0]) == len(store.trace.tgt_tokens)
    assert text("saliency.heading") in box.layout[0].object and not store.error


def test_the_section_speaks_the_page_language(lab: dict[str, Path]) -> None:  # noqa: F811 (the fixture)
    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots

    shown = Explorer({"tiny": str(lab["translate"])}, CheckpointRoots([lab["root"]]), lang="zh")
    shown.open_listed("tiny")
    shown.tabs.active = 8
    box = shown.lens.saliency
    assert text("saliency.heading", "zh") in box.layout[0].object
    assert box.smooth.label == text("saliency.smooth", "zh", samples=section.SAMPLES)
    assert box.line.object.startswith("<p>最不依赖原文的词元")
    assert box.figure.object.yaxis[0].axis_label == text("figure.saliency_output", "zh")
    assert html.escape(text("saliency.about", "zh")) in box.layout[-1].objects[-1].object


def test_a_model_it_cannot_read_is_the_sections_line(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The lens and the attribution stay drawn; the section says why it has no map, in one line."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AttnlabError("gradient saliency differentiates through the model: open it in fp32 or bf16, not int8")

    monkeypatch.setattr(section, "saliency", refuse)
    shown = explorer(lab, tiny="translate")
    shown.tabs.active = 8
    box = shown.lens.saliency
    assert shown.lens.figure.object is not None and shown.lens.attribution.grid.object is not None
    assert box.figure.object is None and not shown.store.error
    assert "not int8" in box.line.object and "attn-saliency-error" in box.line.object


def test_the_servers_time_limit_stops_it_in_one_line(lab: dict[str, Path]) -> None:  # noqa: F811
    """Saliency ran outside the server's time limit on one request: a parser's long output with
    SmoothGrad held every visitor up for six minutes. It stops with the limit's line, which says
    what takes less time; the lens above stays drawn, and the next run is read again."""
    shown = explorer(lab, tiny="translate")
    store, box = shown.store, shown.lens.saliency
    store.time_limit = 1e-6
    shown.tabs.active = 8
    assert box.figure.object is None and shown.lens.figure.object is not None and not store.error
    assert "Gradient saliency stopped after 1e-06 s" in box.line.object and "untick SmoothGrad" in box.line.object
    store.time_limit = 30
    box.smooth.value = True
    assert box.figure.object is not None and "stopped" not in box.line.object


# -- the notebook explorer -------------------------------------------------------------------------------
def test_the_notebook_explorer_shows_which_inputs_each_piece_depends_on(lab: dict[str, Path]) -> None:  # noqa: F811
    """Its box reads the open hypothesis while ticked, follows the chooser, draws in the notebook's
    language with the line under the map; unticked, nothing is drawn (it costs a pass per piece)."""
    translator = load(lab["translate"])
    shown = widgets.explore(translator, text="A man sits on a bike .", beam=3, lang="es")
    box = shown.saliency
    assert shown.figures["saliency"] is None and box.line.value == ""
    box.show.value = True
    for rank in (0, 2):
        shown.choose(rank)
        expected = saliency(translator, shown.result.hypotheses[rank].trace)
        source, inputs = blocks(shown.figures["saliency"])
        np.testing.assert_allclose(source, np.abs(expected.source_scores) / (
            np.abs(expected.source_scores).sum(1) + np.abs(expected.target_scores).sum(1))[:, None], rtol=1e-5)  # fmt: skip
        assert inputs.shape == (len(expected.produced), len(expected.inputs))
    assert "gradiente × entrada" in shown.figures["saliency"].title.text and not shown.errors.message
    assert "La pieza que menos depende del original" in box.line.value
    box.show.value = False
    assert shown.figures["saliency"] is None and box.line.value == ""
