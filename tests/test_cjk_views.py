"""Views of traces in Chinese, accented, right-to-left and combining-character text.

The not-tofu checks rest on one fact: a font draws every character it lacks as the same box
(.notdef, "tofu"). So glyphs are real exactly when different characters give different pixels,
and pixels unlike those of U+10FFFD, which no font has. The PNG export and, in Chromium (Debian's
/usr/bin/chromium and fonts-noto-cjk, `make browser`), a saved heatmap page are checked that way:
two traces that differ only in which Chinese characters they hold must not look the same.
`test_the_tofu_check_fails_with_a_font_without_cjk` runs the PNG check with the CJK fonts taken
away and sees it fail, so the check is known to bite.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from bokeh.models import HoverTool, LayoutDOM, Plot
from browser import launched_chromium
from PIL import Image, ImageDraw

from attnlab import viz
from attnlab.record.residual import ResidualPatching
from attnlab.record.stats import head_stats
from attnlab.record.trace import AttentionTrace
from attnlab.viz import fonts
from attnlab.viz.fonts import FONT_STACK, MISSING
from attnlab.viz.labels import (
    DOTTED_CIRCLE,
    ELLIPSIS,
    FSI,
    PDI,
    clusters,
    display_width,
    piece_label,
    short_label,
    spelled,
)

LONG = "▁这是一个非常非常长的中文词片段"  # 16 characters, 31 columns: cut on every axis
SRC = ["▁中文", "▁注意力", "▁café", "▁naïve", "▁שלום", "▁مرحبا", "e\u0301", "\u0301", LONG, "</s>"]
TGT = ["▁机器", "▁翻译", "▁Ünïcödé", "</s>"]
SVG = "{http://www.w3.org/2000/svg}"


def cjk_trace(src: list[str] = SRC, tgt: list[str] = TGT, n_layers: int = 2, n_heads: int = 2) -> AttentionTrace:
    """Random row-stochastic maps (the same for the same sizes) over the given pieces."""
    rng = np.random.default_rng(0)

    def maps(q: int, k: int, causal: bool) -> list[np.ndarray]:
        logits = rng.normal(size=(n_layers, n_heads, q, k)) * 2
        if causal:
            logits = np.where(np.tril(np.ones((q, k), bool)), logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        return list((weights / weights.sum(-1, keepdims=True)).astype(np.float32))

    n_src, n_tgt = len(src), len(tgt)
    return AttentionTrace(
        src_tokens=list(src),
        tgt_tokens=list(tgt),
        maps={
            "encoder": maps(n_src, n_src, False),
            "decoder": maps(n_tgt, n_tgt, True),
            "cross": maps(n_tgt, n_src, False),
        },
        masks={"decoder": np.tril(np.ones((n_tgt, n_tgt), bool))},
        model={"config": {"n_layers": n_layers}, "weights_sha256": "0" * 16, "checkpoint": "synthetic"},
        meta={"text": "".join(src).replace("▁", " "), "output": "".join(tgt).replace("▁", " ")},
    )


def swapped(pieces: list[str], mapping: dict[str, str]) -> list[str]:
    return ["".join(mapping.get(c, c) for c in p) for p in pieces]


# Two traces that differ only in their Chinese characters (same count, same widths), and one with
# a missing glyph in their place: drawn as tofu, all three would look the same.
OTHER_CJK = dict(zip("中文注意力机器翻译", "文中意注器力译机翻", strict=True))
TOFU = {c: MISSING for c in "中文注意力机器翻译"}


# -- text: widths, cuts, direction ------------------------------------------------------------------
def test_display_width_counts_cjk_as_two_and_marks_as_zero() -> None:
    assert display_width("中文") == 4 and display_width("café") == 4 and display_width("cafe\u0301") == 4
    assert display_width("𠮷") == 2  # outside the BMP (a surrogate pair in JavaScript): one wide character
    assert display_width("שלום") == 4 and display_width("\u2068\u2069") == 0
    assert clusters("e\u0301\u0302x") == ["e\u0301\u0302", "x"]
    assert clusters("👩\u200d👩\u200d👧!") == ["👩\u200d👩\u200d👧", "!"]  # one family emoji
    assert clusters("🇨🇳🇫🇷") == ["🇨🇳", "🇫🇷"]  # two flags
    assert clusters("x\ud83d\ude00y") == ["x", "\ud83d\ude00", "y"]  # a surrogate pair stays whole
    assert clusters("\u1100\u1161\u11a8") == ["\u1100\u1161\u11a8"]  # conjoining jamo: one syllable


def test_long_pieces_are_cut_by_width_between_characters() -> None:
    cut = short_label(LONG)
    assert cut.endswith(ELLIPSIS) and display_width(cut) <= 14 and LONG.startswith(cut[:-1])
    assert short_label("▁中文") == "▁中文" and short_label("a" * 14) == "a" * 14
    accented = short_label("a" * 12 + "e\u0301\u0302" + "bb")  # a naive cut at 13 keeps e, drops its marks
    assert accented == "a" * 12 + "e\u0301\u0302" + ELLIPSIS
    surrogates = short_label("x" * 12 + "\ud83d\ude00" + "yy")  # a naive cut splits the pair
    assert surrogates == "x" * 12 + "\ud83d\ude00" + ELLIPSIS
    wide = short_label("中" * 8)  # 16 columns: 6 characters (12) and the ellipsis
    assert wide == "中" * 6 + ELLIPSIS


def test_right_to_left_pieces_are_isolated_and_lone_marks_get_a_base() -> None:
    assert piece_label("▁שלום") == FSI + "▁שלום" + PDI
    assert piece_label("▁مرحبا", isolate=False) == "▁مرحبا"
    long_hebrew = piece_label("שלום" * 5)  # the ellipsis is inside the isolate: it ends the RTL run
    assert long_hebrew.startswith(FSI) and long_hebrew.endswith(ELLIPSIS + PDI)
    assert piece_label("▁café") == "▁café" and piece_label("▁中文") == "▁中文"  # nothing added
    assert piece_label("\u0301") == DOTTED_CIRCLE + "\u0301"
    assert piece_label(LONG, None) == LONG  # tooltips show the whole piece
    assert piece_label("x\ud83d\ude00") == "x😀" and piece_label("x\ud83d") == "x\ufffd"  # valid UTF-8 on a page


# -- bokeh views ----------------------------------------------------------------------------------------
def every_view(trace: AttentionTrace) -> dict[str, object]:
    n = 4
    parts = {
        "scores": np.arange(n * n, dtype=float).reshape(n, n),
        "allowed": np.tril(np.ones((n, n), bool)),
        "weights": np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None],
        "v": np.ones((n, 3)),
        "out": np.ones((n, 3)),
    }
    source = viz.stats_source(head_stats(trace))
    return {
        "heatmap": viz.heatmap(trace, "cross", 0, 1),
        "grid": viz.grid(trace, "encoder"),
        "mask": viz.mask_figure(trace, "decoder"),
        "equation": viz.computation_figure(parts, 1, TGT, TGT),
        "stats-table": viz.stats_table(source),
        "stats-scatter": viz.stats_scatter(source),
        "timeline": viz.timeline_curve([1, 2], {"head 0": [1.0, 0.5]}, current=2),
        "diff": viz.diff_figure(trace, trace, "cross", 0, 0),
        "ablation": viz.token_delta_figure(TGT, [-1.0] * 4, [-2.0] * 4),
        "tree": viz.tree_figure("(S (NP (XX 中文)) (VP (XX שלום)) (XX café))"),
        "compare": viz.compare_figures(trace, cjk_trace(n_layers=1), "cross", 1, 0),  # a map and two notes
        "summary": viz.summary_div(trace),
    }


def test_every_view_writes_every_text_in_the_font_stack() -> None:
    assert '"Noto Sans CJK SC"' in FONT_STACK and FONT_STACK.endswith("sans-serif")
    for name, view in every_view(cjk_trace()).items():
        for root in view if isinstance(view, list) else [view]:
            texts = [(m, p) for m in root.references() for p in m.properties() if p.endswith("text_font")]
            for model, prop in texts:
                font = getattr(model, prop)
                font = font.value if hasattr(font, "value") else font  # a glyph's font is a value spec
                assert font == FONT_STACK, f"{name}: {type(model).__name__}.{prop} is {font!r}"
            doms = [m for m in root.references() if isinstance(m, LayoutDOM)]
            assert doms, name
            for dom in doms:  # tooltips, table cells and divs read bokeh's base font
                css = " ".join(s if isinstance(s, str) else getattr(s, "css", "") for s in dom.stylesheets)
                assert f"--bokeh-base-font: {FONT_STACK}" in css, f"{name}: {type(dom).__name__}"
            for plot in (m for m in root.references() if isinstance(m, Plot)):  # tooltips: a sheet in <head>
                assert any(getattr(s, "css", "") == fonts.TOOLTIP_CSS for s in plot.toolbar.stylesheets), name
        if name == "heatmap":
            assert texts and len({type(m).__name__ for m, _ in texts}) >= 3  # axes, title, colour bar


def test_heatmap_labels_are_cut_with_the_whole_piece_on_hover() -> None:
    trace = cjk_trace()
    fig = viz.heatmap(trace, "cross", 0, 0)
    shown = list(fig.xaxis[0].major_label_overrides.values())
    assert shown == [piece_label(s) for s in SRC]
    assert shown[0] == "▁中文" and shown[4] == FSI + "▁שלום" + PDI and shown[7] == DOTTED_CIRCLE + "\u0301"
    assert shown[8] == short_label(LONG) and display_width(shown[8]) <= 14
    hover = fig.select_one(HoverTool).formatters
    assert hover["$x"].args["labels"][8] == LONG  # the whole piece
    assert hover["$x"].args["labels"][4] == FSI + "▁שלום" + PDI  # " (4)" after it stays on its side
    assert "labels[i]" in hover["$x"].code
    rows = fig.yaxis[0].major_label_overrides
    assert sorted(rows.values()) == sorted(TGT)
    # Room for labels is counted in columns: a Chinese label widens the figure like two letters a character.
    narrow = viz.matrix_figure(np.zeros((2, 2)), ["ab", "cd"], ["ef", "gh"])
    wide = viz.matrix_figure(np.zeros((2, 2)), ["中文", "cd"], ["ef", "gh"])
    assert wide.width - narrow.width == 7 * 2
    ablation = viz.token_delta_figure([LONG, "▁שלום"], [-1.0, -2.0], [-1.5, -3.0])
    assert ablation.renderers[0].data_source.data["token"] == [LONG, FSI + "▁שלום" + PDI]
    assert list(ablation.xaxis[0].major_label_overrides.values()) == [short_label(LONG), FSI + "▁שלום" + PDI]


def test_byte_pieces_are_shown_as_the_characters_they_spell() -> None:
    """A character the vocabulary lacks is spelled as UTF-8 byte pieces (the EN→DE model spells
    digits): the axes read <0x32> <0x30> <0x31> <0x32> for "2012", <0xE6> <0x88> <0x91> for "我".
    Each byte is named by its character (and its place in it); bytes of no character keep their piece."""
    bytes_of = ["<0xE6>", "<0x88>", "<0x91>", "▁", "<0x32>", "<0x30>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    assert spelled(bytes_of) == ["我 1/3", "我 2/3", "我 3/3", "▁", "2", "0", *(f"😀 {k}/4" for k in range(1, 5))]
    cut = ["<0xE6>", "<0x88>", "▁x", "<0x01>", "<0x80>", "<0xC0>", "<0x80>", "<0xE6>"]
    assert spelled(cut) == cut  # cut short, a control, a lone continuation, an overlong form
    assert spelled(["<0xC2>", "<0xA0>", "<0x09>"]) == ["␣ 1/2", "␣ 2/2", "␣"]  # a no-break space, a tab
    trace = cjk_trace(["▁In", "<0x32>", "<0xE6>", "<0x88>", "<0x91>", "</s>"], ["<0x32>", "</s>"])
    fig = viz.heatmap(trace, "cross", 0, 0)
    assert list(fig.xaxis[0].major_label_overrides.values()) == ["▁In", "2", "我 1/3", "我 2/3", "我 3/3", "</s>"]
    assert fig.select_one(HoverTool).formatters["$y"].args["labels"] == ["2", "</s>"]
    assert "我 3/3" in viz.heatmap_svg(trace, "cross", 0, 0)
    # the residual grids and the ablation bars too ("<0x35>→<0x36>" ran into the next label)
    layers, source = np.zeros((2, 4)), ["▁In", "<0x35>", "<0xE6>", "</s>"]
    patched = ResidualPatching(layers, layers, -1.0, -2.0, "denoise", [1], source, ["▁In", "<0x36>", "<0xE6>", "</s>"])
    fig = viz.residual_patching_figure(patched)
    assert sorted(fig.xaxis[0].major_label_overrides.items())[1][1] == "5→6"
    fig = viz.token_delta_figure(["<0xE6>", "<0x88>", "<0x91>"], [-1.0] * 3, [-2.0] * 3)
    assert list(fig.xaxis[0].major_label_overrides.values()) == ["我 1/3", "我 2/3", "我 3/3"]
    (before, after), ticks = (r.glyph for r in fig.renderers), list(fig.xaxis[0].major_label_overrides)
    bars = fig.renderers[0].data_source.data  # each pair side by side about its piece's tick, neither hiding the other
    assert list((np.array(bars[before.x]) + np.array(bars[after.x])) / 2) == pytest.approx(ticks)
    assert (np.array(bars[after.x]) - np.array(bars[before.x]) >= before.width).all()


# -- export -----------------------------------------------------------------------------------------------
def test_svg_export_holds_the_characters_as_text() -> None:
    root = ET.fromstring(viz.heatmap_svg(cjk_trace(), "cross", 0, 0))
    assert "Noto Sans CJK SC" in root.get("font-family")
    labels = {t.text: t for t in root.iter(f"{SVG}text")}
    for piece in ("▁中文", "▁注意力", "▁café", "▁naïve", "e\u0301", "▁机器", "▁翻译", "▁Ünïcödé"):
        assert piece in labels, piece  # the characters themselves, not outlines
    assert FSI + "▁שלום" + PDI in labels and DOTTED_CIRCLE + "\u0301" in labels
    cut = labels[short_label(LONG)]
    assert cut.find(f"{SVG}title").text == LONG  # the whole piece on hover
    assert labels["▁中文"].find(f"{SVG}title") is None  # only cut labels get one


def glyph(text: str, size: int = 32) -> np.ndarray:
    """`text` drawn the way the PNG export draws labels, as a grey bitmap."""
    image = Image.new("L", (size * 3, size * 2), 255)
    fonts.draw_text(ImageDraw.Draw(image), (4, size), text, fonts.png_fonts(size))
    return np.asarray(image)


def png(trace: AttentionTrace) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(viz.heatmap_png(trace, "cross", 0, 0))).convert("RGB")).astype(int)


def cells_corner(rgb: np.ndarray) -> tuple[int, int]:
    """(top, left) of the heatmap's cells: the first blue pixels (the palette is blue, the text black)."""
    rows, cols = np.nonzero(rgb[..., 2] - rgb[..., 0] > 5)
    return int(rows.min()), int(cols.min())


