"""`attnlab.widgets` driven from Python, as a notebook user drives it with the mouse.

Each test changes a control and asserts on what the figure now shows: the image glyph's array
against the trace, the axis labels against the tokens, and the render bundle that jupyter_bokeh
sends to the browser. Models are random-weight tiny fixtures (no corpus needed); the browser side
is covered by test_jupyterlab_browser.py.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from bokeh.core.json_encoder import serialize_json
from bokeh.events import Tap
from bokeh.layouts import row
from bokeh.models import GlyphRenderer, Image, ImageRGBA, Line, Rect
from test_notebooks import make_checkpoints
from test_viz import some_heads

import attnlab
from attnlab import viz, widgets
from attnlab.app import i18n, notebook
from attnlab.app.replay import Timeline
from attnlab.errors import AttnlabError, CheckpointError, ConfigError, ModelInputError
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace

GAP = 1.12  # viz.grid: thumbnails are 1 unit wide with 0.12 between them


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models decode faster on one thread than on two that busy cores make wait for each other
    (OpenMP spin-waits: 4x slower with a training run in the background)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_checkpoints(tmp_path_factory.mktemp("widgets"))


@pytest.fixture(scope="module")
def translator(paths: dict[str, Path]) -> attnlab.decode.Model:
    return attnlab.load(paths["translate"])


@pytest.fixture(scope="module")
def trace(translator: attnlab.decode.Model) -> AttentionTrace:
    return translator.score("A dog runs in the park .", "Ein hund läuft im park .").trace


def glyphs(figure: object, kind: type) -> list[GlyphRenderer]:
    return [r for r in figure.select(type=GlyphRenderer) if isinstance(r.glyph, kind)]


def shown(figure: object) -> np.ndarray:
    """The (q, k) array a heatmap draws (viz flips rows, since bokeh puts row 0 at the bottom)."""
    (renderer,) = glyphs(figure, Image)
    return np.asarray(renderer.data_source.data["image"][0])[::-1]


def sent(pane: widgets.BokehPane) -> str:
    """What jupyter_bokeh sends the browser for a pane (its render bundle), as readable JSON."""
    return json.dumps(json.loads(serialize_json(pane.bokeh.render_bundle)), ensure_ascii=False)


def reads(axis: object, tokens: list[str], flip: bool = False) -> bool:
    """Whether a token axis labels its cells with `tokens` (queries run top down: `flip`).
    viz thins the labels to what fits, so only the labelled cells are compared."""
    n = len(tokens)
    labelled = {(n - 1 - int(p) if flip else int(p)): label for p, label in axis.major_label_overrides.items()}
    return 0 in labelled and all(0 <= i < n and tokens[i] == label for i, label in labelled.items())


def test_show_draws_the_selected_head(trace: AttentionTrace) -> None:
    view = widgets.show(trace)
    assert view.picker.value == ("cross", 0, 0)
    assert "On this sentence, this head " in view.pattern.value  # what the open head does, as the explorer says
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("cross", 0)[0], atol=1e-6)
    view.picker.head.value = 2
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("cross", 0)[2], atol=1e-6)
    row = next(r for r in head_stats(trace) if (r["kind"], r["layer"], r["head"]) == ("cross", 0, 2))
    assert html.escape(i18n.head_pattern_text([row], "cross", 0, 2)) in view.pattern.value  # follows the head
    view.picker.layer.value = 1
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("cross", 1)[2], atol=1e-6)
    assert reads(view.figures["head"].xaxis[0], trace.src_tokens)  # keys: the source
    assert reads(view.figures["head"].yaxis[0], trace.tgt_tokens, flip=True)  # queries: the output

    view.picker.kind.value = "encoder"
    assert view.picker.value == ("encoder", 1, 2)  # layer and head kept where they exist
    head = view.figures["head"]
    np.testing.assert_allclose(shown(head), trace.attention("encoder", 1)[2], atol=1e-6)
    assert reads(head.yaxis[0], trace.src_tokens, flip=True)
    (frame,) = glyphs(view.figures["grid"], Rect)  # the red frame marks the open head in the grid
    assert (frame.glyph.x, frame.glyph.y) == pytest.approx((2 * GAP + 0.5, 0 * GAP + 0.5))
    # beside the heatmap, the same head as lines (bertviz's head view), or every head of the layer
    assert "layer 1 · head 2" in " ".join(view.figures["lines"].title.text.split())
    view.every_head.value = True
    lines = view.figures["lines"].select_one({"name": "lines"}).data_source.data
    assert "every head" in " ".join(view.figures["lines"].title.text.split())
    assert len(lines["q"]) == int((trace.attention("encoder", 1) >= 0.01).sum())


def test_the_browser_receives_the_new_figure(trace: AttentionTrace) -> None:
    view = widgets.show(trace, kind="decoder", layer=-1, head=3)  # -1: the top layer
    assert view.picker.value == ("decoder", 1, 3)
    pane = view.head
    assert pane.children == (pane.bokeh,)
    bundle = sent(pane)
    assert "masked) · layer 1 · head 3" in bundle and pane.figure.id in bundle
    view.picker.head.value = 1
    bundle = sent(pane)
    assert "layer 1 · head 1" in bundle and "head 3" not in bundle and pane.figure.id in bundle


def test_tapping_a_grid_thumbnail_opens_that_head(trace: AttentionTrace) -> None:
    view = widgets.show(trace, kind="encoder")
    grid = view.figures["grid"]
    grid._trigger_event(Tap(grid, x=3 * GAP + 0.4, y=0 * GAP + 0.6))  # bottom row = last layer, head 3
    assert view.picker.value == ("encoder", 1, 3)
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("encoder", 1)[3], atol=1e-6)
    view.figures["grid"]._trigger_event(Tap(view.figures["grid"], x=1.06, y=0.5))  # between thumbnails
    assert view.picker.value == ("encoder", 1, 3)


def test_a_selection_the_trace_lacks_is_a_one_line_error(trace: AttentionTrace) -> None:
    """Each raised traitlets' TraitError, an IndexError or a TypeError out of `show`."""
    layers, heads = r"choose from 0, 1 \(-1: the last\)", "choose from " + ", ".join(map(str, range(trace.n_heads)))
    for asked, holds in (
        ({"kind": "crosss"}, "no 'crosss' attention: it holds encoder, decoder, cross"),
        ({"layer": 5}, layers),
        ({"layer": -4}, layers),
        ({"layer": "1"}, layers),
        ({"head": trace.n_heads}, heads),
    ):
        with pytest.raises(AttnlabError, match=holds) as error:
            widgets.show(trace, **asked)
        assert "\n" not in str(error.value)
    assert widgets.show(trace, head=-1).picker.value == ("cross", 0, trace.n_heads - 1)  # from the end, as layers
    assert widgets.show(trace, layer=-1).picker.value == ("cross", 1, 0)
    view = widgets.show(trace, layer=1, head=2)
    view.select(5, 0)  # what a click does, from code
    assert view.errors.message == "no cross layer 5: choose from 0, 1 (-1: the last)"
    assert "traceback" not in view.errors.value and view.picker.value == ("cross", 1, 2)  # nothing changed


