"""attnlab.viz (figures and export), the screens' model side (attnlab.app.checkpoints, attnlab.record.equation,
attnlab.decode.ablation, the explore command),
and the explorer app's store and views driven from Python (no browser; see
test_explorer_browser.py for the real browser)."""

from __future__ import annotations

import importlib.util
import io
import json
import random
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from bokeh.models import ColorBar, GlyphRenderer, HoverTool, Image, ImageRGBA, Legend, LinearColorMapper, Plot, Rect

from attnlab import viz
from attnlab.app.explorer.store import TIME_LIMIT
from attnlab.errors import AttnlabError
from attnlab.record.circuit import Circuit
from attnlab.record.importance import HeadImportance
from attnlab.record.lens import Lens
from attnlab.record.logit_attribution import LogitAttribution
from attnlab.record.patching import HeadPatching
from attnlab.record.paths import PathPatching
from attnlab.record.residual import ResidualPatching
from attnlab.record.saliency import Saliency
from attnlab.record.stats import head_pattern, head_stats
from attnlab.record.trace import AttentionTrace
from attnlab.viz.export import SUMMARY_PX
from attnlab.viz.labels import title_px
from attnlab.viz.selection import head_map, pick

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"
EN = "a the man woman dog cat child girl boy runs walks sits plays jumps in on under near park street water grass red blue green small big old young with ball bike shirt hat".split()
DE = "ein eine der die das mann frau hund katze kind mädchen junge läuft geht sitzt spielt springt im auf unter neben park straße wasser gras rot blau grün klein groß alt jung mit ball fahrrad hemd hut".split()
TREE_SYMBOLS = ["XX"] + [f"{b}{label}" for label in ("S", "NP", "VP", "PP") for b in "()"]


def synthetic_trace(
    n_src: int = 7, n_tgt: int = 5, n_layers: int = 2, n_heads: int = 3, seed: int = 0
) -> AttentionTrace:
    """A trace with row-stochastic random maps and tokens that need escaping."""
    rng = np.random.default_rng(seed)

    def maps(q: int, k: int, causal: bool) -> list[np.ndarray]:
        out = []
        for _ in range(n_layers):
            logits = rng.normal(size=(n_heads, q, k)) * 2
            if causal:
                logits = np.where(np.tril(np.ones((q, k), bool)), logits, -np.inf)
            weights = np.exp(logits - logits.max(-1, keepdims=True))
            out.append((weights / weights.sum(-1, keepdims=True)).astype(np.float32))
        return out

    src = ["▁A", "▁<b>", "▁&", *[f"▁w{i}" for i in range(n_src - 4)], "</s>"]
    tgt = ["▁Ein", *[f"▁v{i}" for i in range(n_tgt - 2)], "</s>"]
    return AttentionTrace(
        src_tokens=src,
        tgt_tokens=tgt,
        maps={
            "encoder": maps(n_src, n_src, False),
            "decoder": maps(n_tgt, n_tgt, True),
            "cross": maps(n_tgt, n_src, False),
        },
        masks={"decoder": np.tril(np.ones((n_tgt, n_tgt), bool))},
        model={"config": {"n_layers": n_layers}, "weights_sha256": "0" * 16, "checkpoint": "synthetic"},
        meta={"text": "A <b> & ...", "output": "Ein ..."},
    )


@pytest.fixture(scope="module")
def trace() -> AttentionTrace:
    return synthetic_trace()


def some_heads(trace: AttentionTrace, heads: list[int]) -> AttentionTrace:
    """`trace` as `record(heads=heads)` would have written it: those heads' rows, and their ids."""
    maps = {kind: [m[heads] for m in layers] for kind, layers in trace.maps.items()}
    return AttentionTrace(trace.src_tokens, trace.tgt_tokens, maps, trace.masks, trace.layers, heads, trace.model)


def make_checkpoints(base: Path) -> dict[str, Path]:
    """Random tiny translator and parser on a tokenizer trained here (no corpus needed)."""
    from attnlab import Transformer, preset
    from attnlab.data.tokenizer import train_tokenizer
    from attnlab.model.checkpoint import save_checkpoint

    rng = random.Random(0)
    sentences = [
        " ".join(rng.choice(w) for _ in range(rng.randint(4, 12))).capitalize() + " ."
        for w in (EN, DE)
        for _ in range(400)
    ]
    sentences += [" ".join(rng.choice(TREE_SYMBOLS) for _ in range(10)) for _ in range(100)]
    tokenizer = train_tokenizer(sentences, base / "spm", 400, 1, symbols=TREE_SYMBOLS)
    paths = {}
    for task, seed in (("translate", 1), ("parse", 2)):
        torch.manual_seed(seed)
        config = preset("tiny", vocab_size=tokenizer.get_piece_size(), max_len=96)
        paths[task] = save_checkpoint(
            base / f"tiny-{task}", Transformer(config), base / "spm.model", meta={"task": task}
        )
    return paths


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_checkpoints(tmp_path_factory.mktemp("viz"))


@pytest.fixture(scope="module")
def model(checkpoints: dict[str, Path]) -> object:
    from attnlab.app.checkpoints import open_model

    return open_model(checkpoints["translate"])


def transparent_overlay(fig: object) -> bool:
    """No mask overlay (the figure has one only when some cell is forbidden)."""
    return fig.select_one({"name": "mask-overlay"}) is None


def renderers(fig: object, glyph: type) -> list[GlyphRenderer]:
    return [r for r in fig.renderers if isinstance(r, GlyphRenderer) and isinstance(r.glyph, glyph)]


# -- heatmaps -----------------------------------------------------------------------------------------
def test_heatmap_is_one_image_with_token_labels_and_hover(trace: AttentionTrace) -> None:
    fig = viz.heatmap(trace, "cross", 1, 2)
    images = renderers(fig, Image)
    assert len(images) == 1 and not renderers(fig, Rect)  # one glyph, not one per cell
    shown = images[0].data_source.data["image"][0]
    np.testing.assert_allclose(shown[::-1], trace.attention("cross", 1)[2])  # rows flipped: query 0 on top
    assert list(fig.xaxis[0].major_label_overrides.values()) == trace.src_tokens
    rows = fig.yaxis[0].major_label_overrides  # query i sits at y = n - 1 - i (top to bottom)
    n = len(trace.tgt_tokens)
    assert [rows[n - 1 - i + 0.5] for i in range(n)] == trace.tgt_tokens
    hover = fig.select_one(HoverTool)
    assert [name for name, _ in hover.tooltips] == ["query", "key", "weight"]
    assert hover.formatters["$x"].args["labels"] == trace.src_tokens
    assert hover.formatters["$y"].args["labels"] == trace.tgt_tokens
    assert transparent_overlay(fig)  # cross attention of one sentence: nothing masked
    # The title is above the keys; a toolbar there shares its row and ran over a long title (Compare).
    assert fig.toolbar_location == "below" and fig.xaxis[0] in fig.above


def test_lines_draw_each_weight_from_its_query_to_its_key(trace: AttentionTrace) -> None:
    """bertviz's head view: a line from query i (left, y = -i) to key j (right, y = -j) for each
    weight ≥ LEAST, as opaque as the weight over the scale's top; the decoder's future keys (0)
    draw none; pointing at a word (both columns' hover) is wired to the lines' source."""
    from attnlab.viz.lines import LEAST

    fig = viz.lines_figure(trace, "decoder", 1, 2)
    data = fig.select_one({"name": "lines"}).data_source.data
    weights = trace.attention("decoder", 1)[2]
    q, k = np.nonzero(weights >= LEAST)
    assert (data["q"], data["k"]) == (q.tolist(), k.tolist()) and all(kk <= qq for qq, kk in zip(q, k, strict=True))
    np.testing.assert_allclose(data["alpha"], weights[q, k])
    assert data["y0"] == (-q).tolist() and data["y1"] == (-k).tolist() and set(data["x0"]) == {0.0}
    tokens = {side: fig.select_one({"name": f"{side}-tokens"}).data_source.data["label"] for side in ("q", "k")}
    assert tokens == {"q": trace.tgt_tokens, "k": ["<s>", *trace.tgt_tokens[:-1]]}
    hovers = [t for t in fig.tools if isinstance(t, HoverTool)]
    assert [h.callback.args["side"] for h in hovers] == ["q_at", "k_at"]
    assert all(h.callback.args["lines"] is fig.select_one({"name": "lines"}).data_source for h in hovers)
    assert fig.name == "lines-decoder" and "layer 1 · head 2" in fig.title.text
    # scaled to the head's largest weight (a query with one key left out), in place for another head
    viz.update_lines(fig, trace, "cross", 0, 1, vmax=None)
    data, cross = fig.select_one({"name": "lines"}).data_source.data, trace.attention("cross", 0)[1]
    assert max(data["alpha"]) == 1.0 and fig.name == "lines-cross" and "layer 0 · head 1" in fig.title.text
    np.testing.assert_allclose(max(data["alpha"]) * cross.max(), max(cross[cross >= LEAST]))
    with pytest.raises(AttnlabError, match="^head 9 does not exist in this trace"):
        viz.lines_figure(trace, "cross", 0, 9)
    # every head of the layer (head None), each in its colour, named between the columns' headers
    viz.update_lines(fig, trace, "cross", 0, None)
    data, every = fig.select_one({"name": "lines"}).data_source.data, trace.attention("cross", 0)
    assert len(data["q"]) == int((every >= LEAST).sum()) and "every head" in fig.title.text
    heads = fig.select_one({"name": "heads"}).data_source.data
    assert heads["label"] == ["H0", "H1", "H2"] and len(set(heads["color"])) == 3
    h0 = [c for c, q, k in zip(data["color"], data["q"], data["k"], strict=True) if c == heads["color"][0]]
    assert len(h0) == int((every[0] >= LEAST).sum())  # head 0's lines in head 0's colour
    viz.update_lines(fig, trace, "cross", 0, 1)
    assert fig.select_one({"name": "heads"}).data_source.data["label"] == []  # one head: one colour, no names


