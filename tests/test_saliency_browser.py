"""The Logit lens tab's saliency section (gradient × input) in a real headless Chromium against
`panel serve apps/explorer.py` on the bundled EN→DE model, offline: the map is painted, its hover
names the two pieces, the share and the signed score (and a hatched cell says the decoder cannot
see it), SmoothGrad is ticked from the keyboard, the page stays inside a 1024 px and a 700 px
window, and a Chinese page says it all in Chinese. Screenshots of the section land in
test-artifacts/ (explorer-saliency-en.png, explorer-saliency-zh.png)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import require_chromium
from test_explorer_browser import ARTIFACTS, BUNDLED, JS_TITLE, Page, Server, js_view

from attnlab.app.i18n import text

pytestmark = pytest.mark.browser
require_chromium()
if not BUNDLED.exists():
    pytest.skip("the bundled checkpoint is not here", allow_module_level=True)

JS_RANGES = js_view("return {columns: v.model.x_range.end, rows: v.model.y_range.end};", visible=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    running = Server([BUNDLED], ARTIFACTS / "saliency-server.log")  # (a free port of its own)
    yield running
    running.stop()


def open_section(browser: object, server: Server, lang: str) -> Page:
    """A page in `lang` with the Logit lens tab open and the saliency map painted."""
    page = Page(browser, f"{server.url}?lang={lang}")
    page.page.locator(".bk-tab").filter(has_text=text("tab.lens", lang)).click()
    assert page.painted("saliency")
    return page


def hover(page: Page, column: float, row: float) -> str:
    """The tooltip's text over the cell at (column, row from the top) of the map."""
    box, ranges = page.figure_box("saliency"), page.page.evaluate(JS_RANGES, "saliency")
    width, height = box["x1"] - box["x0"], box["y0"] - box["y1"]  # one column's and one row's pixels
    page.page.mouse.move(
        box["left"] + box["x0"] + width * column, box["top"] + box["y0"] - height * (ranges["rows"] - row)
    )
    tooltip = page.page.locator(".bk-Tooltip").filter(has_text=text("figure.saliency_input", page_lang(page)))
    tooltip.wait_for(timeout=5_000)
    said = tooltip.evaluate("el => (el.shadowRoot || el).textContent")
    page.page.mouse.move(0, 0)
    tooltip.wait_for(state="hidden", timeout=5_000)
    return said


def page_lang(page: Page) -> str:
    return page.page.evaluate("document.documentElement.lang") or "en"


def test_the_map_hovers_takes_the_keyboard_and_fits_narrow_windows(chromium: object, server: Server) -> None:
    page = open_section(chromium, server, "en")
    line = page.page.locator(".attn-saliency-line p").inner_text()
    assert line.startswith("The piece that depends least on the source: “") and "% of its |gradient × input|" in line
    ranges = page.page.evaluate(JS_RANGES, "saliency")
    last = hover(page, 0.5, ranges["rows"] - 0.5)  # the last output piece (</s>) × the first source piece
    assert "output piece" in last and "</s>" in last and "(source, 0)" in last, last
    assert "share of the row" in last and "gradient × input" in last, last
    masked = hover(page, ranges["columns"] - 0.5, 0.5)  # the first output piece × the last decoder input
    assert "not seen: a later piece (causal mask)" in masked and "output so far" in masked, masked
    section = page.page.locator(".attn-saliency-section")
    section.screenshot(path=ARTIFACTS / "explorer-saliency-en.png")
    assert not page.page.evaluate(JS_TITLE, "saliency").startswith("SmoothGrad")
    smooth = page.page.locator(".attn-saliency-smooth input")
    smooth.focus()
    page.page.keyboard.press("Space")  # SmoothGrad, from the keyboard
    page.page.wait_for_function(
        f"() => ({JS_TITLE})('saliency')?.startsWith('SmoothGrad')", timeout=30_000, polling=100
    )
    assert smooth.is_checked() and smooth.evaluate("el => el === el.getRootNode().activeElement")
    for width in (1024, 700):  # the map narrows (its columns dragged into view), its text goes under it
        page.page.set_viewport_size({"width": width, "height": 800})
        page.settle()
        assert page.painted("saliency")
        assert page.page.evaluate("document.documentElement.scrollWidth") == width
        figure, about = (page.page.locator(css).bounding_box() for css in (".attn-saliency", ".attn-saliency-about"))
        assert figure["x"] + figure["width"] <= width and about["x"] + about["width"] <= width, (figure, about)
        beside = about["x"] >= figure["x"] + figure["width"]
        assert beside or about["y"] >= figure["y"] + figure["height"], (figure, about)  # never over the map
    page.shot("saliency-700")
    page.close()


def test_a_chinese_page_says_it_in_chinese(chromium: object, server: Server) -> None:
    page = open_section(chromium, server, "zh")
    assert text("saliency.heading", "zh") == page.page.locator(".attn-saliency-section h3").inner_text()
    assert page.page.locator(".attn-saliency-line p").inner_text().startswith("最不依赖原文的词元：“")
    assert "梯度×输入" in "".join(page.page.evaluate(JS_TITLE, "saliency").split())
    said = hover(page, 0.5, 0.5)
    assert "输出词元" in said and "原文" in said and "占该行" in said, said
    page.page.locator(".attn-saliency-section").screenshot(path=ARTIFACTS / "explorer-saliency-zh.png")
    page.close()