def test_selecting_before_any_trace_is_shown_says_there_is_none() -> None:
    """`TraceView().select(0, 0)` put an AttributeError ('NoneType' object has no attribute
    'kinds') in the error box, and `picker.select` raised it."""
    for lang in ("en", "es", "zh"):
        view = widgets.TraceView(lang=lang)
        view.select(0, 0)
        said = i18n.text("widgets.no_trace", lang)
        assert view.errors.message == i18n.error_message(AttnlabError(said), lang)
        assert "traceback" not in view.errors.value and "\n" not in view.errors.message
        with pytest.raises(AttnlabError, match=re.escape(said)):
            view.picker.select(kind="cross")


def test_a_cleared_view_and_an_unpressed_kind_change_nothing(trace: AttentionTrace) -> None:
    """After `clear()` a selection from code did nothing and said nothing (the picker kept the
    trace gone from the view); a kind set to None (no button pressed) was a KeyError out of the
    widget, the picker left at (None, 0, 0)."""
    view = widgets.show(trace, "cross", 1, 2)
    view.picker.kind.value = None
    assert view.picker.value == ("cross", 1, 2) and view.errors.message == ""
    view.clear()
    view.select(0, 0)
    assert view.errors.message == i18n.error_message(AttnlabError(i18n.text("widgets.no_trace", "en")), "en")


def test_a_timeline_of_snapshots_it_cannot_replay_is_one_line(trace: AttentionTrace) -> None:
    """`Timeline([])` was an IndexError; a step given twice dropped a trace without a word; a
    trace of other heads was a KeyError in the error box, with its traceback, when drawn."""
    other = replace(trace, meta={**trace.meta, "step": 100})  # the same probe at another step
    for lang in ("en", "es", "zh"):
        for snapshots, key, fields in (
            ([], "widgets.snapshots", {"got": "[]"}),
            (None, "widgets.snapshots", {"got": "None"}),
            ([trace], "widgets.snapshots", {"got": "[..., AttentionTrace, ...]"}),
            ([(1, None)], "widgets.snapshots", {"got": "[..., (int, NoneType), ...]"}),
            ([(100, trace), (100, other)], "widgets.snapshot_steps", {"steps": "100, 100"}),
            ([(200, trace), (100, other)], "widgets.snapshot_steps", {"steps": "200, 100"}),
            ([("a", trace)], "widgets.snapshot_steps", {"steps": "'a'"}),
            ([(100, some_heads(trace, [0])), (200, trace)], "widgets.snapshot_other", {"step": 100, "last": 200}),
        ):
            with pytest.raises(AttnlabError) as refused:
                Timeline(snapshots, lang=lang)  # type: ignore[arg-type]
            assert str(refused.value) == i18n.text(key, lang, **fields) and "\n" not in str(refused.value)
    timeline = Timeline([(np.int64(100), other), (200, trace)])
    assert timeline.steps == [100, 200] and timeline.errors.message == ""


def test_a_trace_of_some_heads_is_labelled_with_the_model_heads(trace: AttentionTrace) -> None:
    """Recorded with heads=[1, 3]: its maps' rows 0 and 1 are the model's heads 1 and 3."""
    assert [value for _, value in widgets.show(trace).picker.head.options] == list(range(trace.n_heads))
    some = some_heads(trace, [1, 3])
    view = widgets.show(some, head=3)  # raised: the picker held rows, not heads
    assert view.picker.head.options == (("1", 1), ("3", 3)) and view.picker.value == ("cross", 0, 3)
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("cross", 0)[3], atol=1e-6)
    assert view.figures["head"].title.text.endswith("layer 0 · head 3")  # said "head 1"
    assert list(view.figures["grid"].xaxis[0].major_label_overrides.values()) == ["head 1", "head 3"]
    grid = view.figures["grid"]
    grid._trigger_event(Tap(grid, x=0.5, y=0.5))  # the first column: head 1
    assert view.picker.value == ("cross", 1, 1)
    np.testing.assert_allclose(shown(view.figures["head"]), trace.attention("cross", 1)[1], atol=1e-6)
    assert widgets.show(some, head=-1).picker.value == ("cross", 0, 3)
    with pytest.raises(AttnlabError, match="no head 0: choose from 1, 3 "):
        widgets.show(some, head=0)


def test_minus_one_is_the_models_last_in_the_widget_as_in_the_trace(trace: AttentionTrace) -> None:
    """A trace holding layer 0 of a two-layer model and heads 0 and 1 of four: `show(..., layer=-1)`
    opened layer 0, the top one held, which `trace.attention` and `viz.heatmap` refuse as the
    model's top, not recorded; -1 is now the model's top (and last head) everywhere."""
    bottom = AttentionTrace(
        trace.src_tokens,
        trace.tgt_tokens,
        {kind: maps[:1] for kind, maps in trace.maps.items()},
        trace.masks,
        {kind: [0] for kind in trace.kinds},
        model=trace.model,
    )
    with pytest.raises(AttnlabError, match="not recorded"):
        viz.heatmap(bottom, "cross", -1, 0)
    with pytest.raises(AttnlabError, match=r"^no cross layer -1: choose from 0 \(or -2 from the model's last\)$"):
        widgets.show(bottom, "cross", -1)
    assert widgets.show(bottom, "cross", -2, -1).picker.value == ("cross", 0, trace.n_heads - 1)
    first = some_heads(trace, [0, 1])
    with pytest.raises(AttnlabError, match=r"^no head -1: choose from 0, 1 \(or -4, -3 from the model's last\)$"):
        widgets.show(first, head=-1)
    assert trace.n_heads == 4 and widgets.show(first, head=-3).picker.value == ("cross", 0, 1)