def test_every_heads_names_stand_in_rows_and_a_click_on_one_toggles_its_lines() -> None:
    """With every head drawn, each line knows its head (`h`) and each name is shown (`on`); a tap
    on a name's box runs the toggle, and both the toggle and the hover draw only heads that are
    on. Big's 16 heads stand in two rows of 8, each in a colour of its own, the figure taller by
    the row it adds; a layer's first row shares the columns' headers' row."""
    from bokeh.models import TapTool

    from attnlab.viz.labels import TITLE_LINE_PX
    from attnlab.viz.lines import HEAD_COLORS, PER_ROW, ROW_PX

    four, sixteen = synthetic_trace(n_heads=4), synthetic_trace(n_heads=16)
    fig = viz.lines_figure(four, "cross", 0, None)
    lines, heads = (fig.select_one({"name": name}).data_source for name in ("lines", "heads"))
    assert set(lines.data["h"]) == {0, 1, 2, 3} and heads.data["on"] == [1] * 4 and set(heads.data["y"]) == {1.0}
    assert [lines.data["color"][n] for n in range(len(lines.data["h"]))] == [
        heads.data["color"][h] for h in lines.data["h"]
    ]
    boxes = fig.select_one({"name": "head-boxes"})
    tap = fig.select_one(TapTool)
    assert tap.renderers == [boxes] and boxes.data_source.data["x"] == heads.data["x"]
    assert (
        tap.callback.args["heads"] is heads and tap.callback.args["lines"] is lines and "on[h[n]]" in tap.callback.code
    )
    assert all("on[h[n]]" in h.callback.code for h in fig.tools if isinstance(h, HoverTool))

    def body() -> int:  # the figure's height less its title's and hint's lines (the 16 heads' span is wider)
        lines = fig.title.text.count("\n") + fig.select_one({"name": "hint"}).text.count("\n")
        return fig.height - TITLE_LINE_PX * lines

    height = body()
    viz.update_lines(fig, sixteen, "cross", 0, None)
    data = heads.data
    assert data["label"] == [f"H{h}" for h in range(16)] and len(set(data["color"])) == 16 == len(set(HEAD_COLORS[:16]))
    assert data["y"] == [2.0] * PER_ROW + [1.0] * PER_ROW and data["x"][:PER_ROW] == data["x"][PER_ROW:]
    assert body() == height + ROW_PX and fig.y_range.end == 2.5
    assert boxes.glyph.width == pytest.approx(data["x"][1] - data["x"][0])  # each box as wide as a name's place
    assert "click a head's name" in fig.select_one({"name": "hint"}).text.replace("\n", " ")
    viz.update_lines(fig, four, "cross", 0, 2)
    assert "click" not in fig.select_one({"name": "hint"}).text and heads.data["label"] == []  # one head: no names