def assert_not_tofu(chars: str = "中文注") -> None:
    """Each character draws ink, unlike each other one and unlike a missing glyph."""
    bitmaps = {c: glyph(c) for c in chars}
    tofu = glyph(MISSING)
    for c, bitmap in bitmaps.items():
        assert (bitmap < 128).sum() > 20, f"{c!r} draws nothing"
        assert not np.array_equal(bitmap, tofu), f"{c!r} is drawn as tofu: install fonts-noto-cjk (make browser)"
    for a in chars:
        for b in chars:
            assert a == b or not np.array_equal(bitmaps[a], bitmaps[b]), f"{a!r} and {b!r} are the same box"


def assert_png_labels_are_glyphs() -> None:
    real, other, tofu = (png(cjk_trace(swapped(SRC, m), swapped(TGT, m))) for m in ({}, OTHER_CJK, TOFU))
    assert real.shape == other.shape, "CJK characters of one width give one layout"
    differs = (real != other).any(-1)
    assert differs.sum() > 100, "two different Chinese traces give the same PNG: the glyphs are tofu"
    top, left = cells_corner(real)
    assert not differs[top:, left:].any()  # the labels differ, the cells (the same weights) do not
    assert real.shape != tofu.shape or (real != tofu).any(-1).sum() > 100, "the Chinese labels look like missing glyphs"