def test_mask_and_scale_toggles(trace: AttentionTrace) -> None:
    view = widgets.show(trace, kind="decoder")
    assert [r.name for r in glyphs(view.figures["head"], ImageRGBA)] == ["mask-overlay"]  # the causal mask, hatched
    assert view.figures["mask"] is None
    view.mask.value = False
    assert glyphs(view.figures["head"], ImageRGBA) == []
    (image,) = glyphs(view.figures["head"], Image)
    assert image.glyph.color_mapper.high == 1.0
    view.scale.value = True
    (image,) = glyphs(view.figures["head"], Image)
    # the first query sees only itself (1.0 by construction): the scale is the other rows' maximum
    assert image.glyph.color_mapper.high == pytest.approx(float(trace.attention("decoder", 0)[0][1:].max()))
    view.show_mask.value = True
    assert view.figures["mask"].name == "mask-decoder"
    np.testing.assert_array_equal(shown(view.figures["mask"]) > 0, trace.mask("decoder"))
    assert view.figures["rollout"] is None
    view.show_rollout.value = True  # up to the open layer, following the picker
    np.testing.assert_allclose(shown(view.figures["rollout"]), attnlab.rollout(trace, "decoder")[0], rtol=1e-6)
    view.picker.select(kind="encoder", layer=1)
    np.testing.assert_allclose(shown(view.figures["rollout"]), attnlab.rollout(trace, "encoder")[1], rtol=1e-6)


def test_the_maps_read_as_tables(trace: AttentionTrace, paths: dict[str, Path]) -> None:
    """As the explorer's tabs: ticked, the open head's weights as a table, following the picker,
    the rollout's after it while the rollout is shown; the explorer widget's lens under the lens;
    unticked, none."""
    view = widgets.show(trace, kind="decoder")
    assert view.table.value == ""
    view.as_table.value = True
    view.picker.select(kind="encoder", layer=1, head=0)
    cells = [float(c) for c in re.findall(r"<td>([^<]*)</td>", view.table.value)]
    np.testing.assert_allclose(cells, trace.attention("encoder", 1)[0].ravel(), atol=5e-4)
    assert view.table.value.count("<caption>") == 1 and "<style>" in view.table.value
    view.show_rollout.value = True
    head, rolled = view.table.value.split("</table>")[:2]
    np.testing.assert_allclose(
        [float(c) for c in re.findall(r"<td>([^<]*)</td>", rolled)],
        attnlab.rollout(trace, "encoder")[1].ravel(),
        atol=5e-4,
    )
    view.as_table.value = False
    assert view.table.value == ""
    explorer = widgets.explore(paths["translate"], text="A dog runs .", beam=2)
    explorer.show_lens.value = True
    assert explorer.lens_table.value == ""
    explorer.view.as_table.value = True
    lens = attnlab.logit_lens(explorer.model, explorer.view.trace)
    shown = [float(p) for p in re.findall(r" ([0-9.]+)</td>", explorer.lens_table.value)]
    np.testing.assert_allclose(shown, lens.p.ravel(), atol=5e-4)
    explorer.show_lens.value = False
    assert explorer.lens_table.value == "" and not explorer.errors.message


def test_a_refused_rollout_leaves_no_other_heads_table_or_rollout(trace: AttentionTrace) -> None:
    """A trace of some heads cannot be rolled out: the table kept the head open before the refusal
    (its caption said head 3 under head 1's map), and the error named a model of the trace's size
    where the trace does not carry its model's config."""
    partial = some_heads(trace, [1, 3])
    view = widgets.show(partial, kind="encoder", layer=0, head=3)
    view.as_table.value = True
    view.show_rollout.value = True
    view.picker.select(head=1)
    assert "needs every layer and head of the model (2 layers, 4 heads)" in view.errors.message
    assert re.findall("<caption>(.*?)</caption>", view.table.value) == ["encoder self-attention · layer 0 · head 1"]
    assert view.rollout.figure is None
    view.show_rollout.value = False
    assert not view.errors.message
    bare = AttentionTrace(partial.src_tokens, partial.tgt_tokens, partial.maps, partial.masks, partial.layers, [1, 3])
    with pytest.raises(AttnlabError, match=r"of the model; this trace recorded layers \[0, 1\] and heads \[1, 3\]"):
        attnlab.rollout(bare, "encoder")


def test_explorer_translates_what_is_typed(paths: dict[str, Path], translator: attnlab.decode.Model) -> None:
    explorer = widgets.explore(paths["translate"], text="A dog runs .", beam=2)
    first = explorer.result
    assert (
        first.src_tokens
        == explorer.view.trace.src_tokens
        == translator.pieces(translator.encode_source("A dog runs .")[0])
    )
    assert explorer.errors.message == ""
    explorer.text.value = "The girl plays with a red ball in the water ."
    explorer.button.click()
    trace = explorer.view.trace
    assert explorer.result is not first and trace is explorer.result.trace
    assert trace.src_tokens == explorer.result.src_tokens and "ball" in "".join(trace.src_tokens)
    assert reads(explorer.figures["head"].xaxis[0], trace.src_tokens)
    np.testing.assert_allclose(shown(explorer.figures["head"]), trace.attention("cross", 0)[0], atol=1e-6)
    assert "pieces" in explorer.status.value and explorer.result.hypotheses[0].text in explorer.output.value.replace("&#x27;", "'")  # fmt: skip


def test_choosing_a_beam_hypothesis_shows_its_attention(translator: attnlab.decode.Model) -> None:
    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3)
    hypotheses = explorer.result.hypotheses
    assert len(explorer.hypotheses.options) == len(hypotheses) == 3
    explorer.choose(2)
    assert explorer.view.trace is hypotheses[2].trace
    for rank in (3, -1):  # was traitlets' TraitError
        with pytest.raises(AttnlabError, match=f"^no hypothesis {rank}: choose from 0, 1, 2$"):
            explorer.choose(rank)
    assert explorer.view.trace is hypotheses[2].trace
    assert reads(explorer.figures["head"].yaxis[0], hypotheses[2].tokens, flip=True)
    assert "hypothesis 3 of 3" in explorer.output.value