def test_mask_overlay_marks_forbidden_cells_only(trace: AttentionTrace) -> None:
    with_mask = viz.heatmap(trace, "decoder", 0, 0, mask=True)
    overlay = renderers(with_mask, ImageRGBA)
    assert len(overlay) == 1
    rgba = (
        overlay[0]
        .data_source.data["image"][0]
        .view(np.uint8)
        .reshape(*overlay[0].data_source.data["image"][0].shape, 4)
    )
    alpha = rgba[::-1, :, 3] > 0  # back to query-major order
    n = len(trace.tgt_tokens)
    cell = alpha.shape[0] // n
    blocked = alpha[cell // 2 :: cell, cell // 2 :: cell]  # one sample per cell
    np.testing.assert_array_equal(blocked, ~np.tril(np.ones((n, n), bool)))
    assert overlay[0].data_source.data["image"][0].dtype == np.uint32
    assert transparent_overlay(viz.heatmap(trace, "decoder", 0, 0, mask=False))
    assert not transparent_overlay(with_mask)
    hover = with_mask.select_one(HoverTool)
    assert hover.formatters["@image"].args["blocked"] == np.flatnonzero(~np.tril(np.ones((n, n), bool))).tolist()


def test_scale_to_max_leaves_out_a_query_with_one_key(trace: AttentionTrace) -> None:
    """The decoder's first query sees only itself: its weight is 1.0 by construction, so "scale
    to max" scaled every causal map to 1 and changed nothing; it now takes the rows with a choice."""
    weights = trace.attention("decoder", 1)[0]
    top = float(weights[1:].max())
    assert weights[0, 0] == pytest.approx(1.0) and top < 0.99
    fig = viz.heatmap(trace, "decoder", 1, 0, vmax=None)
    assert fig.select_one({"name": "cells"}).glyph.color_mapper.high == pytest.approx(top)
    assert viz.heatmap(trace, "cross", 1, 0, vmax=None).select_one({"name": "cells"}).glyph.color_mapper.high == (
        pytest.approx(float(trace.attention("cross", 1)[0].max()))
    )  # every cross-attention query has a choice: its own maximum, as before
    same = viz.grid(trace, "decoder", vmax=1.0).select_one({"name": "thumbnails"}).data_source.data["image"]
    scaled = viz.grid(trace, "decoder", vmax=None).select_one({"name": "thumbnails"}).data_source.data["image"]
    assert any((a != b).any() for a, b in zip(same, scaled, strict=True))  # the thumbnails darken too


def test_masked_cells_differ_from_real_zeros() -> None:
    weights = np.array([[1.0, 0.0], [0.0, 1.0]])
    allowed = np.array([[True, False], [True, True]])
    pixels = viz.hatch(viz.colorize(weights), allowed, 6)
    real_zero = pixels[9, 3]  # cell (1, 0): allowed, weight 0
    forbidden = pixels[0:6, 6:12].reshape(-1, 3)  # cell (0, 1)
    assert tuple(real_zero) == tuple(viz.colorize(np.zeros((1, 1)))[0, 0])  # the palette's lightest blue
    colours = {tuple(c) for c in forbidden}
    assert colours <= {viz.MASK_DARK, viz.MASK_LIGHT} and len(colours) == 2  # hatched, not white


def test_bad_arguments_are_one_line_errors(trace: AttentionTrace) -> None:
    with pytest.raises(AttnlabError, match="head 7 does not exist"):
        viz.heatmap(trace, "encoder", 0, 7)
    with pytest.raises(AttnlabError, match="not recorded"):
        viz.heatmap(trace, "encoder", 5, 0)
    with pytest.raises(AttnlabError, match="unknown attention kind"):
        viz.heatmap(trace, "sideways", 0, 0)
    with pytest.raises(AttnlabError, match="needs 2 query and 2 key labels"):
        viz.matrix_figure(np.zeros((2, 2)), ["a"], ["b", "c"])
    other = synthetic_trace(n_src=9)
    with pytest.raises(AttnlabError, match="not the same sentence pair"):
        viz.diff_figure(trace, other, "encoder", 0, 0)
    with pytest.raises(AttnlabError, match="head 1.0 does not exist"):  # was numpy's IndexError
        viz.heatmap(trace, "encoder", 0, 1.0)
    with pytest.raises(AttnlabError, match="a layer is a whole number"):
        viz.heatmap(trace, "encoder", "1", 0)
    with pytest.raises(AttnlabError, match=r"may use \{kind_title\}, \{layer\} and \{head\}, not 'oops'"):
        viz.heatmap(trace, "encoder", 0, 0, words={"head.title": "{oops}"})  # was a KeyError


def test_grid_refuses_a_kind_as_heatmap_does(trace: AttentionTrace) -> None:
    only_cross = AttentionTrace(trace.src_tokens, trace.tgt_tokens, {"cross": trace.maps["cross"]})
    for kind, error in (("crss", "unknown attention kind 'crss'"), ("encoder", "no encoder attention")):
        with pytest.raises(AttnlabError, match=error):
            viz.heatmap(only_cross, kind, 0, 0)
        with pytest.raises(AttnlabError, match=error):  # was a KeyError
            viz.grid(only_cross, kind)


def test_views_name_heads_and_layers_as_the_model_does(trace: AttentionTrace) -> None:
    """A trace of heads 1 and 2 only: row 0 of its maps is head 1, and every view must say so."""
    assert trace.heads is None and viz.head_ids(trace) == [0, 1, 2]  # a full trace: ids are rows
    some = some_heads(trace, [1, 2])
    fig = viz.heatmap(some, "cross", 0, 2)
    np.testing.assert_allclose(
        renderers(fig, Image)[0].data_source.data["image"][0][::-1], trace.attention("cross", 0)[2]
    )
    assert fig.title.text.endswith("layer 0 · head 2")
    with pytest.raises(AttnlabError, match="head 0 does not exist in this trace: it holds heads 1, 2"):
        viz.heatmap(some, "cross", 0, 0)
    grid = viz.grid(some, "cross", selected=(1, 2))
    assert list(grid.xaxis[0].major_label_overrides.values()) == ["head 1", "head 2"]
    names = renderers(grid, ImageRGBA)[0].data_source.data["name"]
    assert names == ["layer 0 · head 1", "layer 0 · head 2", "layer 1 · head 1", "layer 1 · head 2"]
    (frame,) = renderers(grid, Rect)  # head 2 is the second column
    assert (frame.glyph.x, frame.glyph.y) == pytest.approx((1.12 + 0.5, 0.5))
    assert viz.grid_pick(1.12 + 0.5, 0.5, [0, 1], grid.tags[0]["heads"]) == (1, 2)
    top = viz.heatmap(trace, "cross", -1, 0)  # -1: the model's top layer, titled as such
    assert top.title.text.endswith("layer 1 · head 0")
    assert "layer 1 · head 2" in viz.heatmap_svg(some, "cross", -1, 2)  # the export's title too


def test_a_nan_weight_is_coloured_not_an_index_error(trace: AttentionTrace) -> None:
    """A trace built in memory may hold NaN (a loaded one may not): it must still draw."""
    nan = synthetic_trace()
    nan.maps["cross"][0][0, 1, 2] = np.nan
    assert (viz.colorize(np.array([[np.nan, 0.0]]), 0.0, np.nan) == viz.colorize(np.zeros((1, 2)))).all()
    viz.grid(nan, "cross", vmax=None)
    viz.heatmap_png(nan, "cross", 0, 0, vmax=None)
    top = np.nanmax(nan.maps["cross"][0][0])
    assert f">{top:.2f}</text>" in viz.heatmap_svg(nan, "cross", 0, 0, vmax=None)  # the scale: the finite maximum


def test_compare_notes_a_head_the_trace_lacks(trace: AttentionTrace) -> None:
    """`has_head` answers as `heatmap` reads: True only for a map it can draw."""
    bottom = AttentionTrace(trace.src_tokens, trace.tgt_tokens, {"cross": trace.maps["cross"][:1]}, model=trace.model)
    assert viz.has_head(bottom, "cross", 0, 0) and not viz.has_head(bottom, "cross", -1, 0)  # -1: the model's layer 1
    figures = viz.compare_figures(bottom, trace, "cross", -1, 0)  # heatmap raised "not recorded"
    assert [f.name for f in figures] == ["compare-note-first", "compare-second", "compare-note-diff"]
    some = some_heads(trace, [1, 2])
    assert [viz.has_head(some, "cross", 0, head) for head in (0, 1, 2, 3)] == [False, True, True, False]


@pytest.mark.parametrize("names", [("A",), ("A", "B", "C"), None, (1, 2), "AB"])
def test_compare_names_that_are_not_two_strings_are_one_line(trace: AttentionTrace, names: object) -> None:
    """("A",) was a ValueError from zip and None a TypeError; (1, 2) and "AB" drew, named by accident."""
    with pytest.raises(AttnlabError, match=r"^names are two strings, one per trace, not "):
        viz.compare_figures(trace, trace, "cross", 0, 0, names)


@pytest.mark.parametrize(
    ("words", "said"),
    [
        ("es", r"^words must map template names \(viz.WORDS\) to strings, got str$"),
        (["head.title"], r"^words must map template names \(viz.WORDS\) to strings, got list$"),
        ({"head.title": 123}, r"^words\['head.title'\] must be a string \(a template\), got int$"),
        ({"grid.title": None}, r"^words\['grid.title'\] must be a string \(a template\), got NoneType$"),
    ],
)
def test_words_that_are_not_a_mapping_of_strings_are_one_line(trace: AttentionTrace, words: object, said: str) -> None:
    """A string or a list was a TypeError deep in `say`, a number an AttributeError in a title."""
    for draw in (
        lambda: viz.heatmap(trace, "cross", 0, 0, words=words),
        lambda: viz.grid(trace, "cross", words=words),
        lambda: viz.heatmap_png(trace, "cross", 0, 0, words=words),
    ):
        with pytest.raises(AttnlabError, match=said):
            draw()


@pytest.mark.parametrize("selected", [(0,), 0, (0, 1, 2), "01"])
def test_a_grid_selection_that_is_not_a_layer_and_head_is_one_line(trace: AttentionTrace, selected: object) -> None:
    """(0,) was an IndexError and 0 a TypeError."""
    with pytest.raises(AttnlabError, match=r"^selected is \(layer, head\), got "):
        viz.grid(trace, "cross", selected=selected)


def test_a_grid_selection_outside_the_grid_or_a_tap_callback_that_is_not_one_is_one_line(
    trace: AttentionTrace,
) -> None:
    """`selected=(9, 9)` drew no frame without a word, in `grid` and in `profile_grid`; `on_select=123`
    was accepted and failed at the first tap. A negative layer or head counts from the last."""
    draws = {
        "grid": lambda **o: viz.grid(trace, "cross", **o),
        "profile_grid": lambda **o: viz.profile_grid(trace.layers["cross"], np.zeros((2, 3)), **o),
    }
    for name, draw in draws.items():
        for selected, said in [((9, 0), "selected: .*layer 9"), ((0, 9), "selected: .*head 9"), ((0, True), "True")]:
            with pytest.raises(AttnlabError, match=said):
                draw(selected=selected)
        with pytest.raises(AttnlabError, match=r"on_select is a function of \(layer, head\) or None, got 123"):
            draw(on_select=123)
        frames = [
            draw(selected=chosen, on_select=print).select_one({"name": "selected"}) for chosen in [(-1, -1), (1, 2)]
        ]
        assert (frames[0].glyph.x, frames[0].glyph.y) == (frames[1].glyph.x, frames[1].glyph.y), name


def test_200_tokens_render_fast_with_thinned_labels() -> None:
    long = synthetic_trace(n_src=200, n_tgt=210, n_layers=6, n_heads=8)
    started = time.perf_counter()
    fig = viz.heatmap(long, "encoder", 5, 7)
    grid = viz.grid(long, "decoder")
    seconds = time.perf_counter() - started
    assert seconds < 3.0
    assert 10 < len(fig.xaxis[0].major_label_overrides) < 200  # thinned so labels do not overlap
    assert fig.width < 1000 and fig.height < 1000
    thumbs = renderers(grid, ImageRGBA)[0].data_source.data["image"]
    assert len(thumbs) == 6 * 8
    assert max(t.shape[0] for t in thumbs) <= viz.GRID_SIDE * max(1, 96 // viz.GRID_SIDE)


def test_in_place_updates_match_fresh_figures(trace: AttentionTrace) -> None:
    """The app updates the head and grid figures in place; they must end up as if drawn afresh."""

    def state(fig: object) -> dict:
        hover = fig.select_one(HoverTool)
        data = {r.name: r.data_source.data for r in fig.renderers if r.name}
        return {
            "title": fig.title.text, "name": fig.name, "size": (fig.width, fig.height),
            "x": (fig.x_range.start, fig.x_range.end, fig.x_range.bounds),
            "y": (fig.y_range.start, fig.y_range.end, fig.y_range.bounds),
            "ticks": (fig.xaxis[0].ticker.ticks, fig.xaxis[0].major_label_overrides, fig.yaxis[0].major_label_overrides),
            "hover": {key: f.args for key, f in hover.formatters.items()} if hover.formatters else None,
            "data": {name: {k: [np.asarray(v).tolist() for v in vs] for k, vs in d.items()} for name, d in data.items()},
            "frame": [(r.glyph.x, r.glyph.y) for r in fig.renderers if r.name == "selected"],
        }  # fmt: skip

    fig = viz.heatmap(trace, "encoder", 0, 0)
    cases = (("decoder", 1, 2, True), ("cross", 0, 1, False), ("decoder", 0, 0, False), ("decoder", 1, 0, True))
    for kind, layer, head, mask in cases:
        viz.update_heatmap(fig, trace, kind, layer, head, mask=mask)
        assert state(fig) == state(viz.heatmap(trace, kind, layer, head, mask=mask))
    other = synthetic_trace(n_src=11, n_tgt=9, seed=3)
    grid = viz.grid(trace, "encoder")
    for kind, selected in (("decoder", (1, 2)), ("cross", None), ("encoder", (0, 1))):
        viz.update_grid(grid, other, kind, selected=selected)
        assert state(grid) == state(viz.grid(other, kind, selected=selected))
    assert grid.tags == [{"layers": [0, 1], "heads": [0, 1, 2]}]


def test_downsample_averages_blocks() -> None:
    array = np.arange(16, dtype=float).reshape(4, 4)
    np.testing.assert_allclose(viz.downsample(array, 2), [[2.5, 4.5], [10.5, 12.5]])
    odd = viz.downsample(np.ones((5, 3)), 2)
    assert odd.shape == (2, 2) and np.allclose(odd, 1.0)  # partial blocks average real cells only
    assert viz.downsample(array, 10) is array


def test_grid_pick_inverts_the_layout(trace: AttentionTrace) -> None:
    layers = trace.layers["encoder"]
    fig = viz.grid(trace, "encoder", selected=(1, 2))
    assert len(renderers(fig, ImageRGBA)[0].data_source.data["image"]) == len(layers) * trace.n_heads
    (frame,) = renderers(fig, Rect)  # the selected cell's outline
    assert (frame.glyph.x, frame.glyph.y) == pytest.approx((2 * (1 + 0.12) + 0.5, 0 * (1 + 0.12) + 0.5))
    gap = 0.12
    for row, layer in enumerate(layers):
        for head in range(trace.n_heads):
            x = head * (1 + gap) + 0.5
            y = (len(layers) - 1 - row) * (1 + gap) + 0.5
            assert viz.grid_pick(x, y, layers, viz.head_ids(trace)) == (layer, head)
    assert viz.grid_pick(1.05, 0.5, layers, viz.head_ids(trace)) is None  # in the gap
    assert viz.grid_pick(None, None, layers, viz.head_ids(trace)) is None


def test_mask_computation_stats_timeline_and_tree_figures(trace: AttentionTrace) -> None:
    mask = viz.mask_figure(trace, "decoder")
    assert "causal" in mask.title.text
    assert not [bar for bar in mask.select({"type": ColorBar}) if bar.visible]  # white or hatched, no scale
    assert [bar for bar in viz.heatmap(trace, "decoder", 0, 0).select({"type": ColorBar}) if bar.visible]
    n = 4
    parts = {
        "scores": np.arange(n * n, dtype=float).reshape(n, n),
        "allowed": np.tril(np.ones((n, n), bool)),
        "weights": np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None],
        "v": np.ones((n, 3)),
        "out": np.ones((n, 3)),
    }
    layout = viz.computation_figure(parts, 1, list("abcd"), list("abcd"))
    names = {m.name for m in layout.select({"type": Plot}) if m.name}
    assert {"eq1-scores", "eq1-masked", "eq1-softmax", "eq1-values", "eq1-output"} <= names
    masked = layout.select_one({"name": "eq1-masked"})
    texts = [r for r in masked.renderers if r.glyph.__class__.__name__ == "Text"]
    assert texts and list(texts[0].data_source.data["text"]) == ["−∞", "−∞"]  # keys 2, 3 of query 1
    raw = layout.select_one({"name": "eq1-scores"})  # query 1's scores 4..7: the masked 6 and 7 in range too
    assert raw.y_range.start <= 0 and raw.y_range.end >= 7 and masked.y_range is raw.y_range
    for query, labels, said in (  # an IndexError, a TypeError; labels first drew, with bokeh's warnings
        (99, "abcd", "query 99 is not a row of this 4×4 map (0 to 3, or -1 for the last)"),
        (None, "abcd", "query None is not a row"),
        (True, "abcd", "query True is not a row"),
        (0, "abc", "these parts are of a 4×4 map: they need 4 query and 4 key labels, got 3 and 3"),
    ):
        with pytest.raises(AttnlabError, match=re.escape(said)):
            viz.computation_figure(parts, query, list(labels), list(labels))  # type: ignore[arg-type]
    with pytest.raises(AttnlabError, match="^computation_figure reads the scores, allowed, weights, v and out of"):
        viz.computation_figure({"scores": parts["scores"]}, 0, list("abcd"), list("abcd"))  # (a KeyError)
    source = viz.stats_source(head_stats(trace))
    assert len(source.data["label"]) == 3 * 2 * 3
    assert viz.stats_table(source).sortable and not viz.stats_table(source).reorderable  # (needs jquery-ui)
    from attnlab.app.words import figure_words  # Spanish names the eos column "</s>": a tag to BokehJS

    headers = [c.title for c in viz.stats_table(source, words=figure_words("es")).columns]
    assert "&lt;/s&gt;" in headers and "</s>" not in headers
    # each head's pattern (`head_pattern`), named short in the table's words: a sortable column, and in the hover
    patterns = [viz.WORDS[f"stats.pattern.{head_pattern(row)[0]}"] for row in head_stats(trace)]
    assert source.data["pattern"] == patterns and "pattern" in [c.field for c in viz.stats_table(source).columns]
    spanish = viz.stats_source(head_stats(trace), words=figure_words("es")).data["pattern"]
    assert set(spanish) <= {"pieza anterior", "su posición", "pieza siguiente", "diagonal", "primera pieza"} | {
        "final </s>",
        "concentrada",
        "dispersa",
        "mixta",
    }
    assert viz.stats_scatter(source, "entropy", "max").xaxis[0].axis_label == "entropy"
    scatter = viz.stats_scatter(source, "entropy", "max")  # its legend under the plot: in a corner it hid heads
    assert isinstance(scatter.below[-1], Legend) and not any(isinstance(m, Legend) for m in scatter.center)
    spanish = figure_words("es")
    spanish = viz.stats_table(viz.stats_source(head_stats(trace), words=spanish), words=spanish)
    assert spanish.columns[0].width >= title_px("decodificador")  # (70 px cut it to "decodifica…")
    diff = viz.diff_figure(trace, trace, "cross", 0, 1)
    assert diff.name == "timeline-diff"  # its title names the kind, as the heatmap's beside it does
    assert (
        " ".join(diff.title.text.split())
        == "difference to the final model · encoder–decoder attention · layer 0 · head 1"
    )
    # the overlay follows "mask overlay" as the heatmap beside it does (it was always hatched)
    assert not transparent_overlay(viz.diff_figure(trace, trace, "decoder", 0, 1))
    assert transparent_overlay(viz.diff_figure(trace, trace, "decoder", 0, 1, mask=False))
    assert viz.timeline_curve([1, 2, 3], {"head 0": [1.0, 0.5, 0.2]}, current=2).name == "timeline-curve"
    # the value axis names the statistic where it fits along it (the explorer's ran off both ends); the title, always
    for stat, axis in (("entropy", "entropy"), ("entropía (atención codificador–decodificador, capa 2)", "")):
        curve = viz.timeline_curve([1, 2], {"head 0": [1.0, 0.5]}, stat=stat)
        assert curve.yaxis[0].axis_label == axis and stat in " ".join(curve.title.text.split("\n"))
    assert viz.token_delta_figure(["a", "b"], [-1.0, -2.0], [-1.5, -3.0]).name == "ablation-tokens"


@pytest.mark.parametrize(
    ("steps", "values", "said"),
    [
        ([1, 2, 3], {"h": [1.0]}, r"values\['h'\] has 1 values for 3 steps: one per step"),  # drawn without a word
        ([1, 2], {"h": [1.0, 2.0, 3.0]}, r"values\['h'\] has 3 values for 2 steps"),
        (None, None, "steps is a sequence of numbers, got NoneType"),  # an AttributeError
        ([1, 2], None, "values is \\{legend label: one value per step\\}, got NoneType"),
        ("12", {"h": [1.0, 2.0]}, "steps is a sequence of numbers, got str"),
        ([1, "2"], {"h": [1.0, 2.0]}, "steps is a sequence of numbers, got '2' in it"),
        ([1, 2], {"h": [1.0, None]}, r"values\['h'\] is a sequence of numbers, got None in it"),
        ([1, 2], {0: [1.0, 2.0]}, "legend labels are strings, got 0"),
    ],
)
def test_a_timeline_curve_of_values_that_do_not_fit_its_steps_is_one_line(steps, values, said: str) -> None:
    with pytest.raises(AttnlabError, match=said):
        viz.timeline_curve(steps, values)
    with pytest.raises(AttnlabError, match="current is a step"):
        viz.timeline_curve([1, 2], {"h": [1.0, 2.0]}, current="2")
    fig = viz.timeline_curve(np.array([1, 2]), {"h": (np.float32(1.0), float("nan"))}, current=np.int64(2))
    assert fig.name == "timeline-curve"  # numpy numbers, tuples and NaN (a step without a value) are drawn


@pytest.mark.parametrize(
    ("tokens", "before", "after", "said"),
    [
        (["a", "b", "c"], [-1.0, -2.0], [-1.5, -3.0, -0.5], "got 3 tokens, 2 before and 3 after"),
        (["a", "b"], [-1.0, -2.0], [-1.5], "got 2 tokens, 2 before and 1 after"),
        (["a"], [-1.0, -2.0], [-1.5, -3.0], "got 1 token, 2 before and 2 after"),
    ],
)
def test_an_ablation_figure_of_mismatched_lengths_is_one_line(
    tokens: list[str], before: list[float], after: list[float], said: str
) -> None:
    """Three tokens with two bars before drew a figure without a word: each pair of bars must be
    one token's."""
    with pytest.raises(AttnlabError, match=re.escape(said)) as error:
        viz.token_delta_figure(tokens, before, after)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0)])