def test_png_export_draws_cjk_glyphs_not_tofu(artifacts: Path) -> None:
    assert_not_tofu()
    assert_not_tofu("éïüשم")  # accented, Hebrew, Arabic
    assert_png_labels_are_glyphs()
    (artifacts / "cjk-heatmap-export.png").write_bytes(viz.heatmap_png(cjk_trace(), "cross", 0, 0))
    (artifacts / "cjk-heatmap-export.svg").write_text(viz.heatmap_svg(cjk_trace(), "cross", 0, 0), encoding="utf-8")


def test_the_colour_bars_word_clears_its_top_tick_in_chinese() -> None:
    """权重 was drawn over the "1.00" beside the colour bar (CJK glyphs stand a full em tall)."""
    from attnlab.app.words import figure_words

    rgb = np.asarray(
        Image.open(io.BytesIO(viz.heatmap_png(cjk_trace(), "cross", 0, 0, words=figure_words("zh")))).convert("RGB")
    ).astype(int)
    top, _ = cells_corner(rgb)
    bar_x = int(np.nonzero((rgb[..., 2] - rgb[..., 0] > 5).any(0))[0].max()) - 11  # the 12 px colour bar
    ink = (rgb[: top + 10, bar_x + 16 :] < 128).all(-1).any(1)  # rows with text right of the bar's edge
    rows = np.nonzero(ink)[0]
    assert len(rows) and np.diff(rows).max() > 4, "the bar's word and the 1.00 tick touch"  # (one blank row)