def test_the_explorer_draws_the_open_hypothesiss_logit_lens(translator: attnlab.decode.Model) -> None:
    """Its box draws the lens of the hypothesis that is open, and follows the chooser; unticked,
    nothing is drawn (it costs a forward pass)."""
    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3, lang="es")
    assert explorer.figures["lens"] is None
    explorer.show_lens.value = True
    hypotheses = explorer.result.hypotheses
    for rank in (0, 2):
        explorer.choose(rank)
        lens = attnlab.logit_lens(translator, hypotheses[rank].trace)
        data = explorer.figures["lens"].select_one({"name": "cells"}).data_source.data
        np.testing.assert_array_equal(data["p"], lens.p.ravel())
    assert explorer.figures["lens"].title.text.startswith("lente de logits") and not explorer.errors.message
    explorer.show_lens.value = False
    assert explorer.figures["lens"] is None


def test_the_explorer_says_who_wrote_each_piece_of_the_open_hypothesis(translator: attnlab.decode.Model) -> None:
    """Its box reads the open hypothesis while ticked (a pass through the model), opens the piece the
    model was surest of, follows the chooser, `select` and the contrast; the line's sum is the
    model's logit; unticked, nothing is drawn."""
    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3, lang="es")
    box = explorer.attribution
    assert explorer.figures["attribution"] is None and box.controls.layout.display == "none"
    box.show.value = True
    hypotheses = explorer.result.hypotheses
    for rank in (0, 2):
        explorer.choose(rank)
        expected = attnlab.logit_attribution(translator, hypotheses[rank].trace)
        first = int(np.argmax(expected.logit))
        assert box.position.value == first and box.controls.layout.display is None
        data = explorer.figures["attribution_source"].select_one({"name": "bars"}).data_source.data
        np.testing.assert_allclose(data["share"], expected.cross_source[:, :, first].sum((0, 1)))
    assert box.select(-1) is box.attribution and "«</s>»" in explorer.figures["attribution"].title.text
    numbers = re.findall(r"[-+]?\d+\.\d+", box.line.value)
    assert float(numbers[-2]) == float(numbers[-1]) == round(float(expected.logit[-1]), 2)  # the sum = the logit
    box.against.value = "runner-up"
    assert box.position.value == len(expected.produced) - 1
    assert "segunda opción" in explorer.figures["attribution"].title.text and not explorer.errors.message
    with pytest.raises(AttnlabError, match=r"^no position 99: choose from 0, 1, "):
        box.select(99)
    box.show.value = False
    assert explorer.figures["attribution"] is None and explorer.figures["attribution_source"] is None


def test_the_explorer_weighs_each_head_by_what_its_keys_write(translator: attnlab.decode.Model) -> None:
    """Its box redraws the open hypothesis's heads weighed by ‖αf(x)‖ (`record.norm_trace`), and
    keeps doing so for the hypothesis chosen next; unticked, the weights as they are."""
    from attnlab.record.norms import norm_trace

    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3, lang="es")
    hypotheses = explorer.result.hypotheses
    explorer.weigh.value = True
    for rank in (0, 2):
        explorer.choose(rank)
        weighed, (kind, layer, head) = norm_trace(translator, hypotheses[rank].trace), explorer.view.picker.value
        np.testing.assert_allclose(shown(explorer.figures["head"]), weighed.attention(kind, layer)[head], atol=1e-6)
        assert "ponderado por ‖αf(x)‖" in explorer.figures["head"].title.text
    assert not explorer.errors.message
    explorer.weigh.value = False
    assert explorer.view.trace is hypotheses[2].trace


def test_the_explorer_weighs_the_heads_of_the_open_hypothesis(translator: attnlab.decode.Model) -> None:
    """Its box draws every head's importance for the hypothesis that is open, following the
    chooser; unticked, nothing (it costs a pass forward and back)."""
    from attnlab.record.importance import trace_importance

    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3, lang="zh")
    assert explorer.figures["importance"] is None
    explorer.show_importance.value = True
    for rank in (0, 2):
        explorer.choose(rank)
        expected = trace_importance(translator, explorer.result.hypotheses[rank].trace).gradient.ravel()
        data = explorer.figures["importance"].select_one({"name": "cells"}).data_source.data
        np.testing.assert_allclose(data["value"], expected)
    assert explorer.figures["importance"].title.text.startswith("输出对每个头") and not explorer.errors.message
    explorer.show_importance.value = False
    assert explorer.figures["importance"] is None