def test_an_empty_map_is_one_line(shape: tuple[int, int]) -> None:
    """A 0×0 map was bokeh's ten-line refusal of the figure's empty bounds (MinMaxBounds)."""
    with pytest.raises(
        AttnlabError, match=rf"^a map needs at least one query and one key, got a {shape[0]}×{shape[1]} one$"
    ):
        viz.matrix_figure(np.zeros(shape), ["q"] * shape[0], ["k"] * shape[1])


@pytest.mark.parametrize("values", [np.zeros((3, 4)), np.zeros(2), np.zeros((2, 4, 1))])
def test_a_profile_grid_whose_table_does_not_fit_its_layers_is_one_line(values: np.ndarray) -> None:
    """Rows for other layers than named were a bare ValueError; a 1-D table, one from unpacking."""
    with pytest.raises(AttnlabError, match=re.escape(f"each of the 2 layers named, got shape {values.shape}")):
        viz.profile_grid([0, 1], values)


def test_tree_figure_draws_every_word_and_label() -> None:
    fig = viz.tree_figure("(S (NP (XX The) (XX dog)) (VP (XX barks)) (XX .))")
    text = [r for r in fig.renderers if r.glyph.__class__.__name__ == "Text"][0].data_source.data["text"]
    assert sorted(text) == sorted(["S", "NP", "XX", "XX", "VP", "XX", "XX", "The", "dog", "barks", "."])
    segments = [r for r in fig.renderers if r.glyph.__class__.__name__ == "Segment"][0].data_source.data
    assert len(segments["x0"]) == len(text) - 1  # a tree: one edge into every node but the root
    chain = viz.tree_figure("(S " * 40 + "(NP (XX The) (XX dog)) (VP (XX barks))" + ")" * 40)  # an untrained parser's
    text = [r for r in chain.renderers if r.glyph.__class__.__name__ == "Text"][0].data_source.data["text"]
    assert sorted(text) == sorted(["S ×40", "NP", "XX", "XX", "VP", "XX", "The", "dog", "barks"])
    assert chain.height < 70 + 44 * 6  # four levels and the words' row, not 44
    words = [f"w{i}" for i in range(55)]  # a long sentence: 21 words at once, 64 px apart, dragged sideways
    long = viz.tree_figure("(S " + " ".join(f"(XX {w})" for w in words) + ")")  # (squeezed into 1,400 px, unreadable)
    assert (long.x_range.start, long.x_range.end, long.x_range.bounds) == (0, 21, (0, 55))
    assert long.width == 21 * 64 and long.title.text == "parse tree: drag sideways to see all 55 words"
    # narrower, as in a 1,024 px window (674 px: 40 words ran together), it shows fewer words as far apart
    assert long.sizing_mode == "stretch_width" and long.min_width < long.width and long.js_property_callbacks
    assert fig.title.text == "parse tree" and fig.x_range.end == 4 and fig.width == 320
    with pytest.raises(AttnlabError, match="not a bracketed tree"):
        viz.tree_figure("no brackets here")
    with pytest.raises(AttnlabError):
        viz.tree_figure("(S (NP")


# -- export -----------------------------------------------------------------------------------------
def test_png_export_draws_cells_labels_and_hatch(trace: AttentionTrace) -> None:
    from PIL import Image as PILImage

    data = viz.heatmap_png(trace, "decoder", 1, 0)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = PILImage.open(io.BytesIO(data)).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3)
    hatched = (np.abs(pixels.astype(int) - viz.MASK_DARK).max(-1) == 0).sum()
    assert hatched > 50  # the causal hatch
    assert len(np.unique(pixels, axis=0)) > 20  # cells, labels, colour bar
    darkest = tuple(viz.colorize(np.array([[1.0]]))[0, 0])
    assert (pixels == darkest).all(-1).any() == (trace.attention("decoder", 1)[0] > 255 / 256).any()
    plain = PILImage.open(io.BytesIO(viz.heatmap_png(trace, "decoder", 1, 0, mask=False))).convert("RGB")
    assert (np.abs(np.asarray(plain).reshape(-1, 3).astype(int) - viz.MASK_DARK).max(-1) == 0).sum() < hatched / 5


