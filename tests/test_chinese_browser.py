"""The bundled EN→ZH and EN→ES translators in the explorer, in a real headless Chromium, the page
in the reader's language (tests/test_explorer_browser.py's `Page`, offline).

The Chinese heatmap's axis is checked for real glyphs the way tests/test_cjk_views.py checks the
exports: a font draws every character it lacks as the same box, so the axis of two target texts
that differ only in their Chinese characters (same pieces, same widths) must differ in pixels,
and each character on it, drawn in the axis's font stack in this browser, must differ from the
others and from a missing glyph. The screenshots are kept as test artifacts.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import numpy as np
import pytest
from test_cjk_views import _GLYPHS_JS, MISSING
from test_explorer_browser import ARTIFACTS, JS_HEATMAP_MODEL, ROOT, Page, Server, drawn

import attnlab
from attnlab.app.checkpoints import find_checkpoints, same_directory
from attnlab.app.i18n import language_code, text
from attnlab.viz.fonts import FONT_STACK

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

ZH = ROOT / "checkpoints" / "tatoeba-en-zh"
ES = ROOT / "checkpoints" / "tatoeba-en-es"
SENTENCE = "My brother reads a book in the garden every morning."

if not (ZH / "manifest.json").is_file():
    pytest.skip("the bundled tatoeba-en-zh is not here", allow_module_level=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    running = Server(
        [p for p in (ZH, ES) if (p / "manifest.json").is_file()], ARTIFACTS / "explorer-tatoeba-server.log"
    )
    yield running
    running.stop()


def is_cjk(character: str) -> bool:
    return unicodedata.name(character, "").startswith("CJK UNIFIED IDEOGRAPH")


def shape(pieces: list[str]) -> list[tuple[bool, ...]]:
    """What decides the axis layout: per piece, which characters are Chinese (full width)."""
    return [tuple(is_cjk(c) for c in piece) for piece in pieces]


def swapped_text(model: attnlab.decode.Model, source: str, target: str) -> str:
    """`target` with Chinese pieces of the same shape swapped (or, failing that, its characters
    rotated) so that the model reads it in pieces of the same shape but other characters: the
    axis layout stays, only the glyphs change."""
    want = model.score(source, target).tokens
    pieces = [p.lstrip("▁") for p in want[:-1]]
    candidates = []
    for i, a in enumerate(pieces):
        for j in range(i + 1, len(pieces)):
            if a != pieces[j] and shape([a]) == shape([pieces[j]]) and all(map(is_cjk, a)):
                order = list(pieces)
                order[i], order[j] = order[j], order[i]
                candidates.append("".join(order))
    chinese = [c for c in target if is_cjk(c)]
    for shift in range(1, len(chinese)):
        rotated = iter(chinese[shift:] + chinese[:shift])
        candidates.append("".join(next(rotated) if is_cjk(c) else c for c in target))
    for other in candidates:
        read = model.score(source, other).tokens
        if shape(read) == shape(want) and read != want:
            return other
    pytest.fail(f"no reordering of {target!r} keeps its pieces' shape")


def axis_strip(page: Page, name: str) -> np.ndarray:
    """The figure's pixels left of its plot frame: the target pieces' axis labels."""
    box = page.figure_box(name)
    image = np.asarray(page.figure_image(name).convert("L")).astype(int)
    return image[:, : int(box["frame_left"] - box["left"])]


def test_chinese_translation_in_a_chinese_page(chromium: object, server: Server) -> None:
    page = Page(chromium, f"{server.url}?lang=zh")  # opens the first checkpoint (EN→ZH), decodes its example
    try:
        picker = page.page.locator(".attn-checkpoint select").input_value()
        said = text("checkpoint.translator", "zh", src=language_code("en", "zh"), tgt=language_code("zh", "zh"))
        assert picker == f"{said} · tatoeba-en-zh", picker
        model = attnlab.load(ZH)
        page.translate(SENTENCE)
        want = model.translate(SENTENCE, beam=4, alpha=0.6)
        assert page.page.locator(".attn-result .attn-output").first.inner_text().strip() == want.text.strip()
        assert " " not in want.text.strip() and sum(map(is_cjk, want.text)) >= 4, want.text
        shown = page.page.evaluate(JS_HEATMAP_MODEL, "heatmap-cross")
        assert shown["query_labels"] == want.tokens and any(map(is_cjk, "".join(shown["query_labels"])))
        head = page.figure_image("heatmap-cross")
        head.save(ARTIFACTS / "explorer-zh-heatmap.png")
        assert drawn(head), "the Chinese heatmap is blank"
        page.shot("zh-translation")

        # The axis in pixels: the same layout with other Chinese characters must look different.
        strips = []
        for reference in (want.text, swapped_text(model, SENTENCE, want.text)):
            page.translate(SENTENCE, reference=reference)
            strips.append(axis_strip(page, "heatmap-cross"))
        assert strips[0].shape == strips[1].shape
        assert (strips[0] != strips[1]).sum() > 100, "other Chinese characters give the same axis: tofu"
        # Each character on the axis, in the axis's fonts in this browser: its own glyph, not the box.
        characters = sorted({c for c in "".join(want.tokens) if is_cjk(c)})
        glyphs = page.page.evaluate(_GLYPHS_JS, [FONT_STACK, [*characters, MISSING]])
        assert all(any(v != "0" for v in g.split(",")) for g in glyphs[:-1]), "a character draws nothing"
        assert len(set(glyphs)) == len(characters) + 1, "two characters, or one and a missing glyph, look the same"
        # The ablation tab's search hint whole: its box was sized in `ch`, half a Han character ("例如交叉 · 第").
        search = page.page.locator(".choices__input--cloned")
        needs, has = measured_hint(page, search)
        assert "头 2" in search.get_attribute("placeholder") and needs <= has, (needs, has)
    finally:
        page.close()


def measured_hint(page: Page, search: object) -> tuple[float, float]:
    """The hint's width and its box's inner width, once the box is laid out and styled.

    The locator is evaluated afresh on each poll: Panel may redraw the box after the tab opens, and a
    handle to the old one read NaN padding (detached, unstyled) in CI. With four test processes on two
    cores the box once stayed unlaid-out for 60 s, hence the click away and back.
    """
    for _attempt in range(3):
        page.page.locator(".bk-tab").nth(4).click()
        search.wait_for(timeout=15_000)
        for _poll in range(100):
            measured = search.evaluate(_HINT_JS)
            if measured is not None:
                return measured
            page.page.wait_for_timeout(200)
        page.page.locator(".bk-tab").nth(0).click()
    raise AssertionError("the ablation tab's search box was never laid out")


_HINT_JS = """(box) => { const style = getComputedStyle(box);
  const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
  if (!box.isConnected || box.clientWidth === 0 || !Number.isFinite(padding) || !style.font) return null;
  const pen = document.createElement("canvas").getContext("2d"); pen.font = style.font;
  return [pen.measureText(box.placeholder).width, box.clientWidth - padding]; }"""


def test_spanish_translation_in_a_spanish_page(chromium: object, server: Server) -> None:
    if not (ES / "manifest.json").is_file():
        pytest.skip("the bundled tatoeba-en-es is not here")
    page = Page(chromium, f"{server.url}?lang=es")
    try:
        name = next(n for n, where in find_checkpoints([ZH, ES], lang="es").items() if same_directory(where, ES))
        said = text("checkpoint.translator", "es", src=language_code("en", "es"), tgt=language_code("es", "es"))
        assert name == f"{said} · tatoeba-en-es", name  # the picker names it by its languages
        run = page.run_number()
        page.page.locator(".attn-checkpoint select").select_option(label=name)
        page.wait_run(run + 1, timeout=90_000)  # opening a model decodes its example
        page.translate(SENTENCE)
        want = attnlab.load(ES).translate(SENTENCE, beam=4, alpha=0.6)
        assert page.page.locator(".attn-result .attn-output").first.inner_text().strip() == want.text.strip()
        assert page.page.evaluate(JS_HEATMAP_MODEL, "heatmap-cross")["query_labels"] == want.tokens
        assert page.painted("heatmap-cross")
        page.shot("es-translation")
    finally:
        page.close()