def test_errors_are_shown_in_the_widget(translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    explorer = widgets.explore(translator, text="A dog .", beam=1)
    before = explorer.view.trace
    assert explorer.run("   ") is None
    assert explorer.errors.message == "the input is empty" and "the input is empty" in explorer.errors.value
    assert before is not None and not explorer.button.disabled
    assert explorer.view.trace is None  # nothing of the last sentence stays, to be read as this one's

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(translator, "translate", broken)
    explorer.run("A cat .")
    assert (
        explorer.errors.message == "RuntimeError: boom" and "traceback" in explorer.errors.value
    )  # a bug: folded traceback
    monkeypatch.undo()
    explorer.run("A cat .")
    assert explorer.errors.message == "" and explorer.errors.value == ""


def test_parser_explorer_draws_the_tree(paths: dict[str, Path]) -> None:
    explorer = widgets.explore(paths["parse"], text="The dog sleeps .", beam=2)
    tree = explorer.figures["tree"]
    assert tree.name == "tree"
    (text,) = [r for r in tree.renderers if "text" in r.data_source.data]
    assert {"The", "dog", "sleeps", "."} <= set(text.data_source.data["text"])  # the leaves are the input's words
    explorer.choose(1)
    assert explorer.figures["tree"] is not tree and explorer.figures["tree"].title.text == "hypothesis 2"


def test_replay_steps_through_the_probe_traces(
    paths: dict[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import torch

    model = attnlab.load(paths["translate"])
    traces = {}
    for step in (10, 20, 30):  # three "checkpoints": different random weights, same probe pair
        torch.manual_seed(step)
        model.model.load_state_dict(attnlab.Transformer(model.config).state_dict())
        traces[step] = model.score("A dog runs .", "Ein hund läuft .").trace
        traces[step].save(tmp_path / "probes" / f"step_{step}" / "probe_0.trace")
    timeline = widgets.replay(tmp_path)
    assert timeline.steps == [10, 20, 30] and timeline.step.value == 30
    timeline.picker.select(kind="encoder", layer=1, head=2)
    timeline.step.value = 10
    now, final = traces[10].attention("encoder", 1)[2], traces[30].attention("encoder", 1)[2]
    np.testing.assert_allclose(shown(timeline.figures["heatmap"]), now, atol=1e-6)
    np.testing.assert_allclose(shown(timeline.figures["diff"]), now - final, atol=1e-6)
    lines = glyphs(timeline.figures["curve"], Line)
    assert len(lines) == traces[10].n_heads and list(lines[0].data_source.data["x"]) == [10, 20, 30]
    assert timeline.figures["importance_curve"] is None  # a run that weighed no heads has no such curve
    weighed = {
        step: np.random.default_rng(step).random((3, model.config.n_layers, model.config.n_heads)) for step in (10, 30)
    }
    for step, table in weighed.items():  # as `attnlab train` writes it beside the probes
        (tmp_path / "probes" / f"step_{step}" / "importance.json").write_text(json.dumps({"gradient": table.tolist()}))
    timeline = widgets.replay(tmp_path)
    timeline.picker.select(kind="cross", layer=1, head=0)
    legend = timeline.figures["importance_curve"].legend[0].items
    line = {item.label.value: item.renderers[0] for item in legend}["head 3"]  # each head's line, by its label
    assert list(line.data_source.data["x"]) == [10, 30]
    assert list(line.data_source.data["y"]) == [weighed[10][2, 1, 3], weighed[30][2, 1, 3]]
    with pytest.raises(AttnlabError, match="no probe traces"):
        widgets.replay(tmp_path_factory.mktemp("no-probes"))
    for probe in (1, -1, 1.5):  # -1 opened the last probe silently, 1.5 raised a TypeError
        with pytest.raises(AttnlabError, match=f"probe {probe} was not recorded"):
            widgets.replay(tmp_path, probe=probe)
    with pytest.raises(AttnlabError, match="^probe '0' was not recorded"):  # "probe 0 was not recorded": it was
        widgets.replay(tmp_path, probe="0")
    assert widgets.replay(tmp_path, probe=np.int64(0)).steps == [10, 20, 30]  # NumPy's 0 is probe 0 too
    with pytest.raises(AttnlabError, match="replay takes a run or checkpoint directory, got NoneType"):
        widgets.replay(None)


def test_replay_reads_a_path_as_a_shell_does_and_names_one_that_is_not_there(
    paths: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`replay("~/runs/x")` found no probes in a run that had them (the path was not expanded,
    as `attnlab.load` expands it), and a misspelt path said to train again with --probes N."""
    trace = attnlab.load(paths["translate"]).score("A dog runs .", "Ein hund läuft .").trace
    trace.save(tmp_path / "run" / "probes" / "step_10" / "probe_0.trace")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert widgets.replay("~/run").steps == [10]
    for lang, said in (("en", "no such directory"), ("es", "no existe esa carpeta")):
        with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path / 'rnu'))}: {said}$"):
            widgets.replay(tmp_path / "rnu", lang=lang)
    trace_file = tmp_path / "run" / "probes" / "step_10" / "probe_0.trace"  # (a file was "no such directory")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(trace_file))} is a file: replay takes a run or"):
        widgets.replay(trace_file)


def test_a_checkpoint_changed_on_disk_is_read_again(paths: dict[str, Path], tmp_path: Path) -> None:
    """`explore(path)` kept the first model it read from a path for the kernel's life: a run
    trained further, or a checkpoint written over, went on showing the old model (while
    `attnlab.load` read the new one); the same path unchanged is read once."""
    import torch

    from attnlab.model.checkpoint import save_checkpoint

    def write(path: Path, window: int | None) -> None:
        config = replace(attnlab.load(paths["translate"]).model.config, attn_window=window)
        save_checkpoint(path, attnlab.Transformer(config), paths["translate"] / "spm.model")

    torch.manual_seed(0)
    write(tmp_path / "ckpt", None)
    first = widgets.explore(tmp_path / "ckpt").model
    assert widgets.explore(tmp_path / "ckpt").model is first
    write(tmp_path / "ckpt", 3)  # written over, as `average --force` and `import --force` do
    assert widgets.explore(tmp_path / "ckpt").model.model.config.attn_window == 3
    write(tmp_path / "run" / "checkpoints" / "step_10", None)
    assert widgets.explore(tmp_path / "run").model.model.config.attn_window is None
    write(tmp_path / "run" / "checkpoints" / "step_20", 3)  # the run trained on
    assert widgets.explore(tmp_path / "run").model.model.config.attn_window == 3


def test_setup_puts_bokehjs_inline_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import bokeh.io.notebook
    from bokeh.io import reset_output

    assert widgets.setup() is False  # plain Python: there is no page to load it into
    published: list[dict] = []
    monkeypatch.setattr(notebook, "_in_kernel", lambda: True)
    monkeypatch.setattr(notebook, "_bokehjs_loaded", False)
    monkeypatch.setattr(bokeh.io.notebook, "publish_display_data", lambda data, *a, **k: published.append(data))
    try:
        assert widgets.setup() is True and widgets.setup() is False  # once per kernel
        assert widgets.setup(force=True) is True
    finally:
        reset_output()
    (load, _again) = [data["application/vnd.bokehjs_load.v0+json"] for data in published]
    assert len(load) > 1_000_000 and "Bokeh" in load  # BokehJS itself, not a script tag
    assert "cdn.bokeh.org" not in load and "<script src" not in load


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(AttnlabError, match="checkpoint directory or attnlab.load"):
        widgets.explore(42)
    with pytest.raises(CheckpointError, match="no such directory"):
        widgets.explore(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no such trace file"):
        widgets.show(tmp_path / "missing.trace")
    for empty in ("", "  "):  # it named the working directory: "/home/me: a run directory without a valid checkpoint"
        with pytest.raises(CheckpointError, match="^expected a checkpoint directory's path, got an empty one$"):
            widgets.explore(empty)


def test_plot_wraps_any_viz_figure(trace: AttentionTrace) -> None:
    from attnlab import viz

    figure = viz.mask_figure(trace, "cross")
    pane = widgets.plot(figure)
    assert pane.figure is figure and pane.bokeh is not None and figure.id in sent(pane)
    # a row of figures wraps in the cell's width (three masks ran 380 px past a 1,280 px notebook)
    figures = row(*[viz.mask_figure(trace, kind) for kind in trace.kinds])
    pane = widgets.plot(figures)
    assert figures.styles["flex-wrap"] == "wrap" and pane.layout.width == "100%" == pane.bokeh.layout.width


def test_compare_models_says_which_heads_are_off(translator: attnlab.decode.Model) -> None:
    heads_off_two = {("encoder", 0): [0], ("encoder", 1): [0]}
    off = widgets.compare_models(translator, text="A dog runs .", heads_off={("encoder", 0): [0], ("cross", 1): [1]})
    assert off.names == ("all heads", "heads off") and off.button.layout.align_self == "flex-start"  # (not cell-wide)
    assert "heads off: 2 heads switched off (encoder L0 H0, cross L1 H1)" in off.output.value
    assert "'s output" not in off.output.value  # not "all heads's output"
    # nor "the maps of heads off are read on the output of all heads", as if they were two models
    assert "with heads off, the maps are recorded while the model reads its output with all heads" in off.output.value
    spanish = widgets.compare_models(translator, text="A dog runs .", heads_off={("encoder", 0): [0]}, lang="es")
    assert "1 cabeza desactivada (codificador · capa 0 · cabeza 0)" in spanish.output.value
    assert "; con cabezas desactivadas, los mapas se registran" in spanish.output.value  # (it said "con sin esas")
    chinese = widgets.compare_models(translator, text="A dog runs .", heads_off=heads_off_two, lang="zh")
    assert "头 0、编码器" in chinese.output.value  # the enumeration comma between heads, not ", "
    for same in (widgets.compare_models(translator, translator), widgets.compare_models(translator, heads_off={})):
        assert same.names == ("A", "B") and "the same model, with no head off" in same.output.value
        assert "switched off" not in same.output.value


def test_compare_models_draws_both_rollouts_and_both_lenses_when_asked(translator: attnlab.decode.Model) -> None:
    """With heads off in the second, its lens is read with them off: its top row is the ablated
    model's own distribution, not the whole model's. Unticked, nothing is drawn."""
    heads = {("cross", 0): [0, 1, 2, 3], ("cross", 1): [0, 1, 2, 3]}
    shown = widgets.compare_models(translator, text="A man sits on a bike .", heads_off=heads)
    assert shown.figures["rollout_first"] is None and shown.figures["lens_second"] is None
    shown.show_rollouts.value = shown.show_lenses.value = True
    assert [shown.figures[f"rollout_{role}"].name for role in ("first", "second", "difference")] == [
        "compare-rollout-first", "compare-rollout-second", "compare-rollout-diff",
    ]  # fmt: skip
    c = shown.comparison
    for role, side in (("first", c.first), ("second", c.second_on_first)):
        shown_p = shown.figures[f"lens_{role}"].select_one({"name": "cells"}).data_source.data["p"]
        np.testing.assert_array_equal(shown_p, attnlab.logit_lens(translator, side.trace).p.ravel())
    assert shown.figures["lens_second"].title.text.startswith("heads off · logit lens") and not shown.errors.message
    shown.show_rollouts.value = shown.show_lenses.value = False
    assert all(shown.figures[key] is None for key in shown.figures if key.startswith(("rollout", "lens")))


def test_what_is_not_a_trace_or_a_heads_dict_is_one_line(
    translator: attnlab.decode.Model, trace: AttentionTrace
) -> None:
    """A `Result` or None given as a trace reached the views as an AttributeError ('kinds');
    `heads_off={("cross", 0): 1}` was a TypeError and `{"cross": [0]}` a ValueError."""
    result = translator.translate("A dog runs .", beam=1)
    for make in (
        lambda: widgets.TraceView(result),
        lambda: widgets.show(result),
        lambda: widgets.TraceView(trace).set_trace(None),
    ):
        with pytest.raises(
            AttnlabError, match=r"takes an AttentionTrace or a saved \.trace file, not (Result|NoneType)$"
        ):
            make()
    with pytest.raises(AttnlabError, match=r"^plot\(\) takes a figure of attnlab.viz \(or a bokeh layout\), not str$"):
        widgets.plot("x")  # a bare AssertionError
    for heads, said in (({("cross", 0): 1}, "are a list of head indices, got 1"), ({"cross": [0]}, "is (kind, layer)")):
        with pytest.raises(AttnlabError, match=re.escape(said)):
            widgets.compare_models(translator, heads_off=heads)


def test_a_failed_run_leaves_nothing_of_the_previous_sentence(translator: attnlab.decode.Model) -> None:
    explorer = widgets.explore(translator, text="A dog runs .", beam=2)
    assert explorer.output.value and explorer.view.caption.value and explorer.figures["head"] is not None
    assert explorer.run("   ") is None and explorer.errors.message == "the input is empty"
    assert explorer.result is None and explorer.output.value == "" and explorer.hypotheses.options == ()
    assert explorer.view.caption.value == "" and set(explorer.figures.values()) == {None}
    assert explorer.run("A dog runs .") is not None and explorer.figures["head"] is not None  # and it recovers
    compared = widgets.compare_models(translator, text="A dog runs .", heads_off={("encoder", 0): [0]})
    assert compared.figures["first"] is not None
    assert compared.run("") is None and compared.errors.message
    assert compared.comparison is None and compared.output.value == "" and set(compared.figures.values()) == {None}


@pytest.mark.parametrize("beam", [0, -3, 51, 100, 2.7, True, "4"])
def test_a_beam_the_explorer_cannot_use_is_refused(translator: attnlab.decode.Model, beam: object) -> None:
    with pytest.raises(ConfigError, match=r"beam must be a whole number from 1 to 50 .*got"):
        widgets.explore(translator, text="A dog .", beam=beam)


def test_importance_tables_that_are_not_a_runs_are_one_line(trace: AttentionTrace) -> None:
    """`Timeline(importance=...)` as `importance_snapshots` reads a run's: a list of lists was an
    AttributeError in the error box, a table of two kinds an IndexError, each with a traceback."""
    for bad, said in (
        ({1: [[0.1]]}, "1: list of shape (1, 1)"),
        ({1: np.zeros((2, 2, 4))}, "1: ndarray of shape (2, 2, 4)"),
        ({1: [[[0.1]], [[0.1, 0.2]]]}, "1: list"),
        ([np.zeros((3, 2, 4))], "list"),
    ):
        with pytest.raises(
            AttnlabError, match=rf"^importance is \{{step: an array of \(3 kinds.*got {re.escape(said)}$"
        ):
            Timeline([(1, trace), (2, trace)], importance=bad)
    shown = Timeline([(1, trace), (2, trace)], importance={1: np.zeros((3, 2, 4)), 2: np.ones((3, 2, 4)).tolist()})
    assert shown.figures["importance_curve"] is not None and not shown.errors.message


def test_what_the_notebooks_import_is_exported() -> None:
    assert {"explore", "show", "replay", "compare_models", "plot", "figure_words"} <= set(widgets.__all__)


@pytest.mark.parametrize("lang", ["ES", "zh-CN", "fr", ""])
def test_an_unsupported_language_is_refused(trace: AttentionTrace, translator: attnlab.decode.Model, lang: str) -> None:
    for make in (
        lambda: widgets.show(trace, lang=lang),
        lambda: widgets.explore(translator, text="A dog .", lang=lang),
        lambda: widgets.compare_models(translator, text="A dog .", lang=lang),
        lambda: Timeline([(100, trace)], lang=lang),  # `replay`'s widget
        lambda: widgets.figure_words(lang),  # the notebooks' own figures' words: English without a word
    ):
        with pytest.raises(ConfigError, match=r"^lang must be one of 'en', 'es', 'zh', got"):
            make()


def test_the_hypothesis_chooser_is_not_labelled_like_the_beam_field(translator: attnlab.decode.Model) -> None:
    for lang, label in (("en", "hypothesis"), ("es", "hipótesis"), ("zh", "假设")):
        explorer = widgets.explore(translator, text="A dog .", beam=2, lang=lang)
        assert explorer.hypotheses.description == label != explorer.beam.description


@pytest.mark.parametrize("text", [123, ["A dog ."], b"A dog ."])
def test_a_text_that_is_not_a_string_is_one_line(translator: attnlab.decode.Model, text: object) -> None:
    """It was traitlets' TraitError from the text box; bytes, which the box decoded, are refused
    as `translate` refuses them."""
    explorer = widgets.explore(translator, text="A dog .", beam=1)
    compared = widgets.compare_models(translator, text="A dog .")
    for make in (
        lambda: widgets.explore(translator, text=text),
        lambda: widgets.compare_models(translator, text=text),
        lambda: widgets.Compare(translator, translator, text),
        lambda: explorer.run(text),
        lambda: compared.run(text),
    ):
        with pytest.raises(ModelInputError, match=rf"^the text must be a string, not {type(text).__name__}$"):
            make()
    assert explorer.text.value == compared.text.value == "A dog ."  # and the boxes keep what they had


def test_compare_refuses_names_or_models_it_cannot_use_before_decoding(
    paths: dict[str, Path], translator: attnlab.decode.Model
) -> None:
    """names=("A",) was a ValueError in the error box, a model given as 123 an AttributeError
    there ('task'), both after decoding; a checkpoint directory opens, as `compare_models` takes it."""
    for names in (("A",), ("A", "B", "C"), None, (1, 2), "AB"):
        with pytest.raises(ConfigError, match=r"^names must be two strings, one per model, not "):
            widgets.Compare(translator, translator, "A dog .", names=names)
    with pytest.raises(
        AttnlabError, match=r"^Compare\(\) takes a checkpoint directory or attnlab.load\(...\), not int$"
    ):
        widgets.Compare(translator, 123, "A dog .")
    with pytest.raises(ConfigError, match="names debe ser un par de cadenas"):
        widgets.Compare(translator, translator, "A dog .", names=["A"], lang="es")
    named = widgets.Compare(translator, translator, "A dog .", names=["first", "second"])
    assert named.errors.message == "" and named.names == ("first", "second") and "<b>second</b>" in named.output.value
    opened = widgets.Compare(paths["translate"], translator, "A dog .")  # an AttributeError ('task') before
    assert opened.errors.message == "" and opened.comparison is not None


def test_the_explorer_patches_a_changed_sentence_against_the_open_hypothesis(translator: attnlab.decode.Model) -> None:
    """The patching row reads the open hypothesis after the sentence and after the changed one:
    every head's grid, the residual stream's two grids, and the lines that say what they found;
    another hypothesis clears them (they read the one open before), a bad input is one line."""
    from attnlab.record.patching import trace_patching

    explorer = widgets.explore(translator, text="A man sits on a bike .", beam=3)
    assert explorer.figures["patching"] is None
    heads = explorer.patch("A dog sits on a bike .")
    assert heads is not None and not explorer.errors.message, explorer.errors.message
    expected = trace_patching(translator, explorer.result.hypotheses[0].trace, "A dog sits on a bike .")
    data = explorer.figures["patching"].select_one({"name": "cells"}).data_source.data
    np.testing.assert_allclose(data["value"], expected.share.ravel())
    assert explorer.figures["residual_encoder"] is not None and explorer.figures["residual_decoder"] is not None
    assert "alone restores" in explorer.patched.value and "In the encoder" in explorer.patched.value
    explorer.choose(2)
    assert explorer.figures["patching"] is None and explorer.patched.value == ""
    explorer.patch("A young dog sits on a bike .", direction="noise")  # more pieces: the decoder's grid alone
    assert explorer.figures["residual_encoder"] is None and explorer.figures["residual_decoder"] is not None
    assert explorer.direction.value == "noise" and not explorer.errors.message
    one = explorer.patch("A dog sits on a bike .", positions=[1])
    assert one.positions == [1] and not np.allclose(one.share, heads.share)
    for changed, message in (("", "the input is empty"), ("A man sits on a bike .", "changes the target's")):
        assert explorer.patch(changed) is None and message in explorer.errors.message
        assert explorer.figures["patching"] is None
    assert explorer.patch("A dog .", direction="up") is None and "denoise or noise" in explorer.errors.message
    estimate = explorer.patch("A dog sits on a bike .", direction="denoise", method="attribution")
    assert estimate.method == "attribution" and explorer.method.value == "attribution"
    assert "estimated from one gradient" in explorer.patched.value  # said under the numbers and in the titles
    assert explorer.figures["residual_decoder"].title.text.replace("\n", " ").startswith("estimated from one gradient")
    assert explorer.patch("A dog .", method="guess") is None and "activation or attribution" in explorer.errors.message


def test_the_explorer_splits_a_patch_by_path(translator: attnlab.decode.Model) -> None:
    """With the paths box ticked, the patch on show is also split by path: the heads' direct and
    indirect grids are the library's, the sender menu lists the patched heads by |total share| (the
    largest chosen), the receivers grid and the lines are the sender's, another sender (from the
    menu, or a tap on a grid) runs again; unticked, another hypothesis open, or an estimated patch,
    none of it is shown."""
    from html import escape

    from attnlab.app.patching_text import path_lines
    from attnlab.record.paths import trace_path_patching
    from attnlab.record.trace import KINDS

    explorer, changed = widgets.explore(translator, text="A man sits on a bike .", beam=2), "A dog sits on a bike ."
    box, parts = explorer.patching_row.paths_box, ("paths_direct", "paths_indirect", "paths_receivers")
    explorer.patch(changed)
    assert all(explorer.figures[part] is None for part in parts)  # (not asked for: no path patching run)
    box.split.value = True  # splits the patch on show
    trace = explorer.result.hypotheses[0].trace
    expected = trace_path_patching(translator, trace, changed)
    share = expected.total.share
    ranked = sorted(expected.total.order(), key=lambda at: -abs(share[KINDS.index(at[0]), at[1], at[2]]))
    assert [value for _label, value in box.sender.options] == ranked and box.sender.value == ranked[0]

    def cells(part: str) -> dict:
        return explorer.figures[part].select_one({"name": "cells"}).data_source.data

    for part in ("direct", "indirect"):
        np.testing.assert_allclose(cells(f"paths_{part}")["value"], getattr(expected, part).share.ravel(), atol=1e-6)

    def tap(part: str) -> Callable[[tuple[str, int, int]], None]:
        """A tap on a head's cell of the `part` grid."""

        def on(head: tuple[str, int, int]) -> None:
            grid, data = explorer.figures[part], cells(part)
            at = np.ravel_multi_index((KINDS.index(head[0]), *head[1:]), share.shape)
            grid._trigger_event(Tap(grid, x=data["x"][at], y=data["y"][at]))

        return on

    # the sender chosen with the patch, then from the menu, a tap on the direct grid, one on the indirect grid
    choices = (lambda _h: None, lambda h: setattr(box.sender, "value", h), tap("paths_direct"), tap("paths_indirect"))
    for sender, choose in zip(ranked[:4], choices, strict=True):
        choose(sender)
        through = trace_path_patching(translator, trace, changed, sender=sender)
        assert box.paths.sender == sender and box.sender.value == sender, explorer.errors.message
        np.testing.assert_allclose(cells("paths_receivers")["value"], through.receivers.share.ravel(), atol=1e-6)
        assert escape(path_lines(through, "en")[1]) in box.lines.value
    explorer.choose(1)
    assert all(explorer.figures[part] is None for part in parts) and box.lines.value == ""
    explorer.patch(changed, direction="noise")
    assert box.paths.total.direction == "noise" and explorer.figures["paths_receivers"] is not None
    explorer.patch(changed, method="attribution")  # paths are measured runs only: one line, no grids
    assert all(explorer.figures[part] is None for part in parts) and "measured runs only" in box.note.value
    explorer.patch(changed, method="activation")
    box.split.value = False
    assert all(explorer.figures[part] is None for part in parts) and box.sender.layout.display == "none"


def test_the_explorer_draws_the_circuit_of_a_split_patch(translator: attnlab.decode.Model) -> None:
    """With the paths box ticked, the patch on show is drawn as a circuit too: its curves are the
    library's edges for the same pair; each menu redraws it with its heads or its smallest path, a
    new sender leaves it as it is; another hypothesis open or the box unticked, it goes. In the
    explorer's language, figure words included."""
    from html import escape

    from attnlab.app.words import figure_words
    from attnlab.record.circuit import trace_circuit

    explorer, changed = (
        widgets.explore(translator, text="A man sits on a bike .", beam=2, lang="es"),
        "A dog sits on a bike .",
    )
    paths_box = explorer.patching_row.paths_box
    box = paths_box.circuit_box
    explorer.patch(changed)
    assert explorer.figures["circuit"] is None and box.layout.display == "none"  # (not asked for)
    paths_box.split.value = True
    trace = explorer.result.hypotheses[0].trace

    def drawn(senders: int, threshold: float) -> list:
        """The edges on show, checked against the library's for `senders` and `threshold`."""
        expected = trace_circuit(translator, trace, changed, senders=senders, threshold=threshold)
        curves = explorer.figures["circuit"].select_one({"name": "paths"}).data_source.data
        library = viz.circuit_figure(expected, words=figure_words("es")).select_one({"name": "paths"})
        assert list(curves["tip"]) == list(library.data_source.data["tip"]), explorer.errors.message
        assert [edge[:2] for edge in box.circuit.edges] == [edge[:2] for edge in expected.edges]
        np.testing.assert_allclose([e[2] for e in box.circuit.edges], [e[2] for e in expected.edges], atol=1e-6)
        assert box.circuit.senders == expected.senders and box.circuit.threshold == threshold
        return expected.edges

    four = drawn(4, 0.05)
    assert four and box.layout.display is None and escape(i18n.text("ablation.circuit_about", "es")) in box.about.value
    box.senders.value = 2
    two = drawn(2, 0.05)
    box.threshold.value = 0.02
    assert len(two) < len(four) and len(two) < len(drawn(2, 0.02))  # (each menu changed what is drawn)
    shown = explorer.figures["circuit"]
    paths_box.sender.value = [value for _label, value in paths_box.sender.options][1]
    assert explorer.figures["circuit"] is shown  # (another sender: the circuit stays)
    explorer.choose(1)
    assert explorer.figures["circuit"] is None and box.layout.display == "none"
    explorer.patch(changed)
    assert explorer.figures["circuit"] is not None
    paths_box.split.value = False
    assert explorer.figures["circuit"] is None and box.layout.display == "none"


def test_a_tatoeba_translator_opens_on_an_everyday_sentence() -> None:
    """The Multi30k caption the widgets and the page open on came out "Un hombre en una camisa
    azul está tocando la calle." (the guitar gone) from the EN→ES model: a model trained on
    Tatoeba's short everyday sentences opens on one in the widgets; the Multi30k translator keeps
    its caption."""
    from attnlab.app.notebook import EVERYDAY, EXAMPLES

    root = Path(__file__).resolve().parents[1] / "checkpoints"
    spanish = attnlab.load(root / "tatoeba-en-es")
    assert widgets.explore(spanish, lang="es").text.value == EVERYDAY
    assert widgets.compare_models(spanish, heads_off={("cross", 0): [0]}).text.value == EVERYDAY
    assert widgets.explore(root / "multi30k-en-de").text.value == EXAMPLES["translate"]