def test_svg_export_is_valid_with_escaped_labels(trace: AttentionTrace) -> None:
    svg = viz.heatmap_svg(trace, "encoder", 0, 1)
    root = ET.fromstring(svg)  # well-formed despite "<b>" and "&" tokens
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "▁<b>" in texts and "▁&" in texts
    n = len(trace.src_tokens)
    cells = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    assert len(cells) == n * n
    decoder = ET.fromstring(viz.heatmap_svg(trace, "decoder", 0, 0))
    assert sum(r.get("fill") == "url(#masked)" for r in decoder.iter(f"{ns}rect")) == 5 * 4 // 2
    long = synthetic_trace(n_src=120, n_tgt=5)
    assert "data:image/png;base64," in viz.heatmap_svg(long, "encoder", 0, 0)  # 14,400 cells: one image


def test_a_head_or_layer_given_as_true_is_refused_and_negative_ones_name_the_models(trace: AttentionTrace) -> None:
    """`viz.heatmap(trace, "cross", True, True)` drew layer 1, head 1, titled "head True";
    head -1 was refused by the views while `show(head=-1)` opened the last head."""
    for layer, head, said in ((True, 0, "a layer is a whole number, got True"), (0, True, "head True does not exist")):
        for view in (viz.heatmap, viz.heatmap_png, viz.heatmap_svg):
            with pytest.raises(AttnlabError, match=re.escape(said)):
                view(trace, "cross", layer, head)
    with pytest.raises(AttnlabError, match=r"no layer True: choose from 0, 1"):
        pick(True, [0, 1], "layer")
    last = viz.heatmap(trace, "cross", -1, -1)
    assert last.title.text.endswith("layer 1 · head 2")  # the model's ids, as show(head=-1) opens them
    assert np.array_equal(head_map(trace, "cross", -1, -1), trace.attention("cross", 1)[2])