def test_a_real_chinese_translation_exports_its_characters(artifacts: Path) -> None:
    """The bundled EN→ZH translator's own trace: the SVG export holds every Chinese piece as
    text, and the PNG export draws glyphs (the same trace with its Chinese characters permuted,
    same widths, gives other label pixels and the same cells)."""
    import dataclasses

    import attnlab

    checkpoint = Path(__file__).resolve().parents[1] / "checkpoints" / "tatoeba-en-zh"
    if not (checkpoint / "manifest.json").is_file():
        pytest.skip("the bundled tatoeba-en-zh is not here")
    trace = (
        attnlab.load(checkpoint).translate("My brother reads a book in the garden every morning.", record=True).trace
    )
    chinese = [c for c in "".join(trace.tgt_tokens) if "\u4e00" <= c <= "\u9fff"]
    assert len(set(chinese)) >= 4, trace.tgt_tokens
    layer = trace.layers["cross"][-1]
    labels = {t.text for t in ET.fromstring(viz.heatmap_svg(trace, "cross", layer, 0)).iter(f"{SVG}text")}
    assert [p for p in trace.tgt_tokens if p not in labels] == [], "a target piece is missing from the SVG text"
    order = sorted(set(chinese))
    permuted = dataclasses.replace(
        trace, tgt_tokens=swapped(trace.tgt_tokens, dict(zip(order, order[1:] + order[:1], strict=True)))
    )
    real, other = (
        np.asarray(Image.open(io.BytesIO(viz.heatmap_png(t, "cross", layer, 0))).convert("RGB")).astype(int)
        for t in (trace, permuted)
    )
    assert real.shape == other.shape
    differs = (real != other).any(-1)
    top, left = cells_corner(real)
    assert differs.sum() > 100, "other Chinese characters give the same PNG: the glyphs are tofu"
    assert not differs[top:, left:].any(), "only the labels differ, not the cells"
    (artifacts / "zh-translation-export.png").write_bytes(viz.heatmap_png(trace, "cross", layer, 0))
    (artifacts / "zh-translation-export.svg").write_text(viz.heatmap_svg(trace, "cross", layer, 0), encoding="utf-8")