@pytest.mark.parametrize("vmax", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_a_colour_scale_of_nothing_is_refused(trace: AttentionTrace, vmax: object) -> None:
    """vmax 0, negative or NaN drew every cell in one colour without a word; "1" was a TypeError."""
    for view in (
        lambda: viz.heatmap(trace, "cross", 0, 0, vmax=vmax),
        lambda: viz.grid(trace, "cross", vmax=vmax),
        lambda: viz.heatmap_png(trace, "cross", 0, 0, vmax=vmax),
        lambda: viz.heatmap_svg(trace, "cross", 0, 0, vmax=vmax),
    ):
        with pytest.raises(AttnlabError, match=r"^vmax \(the top of the colour scale\) must be a number > 0, or None"):
            view()


def test_mask_is_true_or_false_in_every_view(trace: AttentionTrace) -> None:
    """mask="no" is a true string: every view drew the mask it was asked to leave out."""
    for mask in ("no", None, 0):
        for view in (
            lambda: viz.heatmap(trace, "cross", 0, 0, mask=mask),
            lambda: viz.grid(trace, "cross", mask=mask),
            lambda: viz.heatmap_png(trace, "cross", 0, 0, mask=mask),
            lambda: viz.heatmap_svg(trace, "cross", 0, 0, mask=mask),
            lambda: viz.diff_figure(trace, trace, "cross", 0, 0, mask=mask),
        ):
            with pytest.raises(AttnlabError, match=rf"^mask must be True or False, got {mask!r}$"):
                view()
    assert viz.heatmap(trace, "cross", 0, 0, mask=np.bool_(False)) is not None  # NumPy's bools are bools


def test_one_score_taken_apart_sums_to_the_score_dimension_by_dimension() -> None:
    """bertviz's neuron view: qᵢ and kⱼ dimension by dimension, and products that sum to Eq. (1)'s
    score qᵢ·kⱼ/√d_k (here 4 dimensions: 1·2 + 2·(−1) + 0·5 + 3·1 = 3, over √4); the bars' colours
    are the strips' (red above 0, blue below)."""
    q = np.array([[1.0, 2.0, 0.0, 3.0], [0.0, 0.0, 0.0, 1.0]])
    k = np.array([[2.0, -1.0, 5.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    parts = {"q": q, "k": k, "scores": q @ k.T / 2.0}
    layout = viz.dot_product_figure(parts, 0, 0, ["▁a", "b"], ["x", "<0x32>", "</s>"], title="enc L0 H0")
    bars = layout.select_one({"name": "dot-products"})
    assert layout.sizing_mode == bars.sizing_mode == "stretch_width" and bars.min_width <= 660  # (cut at 1024 px)
    data = bars.renderers[0].data_source.data
    assert list(data["top"]) == [1.0, -1.0, 0.0, 1.5] and sum(data["top"]) == parts["scores"][0, 0] == 1.5
    assert data["color"] == [viz.DIFF_PALETTE[-2], viz.DIFF_PALETTE[1], viz.DIFF_PALETTE[-2], viz.DIFF_PALETTE[-2]]
    assert (
        "1.500" in bars.title.text
        and "query 0 (▁a) · key 0 (x)" in layout.select_one({"name": "dot-vectors"}).title.text
    )
    assert (
        "key 1 (2)"
        in viz.dot_product_figure(parts, -1, -2, ["▁a", "b"], ["x", "<0x32>", "</s>"])
        .select_one({"name": "dot-vectors"})
        .title.text
    )  # a negative index from the last; a byte piece named by its character
    for query, key, said in ((2, 0, "query 2 is not in this 2×3 map"), (0, 3, "key 3 is not"), (0, True, "key True")):
        with pytest.raises(AttnlabError, match=re.escape(said)):
            viz.dot_product_figure(parts, query, key, ["▁a", "b"], ["x", "y", "z"])
    with pytest.raises(AttnlabError, match="reads the q, k and scores"):
        viz.dot_product_figure({"scores": parts["scores"]}, 0, 0, ["▁a", "b"], ["x", "y", "z"])


def test_a_name_of_the_wrong_kind_or_a_map_that_is_not_a_matrix_is_one_line(trace: AttentionTrace) -> None:
    """`heatmap(name=5)` failed in bokeh's validation and `name=0` became the default name without
    a word; a 1-D matrix failed unpacking its shape ("not enough values to unpack")."""
    weights, labels = trace.attention("cross", 0)[0], trace.labels("cross")
    for view in (
        lambda: viz.heatmap(trace, "cross", 0, 0, name=5),
        lambda: viz.heatmap(trace, "cross", 0, 0, name=0),
        lambda: viz.matrix_figure(weights, *labels, name=5),
    ):
        with pytest.raises(AttnlabError, match=r"^name must be a string \(or None\), got [05] \(int\)$"):
            view()
    assert viz.heatmap(trace, "cross", 0, 0, name="mine").name == "mine"
    with pytest.raises(AttnlabError, match=re.escape("a map is a (queries, keys) matrix, got one of shape (3,)")):
        viz.matrix_figure(np.ones(3), ["a"], ["b", "c", "d"])


def test_a_title_or_budget_of_the_wrong_kind_is_one_line_in_every_view(trace: AttentionTrace) -> None:
    """`title=123` was a TypeError from measuring it (an AttributeError in the profile grid, a
    bokeh validation error in the tree, and `standalone_html` wrote `<title>123</title>`);
    `budget="500"` a TypeError from dividing by it; `budget=0` or -5 was clamped without a word.
    Every public view that takes `title=` or `budget=` is here (found by its signature)."""
    import inspect

    q, k = trace.attention("cross", 0).shape[1:]
    labels = trace.labels("cross")
    weights = trace.attention("cross", 0)[0]
    parts = {"scores": weights, "allowed": np.ones((q, k), bool), "weights": weights, "v": np.ones((k, 2)),
             "out": np.ones((q, 2))}  # fmt: skip
    lens = Lens(
        ["<s>", "a"], ["a", "</s>"], [[["a"], ["</s>"]]], np.ones((1, 2, 1)), np.ones((1, 2)), np.zeros((1, 2), int)
    )
    heads, two = np.ones((1, 2, 2)), np.ones(2)
    patched = HeadPatching(np.ones((3, 2, 2)), np.ones((3, 2, 2)), 0.0, -1.0, "denoise", [0], ("decoder", "cross"))
    attribution = LogitAttribution(
        ["<s>", "a"], ["a", "</s>"], ["x", "</s>"], "mean", ["", ""], heads, heads, np.ones((1, 2)), two, two, two,
        np.ones((1, 2, 2, 2)), two,
    )  # fmt: skip
    views = {
        "heatmap": lambda **o: viz.heatmap(trace, "cross", 0, 0, **o),
        "update_heatmap": lambda **o: viz.update_heatmap(viz.heatmap(trace, "cross", 0, 0), trace, "cross", 0, 0, **o),
        "lines_figure": lambda **o: viz.lines_figure(trace, "cross", 0, 0, **o),
        "update_lines": lambda **o: viz.update_lines(viz.lines_figure(trace, "cross", 0, 0), trace, "cross", 0, 0, **o),
        "matrix_figure": lambda **o: viz.matrix_figure(weights, *labels, **o),
        "update_matrix": lambda **o: viz.update_matrix(viz.matrix_figure(weights, *labels), weights, *labels, **o),
        "mask_figure": lambda **o: viz.mask_figure(trace, "decoder", **o),
        "computation_figure": lambda **o: viz.computation_figure(parts, 0, *labels, **o),
        "dot_product_figure": lambda **o: viz.dot_product_figure(
            {**parts, "q": np.ones((len(labels[0]), 4)), "k": np.ones((len(labels[1]), 4))}, 0, 0, *labels, **o
        ),
        "compare_figures": lambda **o: viz.compare_figures(trace, trace, "cross", 0, 0, **o),
        "compare_rollouts": lambda **o: viz.compare_rollouts(trace, trace, "cross", 0, **o),
        "diff_figure": lambda **o: viz.diff_figure(trace, trace, "cross", 0, 0, **o),
        "profile_grid": lambda **o: viz.profile_grid([0, 1], np.zeros((2, 3)), **o),
        "standalone_html": lambda **o: viz.standalone_html(viz.heatmap(trace, "cross", 0, 0), **o),
        "tree_figure": lambda **o: viz.tree_figure("(S (NP (XX The) (XX dog)))", **o),
        "rollout_figure": lambda **o: viz.rollout_figure(trace, "cross", **o),
        "lens_figure": lambda **o: viz.lens_figure(lens, **o),
        "logit_attribution_figure": lambda **o: viz.logit_attribution_figure(attribution, 0, **o),
        "logit_source_figure": lambda **o: viz.logit_source_figure(attribution, 0, **o),
        "importance_figure": lambda **o: viz.importance_figure(HeadImportance(np.ones((3, 2, 2)), None, 1, 1), **o),
        "patching_figure": lambda **o: viz.patching_figure(patched, **o),
        "path_patching_figure": lambda **o: viz.path_patching_figure(PathPatching(patched, patched), **o),
        "circuit_figure": lambda **o: viz.circuit_figure(Circuit([], [], patched, patched, 0.05), **o),
        "residual_patching_figure": lambda **o: viz.residual_patching_figure(
            ResidualPatching(np.ones((3, 2)), np.ones((2, 2)), 0.0, -1.0, "noise", [0]), side="decoder", **o
        ),
        "saliency_figure": lambda **o: viz.saliency_figure(
            Saliency(["x", "</s>"], ["<s>", "a"], ["a", "</s>"], np.ones((2, 2)), np.tril(np.ones((2, 2))), 0), **o
        ),
    }
    takes = {
        name: {"title", "budget"} & set(inspect.signature(getattr(viz, name)).parameters)
        for name in viz.__all__
        if callable(getattr(viz, name)) and not isinstance(getattr(viz, name), type)
    }
    assert {name for name, options in takes.items() if options} == set(views), "a view is missing here"
    for name, view in views.items():
        refused = {"title": (123, b"title", ["a"])} if "title" in takes[name] else {}
        if "budget" in takes[name]:
            refused["budget"] = ("500", 0, -5, 2.5, True, None)
        for option, values in refused.items():
            for value in values:
                with pytest.raises(
                    AttnlabError, match=rf"^{option} .*must be .*, got {re.escape(repr(value))}"
                ) as error:
                    view(**{option: value})
                assert "\n" not in str(error.value), (name, option, value)
        for option, value in (("title", "a title"), ("title", None), ("budget", np.int64(300))):
            if option in takes[name]:
                assert view(**{option: value}) is not None, (name, option, value)  # what is right still draws
    untitled = set()  # every colour bar says what its colours measure (the grids of patching and importance did not)
    for name, view in views.items():
        made = view() if name != "standalone_html" else []
        for part in made if isinstance(made, list) else [made]:
            if any(not bar.title for bar in part.select({"type": ColorBar}) if bar.visible):
                untitled.add(name)
    assert not untitled, untitled


def test_views_refuse_what_is_not_a_trace_in_one_line(trace: AttentionTrace) -> None:
    """A Result (or None, the .trace of one made without record=True) where a trace belongs was
    an AttributeError from deep inside every view."""
    said = "the trace is a str, not an AttentionTrace (a Result holds one in .trace when made with record=True)"
    views = {
        "heatmap": lambda t: viz.heatmap(t, "cross", 0, 0),
        "png": lambda t: viz.heatmap_png(t, "cross", 0, 0),
        "svg": lambda t: viz.heatmap_svg(t, "cross", 0, 0),
        "grid": lambda t: viz.grid(t, "cross"),
        "mask": lambda t: viz.mask_figure(t, "cross"),
        "rollout": lambda t: viz.rollout_figure(t, "cross"),
        "summary": viz.summary_div,
    }
    for name, view in views.items():
        with pytest.raises(AttnlabError) as refused:
            view("a trace")
        assert str(refused.value) == said, name
        view(trace)  # and a trace is drawn
    with pytest.raises(AttnlabError, match="^the second trace is a NoneType, not an AttentionTrace"):
        viz.compare_figures(trace, None, "cross", 0, 0)
    with pytest.raises(AttnlabError, match="^a tree is drawn from its bracketed text, got NoneType"):
        viz.tree_figure(None)
    with pytest.raises(AttnlabError, match="^word_diff compares two texts, got NoneType and str"):
        viz.word_diff(None, "a")
    with pytest.raises(
        AttnlabError, match=r"^stats_source takes head_stats\(trace\) rows \(dicts\), got AttentionTrace"
    ):
        viz.stats_source([trace])


def test_a_stats_view_of_a_column_or_source_it_lacks_is_one_line(trace: AttentionTrace) -> None:
    """`stats_scatter(source, "diagonal")` (a head_stats column the source does not carry) or a
    typo drew an empty plot without a word; head_stats rows in place of the source, or a table
    `height="320"`, were bokeh's errors; `height=0` an empty table."""
    rows = head_stats(trace)
    source = viz.stats_source(rows)
    for x, y, said in (
        ("diagonal", "distance", "x='diagonal' is not a column of the source; choose from layer, head, entropy"),
        ("entropy", "entorpy", "y='entorpy' is not a column"),
        ("entropy", "kind", "y='kind' is not a column"),  # text: nothing to place on an axis
        (None, "max", "x=None is not a column"),
    ):
        with pytest.raises(AttnlabError, match=re.escape(f"stats_scatter: {said}")) as refused:
            viz.stats_scatter(source, x, y)
        assert "\n" not in str(refused.value)
    assert viz.stats_scatter(source, "layer", "max").xaxis[0].axis_label == "layer"
    for view in (viz.stats_scatter, viz.stats_table):
        with pytest.raises(AttnlabError, match=rf"^{view.__name__} takes stats_source\(head_stats\(...\)\), got list$"):
            view(rows)
    for height in ("320", 0, -5, 2.5, True):
        with pytest.raises(AttnlabError, match=r"^stats_table: height \(pixels\) must be a whole number > 0"):
            viz.stats_table(source, height=height)
    assert viz.stats_table(source, height=np.int64(200)).height == 200


def test_stats_source_of_what_is_not_head_stats_rows_is_one_line(trace: AttentionTrace) -> None:
    """`stats_source([{"a": 1}])` was a KeyError 'kind', `stats_source(None)` a TypeError."""
    row = head_stats(trace)[0]
    for rows, said in (
        (None, "the list head_stats(trace) returns, got NoneType"),
        ("rows", "the list head_stats(trace) returns, got str"),
        ([{"a": 1}], "head_stats(trace) rows: row 1 lacks kind, layer, head, entropy"),
        ([row, {**row, "kind": "self"}], "head_stats(trace) rows: row 2 has kind 'self', not one of encoder, decoder"),
    ):
        with pytest.raises(AttnlabError, match="^" + re.escape(f"stats_source takes {said}")) as refused:
            viz.stats_source(rows)
        assert "\n" not in str(refused.value)
    assert viz.stats_source((row,)).data["kind"] == [row["kind"]]


def test_a_difference_of_two_sentence_pairs_is_one_line(trace: AttentionTrace) -> None:
    """`diff_figure` checked shapes only: "Two dogs play." minus "A dog runs." (five pieces
    each) was drawn as a difference map, under the first one's labels, without a word."""
    src = trace.src_tokens
    other = replace(trace, src_tokens=[*src[:3], "▁other", *src[4:]])  # one piece of the source
    for kind, said in (
        ("encoder", "query 3: '▁w0' vs '▁other'"),
        ("cross", "key 3: '▁w0' vs '▁other'"),
    ):
        with pytest.raises(
            AttnlabError, match=f"^the traces read other pieces \\({said}\\): not the same sentence pair$"
        ):
            viz.diff_figure(trace, other, kind, 0, 0)
    assert viz.diff_figure(trace, other, "decoder", 0, 0).name == "timeline-diff"  # the target's maps are alike
    longer = synthetic_trace(n_src=8)
    with pytest.raises(AttnlabError, match=r"\(query 6: '</s>' vs '▁w3'\): not the same sentence pair"):
        viz.diff_figure(trace, longer, "encoder", 0, 0)


def test_standalone_html_needs_no_network(trace: AttentionTrace) -> None:
    import panel as pn
    from bokeh.layouts import column

    pn.extension()  # as in the explorer: bokeh's bundle then links Panel's extension files (static/extensions/...)
    page = viz.standalone_html(column(viz.summary_div(trace), viz.heatmap(trace, "cross", 0, 0)), title="t")
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page)  # nothing linked: a file on a disk reaches none
    assert "Bokeh" in page and len(page) > 500_000  # bokeh's JavaScript is inlined
    assert "&lt;b&gt;" in page  # the source text is escaped


def test_a_summary_names_the_checkpoint_not_the_exporters_directories(trace: AttentionTrace) -> None:
    """A page exported from a notebook showed the checkpoint's absolute path: the directory's
    name is enough to tell the model, and shared pages showed where the exporter keeps files."""
    shared = replace(trace, model={**trace.model, "checkpoint": "/home/alice/models/tatoeba-en-zh"})
    shown = viz.summary_div(shared).text
    assert "<small>tatoeba-en-zh · " in shown and "alice" not in shown
    for given, label in (("~/models/de", "de"), ("../../x/de", "de"), ("classroom/de", "classroom/de"), ("", "")):
        assert viz.export.checkpoint_label(given) == label


def test_standalone_html_where_the_current_document_was_destroyed(trace: AttentionTrace) -> None:
    """In a served explorer, once a session had closed, bokeh's current document could be that
    session's destroyed one, and the "HTML page" export was an AttributeError
    ('DocumentCallbackManager' object has no attribute '_js_event_callbacks')."""
    from bokeh.document import Document
    from bokeh.io.doc import curdoc, set_curdoc

    before, dead = curdoc(), Document()
    dead.callbacks.destroy()  # (what a closed session's document is left with)
    set_curdoc(dead)
    try:
        assert "<html" in viz.standalone_html(viz.heatmap(trace, "cross", 0, 0))
    finally:
        set_curdoc(before)


def test_standalone_html_of_what_is_not_a_figure_is_one_line(trace: AttentionTrace) -> None:
    """A list of figures, a trace or None was an AttributeError ('references') from `use_fonts`."""
    for layout in ([viz.heatmap(trace, "cross", 0, 0)], trace, None):
        with pytest.raises(AttnlabError, match=r"^standalone_html takes a figure of attnlab.viz or a bokeh layout"):
            viz.standalone_html(layout)


def test_standalone_html_names_its_language(trace: AttentionTrace) -> None:
    """The Chinese explorer's "HTML page" said `<html lang="en">` (bokeh's), by which a browser
    picks a Japanese-shaped font for Han characters; a tag that is not one is one line."""
    figure = viz.heatmap(trace, "cross", 0, 0)
    assert '<html lang="en">' in viz.standalone_html(figure)
    page = viz.standalone_html(figure, lang="zh")
    assert '<html lang="zh">' in page and 'lang="en"' not in page
    for bad in ("", "zh'><script>", None, "chinese-simplified-x"):
        with pytest.raises(AttnlabError, match="^lang is a language tag"):
            viz.standalone_html(figure, lang=bad)


# -- the explorer's model side ------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["translate", "restricted"])
def test_attention_parts_reproduce_the_recorded_weights(checkpoints: dict[str, Path], which: str) -> None:
    """Also for restricted self-attention (r = 3), whose band the layer adds inside itself: the
    step-by-step view once showed global weights there, up to 0.98 from the model's."""
    from attnlab.app.checkpoints import open_model
    from attnlab.record.equation import attention_parts

    restricted = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de-r3"
    if which == "restricted" and not (restricted / "manifest.json").is_file():
        pytest.skip("no bundled restricted translator")
    model = open_model(checkpoints[which] if which == "translate" else restricted)
    trace = model.translate("A dog runs in the park near the old red house .", beam=2, record=True).trace
    if which == "restricted":  # or the test shows nothing
        assert not trace.mask("encoder")[0].all() and len(trace.src_tokens) > 2 * 3 + 2
    for kind in trace.kinds:
        for layer in trace.layers[kind]:
            for head in (0, trace.n_heads - 1):
                parts = attention_parts(model, trace, kind, layer, head)
                np.testing.assert_allclose(parts["weights"], trace.attention(kind, layer)[head], atol=1e-5)
                np.testing.assert_allclose(parts["out"], parts["weights"] @ parts["v"], atol=1e-5)
                d_k = parts["q"].shape[1]
                np.testing.assert_allclose(
                    parts["scores"], parts["q"] @ parts["k"].T / np.sqrt(d_k), rtol=1e-4, atol=1e-4
                )
    causal = attention_parts(model, trace, "decoder", 0, 0)
    assert np.isneginf(causal["masked"][~causal["allowed"]]).all()
    np.testing.assert_array_equal(causal["allowed"], trace.mask("decoder"))  # the band too, for r = 3
    if which == "translate":
        np.testing.assert_array_equal(causal["allowed"], np.tril(np.ones_like(causal["allowed"])))
    with pytest.raises(AttnlabError, match="head 9 does not exist"):
        attention_parts(model, trace, "cross", 0, 9)


def test_ablation_changes_the_log_probability(model: object) -> None:
    from attnlab.decode.ablation import ablation, token_logprobs
    from attnlab.record.equation import trace_ids

    result = model.translate("The girl plays with the dog .", beam=1, record=True)
    src, produced = trace_ids(model, result.trace)
    assert sum(token_logprobs(model, src, produced)) == pytest.approx(result.logprob, abs=1e-3)
    heads = {("cross", layer): list(range(model.config.n_heads)) for layer in range(model.config.n_layers)}
    effect = ablation(model, result.trace, heads, beam=1)
    assert effect.original_tokens == result.tokens
    assert effect.logprob_change != pytest.approx(0.0, abs=1e-4)
    # with every cross-attention head off the decoder cannot see the source: any source gives the same
    # output (up to the length limit, which follows the source's length)
    other = ablation(model, model.translate("A boy jumps .", beam=1, record=True).trace, heads, beam=1)
    shorter = min(len(other.tokens), len(effect.tokens)) - 1
    assert other.tokens[:shorter] == effect.tokens[:shorter] and shorter > 3


def test_unknown_characters_and_probe_snapshots(model: object, tmp_path: Path) -> None:
    from attnlab.app.checkpoints import find_checkpoints, probe_snapshots
    from attnlab.data.tokenizer import unknown_characters

    assert unknown_characters(model.tokenizer, "the dog ☃ 漢") == ["☃", "漢"]
    assert unknown_characters(model.tokenizer, "the dog") == []
    run = tmp_path / "run"
    for step in (20, 10, 30):
        for k in (1, 0, 10):
            path = run / "probes" / f"step_{step}" / f"probe_{k}.trace"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
    (run / "checkpoints" / "step_30").mkdir(parents=True)
    for where in (run, run / "checkpoints" / "step_30"):
        found = probe_snapshots(where)
        assert [step for step, _ in found] == [10, 20, 30]
        assert [p.name for p in found[0][1]] == ["probe_0.trace", "probe_1.trace", "probe_10.trace"]
    assert probe_snapshots(tmp_path) == []
    listed = find_checkpoints([run, tmp_path / "x" / "run"], bundled=tmp_path / "none")
    assert list(listed.values()) == [str(run), str(tmp_path / "x" / "run")]  # same name twice: both kept


def test_explore_command(checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from attnlab.cli import main

    assert main(["explore", "--checkpoint", str(checkpoints["translate"]), "--port", "5999", "--dry-run"]) == 0
    command = capsys.readouterr().out
    assert "panel serve" in command and "apps/explorer.py" in command and "--port 5999" in command
    assert f"--args --threads 1 --checkpoint {checkpoints['translate']}" in command
    assert main(["explore", "--checkpoint", "/no/such/dir", "--dry-run"]) == 2
    assert "no such directory" in capsys.readouterr().err
    weights = checkpoints["translate"] / "model.safetensors"  # a file was listed as a checkpoint
    assert main(["explore", "--checkpoint", str(weights), "--dry-run"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"{weights} is a file; --checkpoint names a checkpoint or run directory")
    )


# -- the app, driven from Python ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def explorer_module() -> object:
    spec = importlib.util.spec_from_file_location("attnlab_explorer_app", ROOT / "apps" / "explorer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_app_store_and_views(explorer_module: object, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    first = explorer_module.app(
        ["--checkpoint", str(checkpoints["translate"]), "--checkpoint", str(checkpoints["parse"])]
    )
    second = explorer_module.app(["--checkpoint", str(checkpoints["translate"]), "--time-limit", "7.5"])
    assert (first.store.time_limit, second.store.time_limit) == (TIME_LIMIT, 7.5)  # `attnlab explore --time-limit`
    assert first.store is not second.store and first.store.model is second.store.model  # sessions share the model only
    assert first.store.run == 1 and first.heads.heatmap.object is not None and first.heads.grid.object is not None
    second.mode.value = "greedy"
    second.translate()
    assert "1 finished hypothesis (greedy)" in second.output.text.object  # not "1 finished hypotheses"
    assert second.store.greedy and second.beam_input.disabled and second.alpha_input.disabled
    first.text_input.value = "The dog runs ."
    first.translate()
    assert first.store.run == 2 and second.store.run == 2
    assert first.store.trace.meta["text"] == "The dog runs ." != second.store.trace.meta["text"]
    first.store.select("decoder", 1, 3)
    assert first.heads.heatmap.object.name == "heatmap-decoder" and "layer 1 · head 3" in first.heads.caption.object
    first.heads.picked(0, 2)  # a click on the grid
    assert (first.store.layer, first.store.head) == (0, 2)
    first.tabs.active = 1
    assert first.equation.eq1.object is not None and first.equation.mask.object.name == "mask-decoder"
    first.tabs.active = 2
    assert len(first.dashboard.figures.objects) == 2
    first.reference_input.value = "Der Hund läuft ."
    first.translate()
    assert first.store.scored is not None and first.store.trace.meta.get("teacher_forced")
    assert "Reference" in first.output.text.object
    saved = tmp_path / "from-app.trace"
    saved.write_bytes(first.export.trace_file().getvalue())
    trace = AttentionTrace.load(saved)
    assert trace.meta["output"] == "Der Hund läuft ."
    assert first.export.png().getvalue()[:4] == b"\x89PNG" and first.export.svg().getvalue().startswith("<svg")
    page = first.export.html().getvalue()
    assert "<script" in page and json.dumps(f"{first.store.open_head} · query")[1:-1] in page  # Eq. (1) named none
    assert "click one" not in page  # a click opens nothing in a file
    assert "On this sentence, this head " in page and '"name":"dot-products"' in page.replace(" ", "")  # as the tabs
    first.ablation.choice.value = ["cross L0 H0", "cross L1 H1"]
    first.ablation.ablate()
    assert "log P(reference)" in first.ablation.effect.objects[0].object  # the open trace is the reference's
    first.checkpoint_select.value = checkpoints["parse"].name
    assert first.store.model.task == "parse" and first.go.label == "Parse" and first.output.tree_box.visible


def test_app_bad_input_keeps_going(explorer_module: object, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    app = explorer_module.app(["--checkpoint", str(checkpoints["translate"])])
    run = app.store.run
    for text in ("", "  \n\t"):
        app.text_input.value = app.text_input.value_input = text
        app.translate()
        assert app.error.visible and "empty" in app.error.object and app.store.run == run
    app.text_input.value = app.text_input.value_input = "dog " * 2500
    app.translate()
    assert not app.error.visible and "truncated" in app.notice.object and app.store.result.truncated
    assert len(app.store.trace.src_tokens) == 96  # max_len 96: 95 pieces + </s>
    app.text_input.value = app.text_input.value_input = "the ☃ dog"
    app.translate()
    assert "☃" in app.notice.object and not app.error.visible
    not_a_checkpoint = tmp_path / "empty"
    not_a_checkpoint.mkdir()
    model = app.store.model
    app.checkpoints["empty"] = str(not_a_checkpoint)
    app.checkpoint_select.options = list(app.checkpoints)
    app.checkpoint_select.value = "empty"
    assert "not an attnlab checkpoint" in app.error.object and app.store.model is model
    assert app.checkpoint_select.value == "tiny-translate"  # the picker shows what is really loaded
    app.open("/no/such/dir")
    assert "no such directory" in app.error.object
    app.text_input.value = app.text_input.value_input = "the dog"
    app.translate()
    assert not app.error.visible and app.store.run > run


@pytest.mark.skipif(not (BUNDLED / "manifest.json").is_file(), reason="the bundled checkpoint is not there yet")
def test_bundled_model_explains_itself(explorer_module: object) -> None:
    app = explorer_module.app(["--checkpoint", str(BUNDLED)])
    app.text_input.value = app.text_input.value_input = "A man in a blue shirt is riding a bike."
    app.translate()
    assert app.store.result.text and not app.error.visible
    cross = app.store.trace.attention("cross", -1)
    assert np.allclose(cross.sum(-1), 1.0, atol=1e-4)
    print(json.dumps(app.store.timing))


def _bold_title_px(title: str) -> float:
    """The title's width as bokeh draws it (bold 13 px), measured in DejaVu Sans Bold where the
    system has it, else estimated at 7.5 px a column."""
    from PIL import ImageFont

    from attnlab.viz.labels import display_width

    try:
        return ImageFont.truetype("DejaVuSans-Bold.ttf", 13).getlength(title)
    except OSError:
        return 7.5 * display_width(title)


@pytest.mark.parametrize("lang", ["en", "es", "zh"])
def test_a_short_sentence_figure_is_as_wide_as_its_title(lang: str) -> None:
    """A 2×4 cross-attention map ("Hi." and its translation) was narrower than its title, so
    bokeh cut "· head 3" (246 px for a 325 px title; in Spanish 395 px)."""
    from attnlab.app.words import figure_words
    from attnlab.viz.axes import label_room

    short = synthetic_trace(n_src=4, n_tgt=2)
    fig = viz.heatmap(short, "cross", 1, 2, words=figure_words(lang))
    room = label_room(short.src_tokens + short.tgt_tokens) + 16  # the query labels left of the title
    assert fig.width - room >= _bold_title_px(fig.title.text), (fig.width, fig.title.text)
    long = synthetic_trace(n_src=20, n_tgt=18)  # a normal sentence keeps its size
    assert (
        viz.heatmap(long, "cross", 1, 2).width == int(20 * 28) + label_room(long.src_tokens + long.tgt_tokens) + 16 + 90
    )


def test_a_chinese_title_never_ends_a_line_on_an_opening_bracket_nor_leaves_a_character_alone() -> None:
    """Chinese wraps between characters: "按原文片段分（" ended a line, its "合计 +8.9）" on the next,
    and "…放进改动句的运" one whose next held "行" alone."""
    from attnlab.viz.labels import wrap_title

    title = "编码器–解码器注意力头直接读入的内容按原文片段分（合计很多）以及更多的文字内容"
    for pixels in range(100, 500, 2):
        lines = wrap_title(title, pixels).split("\n")
        assert "".join(lines) == title and not any(line.endswith("（") for line in lines), (pixels, lines)
        assert len(lines) == 1 or len(lines[-1]) > 1, (pixels, lines)  # "…的运" / "行": no character alone


@pytest.mark.parametrize("lang", ["en", "es", "zh"])
def test_grid_titles_wrap_inside_their_figure(lang: str) -> None:
    """A model of four heads had its layers × heads grid and its corpus grids cut mid-title at the
    canvas's edge ("… (click one to open i"), and the training timeline its AER curve's; a title
    now wraps onto lines that fit, and the figure grows by the lines it adds."""
    from attnlab.app.i18n import kind_title, text
    from attnlab.app.words import figure_words
    from attnlab.viz.axes import label_room

    said = figure_words(lang)
    room = label_room([said["grid.layer"].format(layer=layer) for layer in range(3)]) + 20  # the layers' names
    four, eight = synthetic_trace(n_layers=3, n_heads=4), synthetic_trace(n_layers=3, n_heads=8)
    wanted = {kind: said["grid.title"].format(kind_title=kind_title(kind, lang)) for kind in ("encoder", "cross")}
    figures = {kind: viz.grid(four, kind, words=said) for kind in wanted}
    wanted["corpus"] = text("corpus.grid_title", lang, kind=kind_title("decoder", lang), stat="eos")
    figures["corpus"] = viz.profile_grid([0, 1, 2], np.zeros((3, 4)), title=wanted["corpus"], words=said)
    stat = "AER % on enfr (cross layer 1)"  # the training timeline's longest statistic
    wanted["timeline"] = said["timeline.title"].format(stat=stat)
    figures["timeline"] = viz.timeline_curve([100, 200], {"head 0": [1.0, 2.0]}, stat=stat, words=said)
    for name, fig in figures.items():
        lines = fig.title.text.split("\n")
        assert "".join(lines).replace(" ", "") == wanted[name].replace(" ", "")
        for line in lines:
            assert _bold_title_px(line) <= fig.width - room, (name, fig.width, line)
    wrapped = figures["cross"]
    assert "\n" in wrapped.title.text or lang == "zh"  # "编码器–解码器注意力：层 × 头（点击任意一个即可打开）" fits
    wide = viz.grid(eight, "cross", words=said)
    assert "\n" not in wide.title.text  # eight heads give the title room
    lines_added = wrapped.title.text.count("\n")
    assert wrapped.height == viz.grid(four, "cross", words=said).height == wide.height + 17 * lines_added


def test_png_and_svg_of_a_short_sentence_hold_title_and_colour_bar() -> None:
    """The exports of a short sentence cut the title and ran the 200 px colour bar past the
    image's bottom, its "0.00" label never drawn."""
    from PIL import Image as PILImage

    from attnlab.viz.fonts import png_fonts, text_length
    from attnlab.viz.head import head_title

    short = synthetic_trace(n_src=4, n_tgt=2)
    title = head_title(short, "cross", 1, 2)
    need = 6 + text_length(title, png_fonts(14))
    image = np.asarray(PILImage.open(io.BytesIO(viz.heatmap_png(short, "cross", 1, 2))).convert("L"))
    height, width = image.shape
    assert width >= need, (width, need)
    assert (image[-1] == 255).all()  # nothing runs off the bottom
    assert (image[-30:] < 100).any()  # the "0.00" label beside the bar's lower end: nothing else is there
    svg = viz.heatmap_svg(short, "cross", 1, 2)
    root = ET.fromstring(svg)
    svg_w, svg_h = float(root.get("width")), float(root.get("height"))
    bar = next(r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "url(#bar)")
    assert float(bar.get("y")) + float(bar.get("height")) + 4 <= svg_h  # "0.00" sits at the bar's end
    assert svg_w >= need, (svg_w, need)
    above = [
        t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text == "weight"
    ]  # the bar says what it shows
    assert len(above) == 1 and float(above[0].get("y")) < float(bar.get("y"))
    summary = viz.summary_div(synthetic_trace(n_src=45, n_tgt=2))  # (45 pieces were one line of 1,586 px)
    assert summary.width == SUMMARY_PX and summary.styles["overflow-wrap"] == "anywhere"


def test_the_figures_chinese_titles_are_spaced_as_the_pages_words(trace: AttentionTrace) -> None:
    """The figures fill their templates themselves (`attnlab.viz`), outside `text`: the heads'
    scatter was titled "注意力头：熵 与 距离"; its Chinese templates are `viz.words.Spaced` too."""
    from attnlab.app.words import figure_words

    source = viz.stats_source(head_stats(trace))
    title = viz.stats_scatter(source, "entropy", "distance", words=figure_words("zh")).title.text
    assert " ".join(title.split()) == "注意力头：熵与距离", title
    assert viz.stats_scatter(source, "entropy", "distance").title.text == "heads: entropy vs distance"


@pytest.mark.parametrize("lang", ["en", "es"])
def test_the_timeline_difference_and_the_rollout_wrap_their_titles_to_their_cells(
    trace: AttentionTrace, lang: str
) -> None:
    """On one line the difference's own title set its width: 692 px in English, 780 in Spanish
    for a map of three keys, past a 1024 px window beside the inputs and twice the step's map."""
    from attnlab.app.words import figure_words
    from attnlab.viz.axes import label_room
    from attnlab.viz.cells import TITLE_MIN_PX

    diff = viz.diff_figure(trace, trace, "cross", 1, 2, budget=380, words=figure_words(lang))
    assert "\n" in diff.title.text and diff.width <= TITLE_MIN_PX + 90, (diff.width, diff.title.text)
    # and the rollout's (in Spanish it stretched a 16-key map's cells: a 1024 px window hid two keys)
    wide = synthetic_trace(n_src=16, n_tgt=8)
    flow = viz.rollout_figure(wide, "cross", words=figure_words(lang))
    room = label_room(wide.src_tokens + wide.tgt_tokens) + 16
    assert flow.width == 16 * 28 + 90 + room, (flow.width, flow.title.text)


def test_a_profile_grid_has_a_colour_bar_and_takes_a_shared_scale() -> None:
    """Grids drawn together take one scale (`limits`), said by a colour bar; a scale that is not
    two ordered finite numbers is one line."""
    values = np.array([[0.2, 0.4], [0.6, np.nan]])
    own = viz.profile_grid([0, 1], values).select_one(LinearColorMapper)
    assert (own.low, own.high) == (0.2, 0.6)
    shared = viz.shared_limits([values, np.array([[1.5, np.nan]])])
    fig = viz.profile_grid([0, 1], values, limits=shared)
    assert (fig.select_one(LinearColorMapper).low, fig.select_one(LinearColorMapper).high) == (0.2, 1.5)
    assert fig.select_one(ColorBar).color_mapper is fig.select_one(LinearColorMapper)
    for bad in [(1.0, 0.0), (0.0, float("nan")), (0.0,), "01"]:
        with pytest.raises(AttnlabError, match=r"^limits is \(low, high\)"):
            viz.profile_grid([0, 1], values, limits=bad)