def test_the_tofu_check_fails_with_a_font_without_cjk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberate break, kept: with only DejaVu Sans (no CJK) the checks above fail."""
    if not any(f.getname()[0] == "DejaVu Sans" for f in fonts.png_fonts(12)):
        pytest.skip("DejaVu Sans is not installed")
    monkeypatch.setattr(fonts, "PNG_FONT_FILES", (("DejaVuSans.ttf", None),))
    fonts.png_fonts.cache_clear()
    try:
        with pytest.raises(AssertionError, match="tofu"):
            assert_not_tofu()
        with pytest.raises(AssertionError, match="tofu"):
            assert_png_labels_are_glyphs()
    finally:
        monkeypatch.undo()
        fonts.png_fonts.cache_clear()


# -- in a real browser --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    with launched_chromium() as launched:
        yield launched


def open_page(chromium: object, path: Path) -> object:
    """A page on `path` with every request off this machine refused."""
    page = chromium.new_page(viewport={"width": 1000, "height": 800})
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto(path.as_uri())
    page.wait_for_function(
        "() => window.Bokeh && Bokeh.documents.length > 0 && Bokeh.index && Object.keys(Bokeh.index).length > 0"
    )
    page.locator("canvas").first.wait_for()
    page.wait_for_timeout(500)
    return page


_GLYPHS_JS = """([font, chars]) => chars.map(c => {
    const canvas = document.createElement("canvas"); canvas.width = 40; canvas.height = 40;
    const ctx = canvas.getContext("2d"); ctx.font = "28px " + font; ctx.fillText(c, 4, 32);
    return Array.from(ctx.getImageData(0, 0, 40, 40).data.filter((_, i) => i % 4 == 3)).join(",");
})"""
_WIDTHS_JS = """([font, texts]) => { const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = "11px " + font; return texts.map(t => ctx.measureText(t).width); }"""
_FRAME_JS = "() => { const b = Object.values(Bokeh.index)[0].frame.bbox; return [b.left, b.top, b.width, b.height]; }"


def hover_column(page: object, column: float, n_columns: int, height: float = 0.5) -> tuple[str, str]:
    """Hover the plot at `column` (of `n_columns`), `height` down the frame: the tooltip's text
    and font family."""
    frame = page.evaluate(_FRAME_JS)  # the plot area, in canvas pixels
    canvas = page.locator("canvas").first.bounding_box()
    x = canvas["x"] + frame[0] + frame[2] * (column + 0.5) / n_columns
    page.mouse.move(x, canvas["y"] + frame[1] + frame[3] * height)
    tooltip = page.locator(".bk-tooltip-content").first
    tooltip.wait_for(timeout=5000)
    return tooltip.inner_text(), tooltip.evaluate("e => getComputedStyle(e).fontFamily")


@pytest.mark.browser
def test_browser_draws_the_heatmap_axes_in_cjk_glyphs(chromium: object, tmp_path: Path, artifacts: Path) -> None:
    """A saved heatmap page in Chromium: the axis text of two traces that differ only in their
    Chinese characters must differ (tofu would be the same box), and differ from missing glyphs."""
    shots = {}
    for name, mapping in (("real", {}), ("other", OTHER_CJK), ("tofu", TOFU)):
        trace = cjk_trace(swapped(SRC, mapping), swapped(TGT, mapping))
        path = tmp_path / f"{name}.html"
        path.write_text(viz.standalone_html(viz.heatmap(trace, "cross", 0, 0), title=name), encoding="utf-8")
        page = open_page(chromium, path)
        shot = page.screenshot(full_page=True)
        shots[name] = np.asarray(Image.open(io.BytesIO(shot)).convert("L"))
        if name == "real":
            (artifacts / "cjk-heatmap-browser.png").write_bytes(shot)
            drawn = page.evaluate(_GLYPHS_JS, [FONT_STACK, ["中", "文", "注", MISSING]])
            widths = page.evaluate(_WIDTHS_JS, [FONT_STACK, ["▁שלום", FSI + "▁שלום" + PDI]])
            tooltip, family = hover_column(page, SRC.index(LONG), len(SRC))
        page.close()
    real, other, tofu = shots["real"], shots["other"], shots["tofu"]
    assert real.shape == other.shape
    assert (real != other).sum() > 100, "two different Chinese traces look the same in Chromium: the axis text is tofu"
    assert (real != tofu).sum() > 100, "the Chinese axis text looks like missing glyphs"
    # The same stack on a bare canvas: 中, 文, 注 draw ink, each its own, none like a missing glyph.
    assert all(any(v != "0" for v in d.split(",")) for d in drawn[:3]), "a CJK character draws nothing"
    assert len(set(drawn)) == 4, "two of 中 文 注 and a missing glyph look the same: tofu"
    assert widths[0] == pytest.approx(widths[1]), "the direction isolates are drawn, not invisible"
    assert LONG in tooltip, "the tooltip shows the whole long piece"
    assert "Noto Sans CJK SC" in family


@pytest.mark.browser
def test_browser_tooltips_of_a_figure_without_toolbar_use_the_stack(chromium: object, tmp_path: Path) -> None:
    """The ablation bars have no toolbar: their tooltip (the whole piece) is in the stack too."""
    path = tmp_path / "ablation.html"
    fig = viz.token_delta_figure([LONG, "▁שלום", "b"], [-1.0, -2.0, -3.0], [-2.0, -3.0, -4.0])
    path.write_text(viz.standalone_html(fig), encoding="utf-8")
    page = open_page(chromium, path)
    tooltip, family = hover_column(page, -0.1, 3, height=0.15)  # the first bar ("all heads"), near its top
    page.close()
    assert LONG in tooltip and "Noto Sans CJK SC" in family


@pytest.mark.browser
def test_browser_hover_of_a_masked_cell_speaks_the_figures_language(chromium: object, tmp_path: Path) -> None:
    """A heatmap drawn with Chinese `words`: the hover names the query and the key in Chinese, and a
    masked cell says so in Chinese too (the sentence is an argument of the hover's JavaScript)."""
    from attnlab.app.words import figure_words

    zh = figure_words("zh")
    path = tmp_path / "masked.html"
    path.write_text(viz.standalone_html(viz.heatmap(cjk_trace(), "decoder", 0, 0, words=zh)), encoding="utf-8")
    page = open_page(chromium, path)
    tooltip, _ = hover_column(page, len(TGT) - 1, len(TGT), height=0.5 / len(TGT))  # query 0, the last key
    page.close()
    assert zh["head.masked"] in tooltip and zh["head.query"] in tooltip and "masked" not in tooltip, tooltip
