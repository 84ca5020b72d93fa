"""The explorer's Corpus tab in a real headless Chromium: a profile the test writes (three
sentences, the bundled EN→DE model) is opened by a path under the server's `--checkpoint-root`;
a click on a head of the cross-attention grid lists its sentences, most mass on </s> first; a
click on the first of them decodes it, and the Heads tab shows that sentence's heatmap (the
pieces BokehJS holds are the sentence's) at the clicked head. A path outside the roots is
refused in one line. The page runs offline (tests/test_explorer_browser.py's `Page`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from test_explorer_browser import ARTIFACTS, JS_HEATMAP_MODEL, ROOT, Page, Server, drawn

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"
SOURCES = [
    "A dog runs in the park.",
    "Two men are working on a roof.",
    "A little girl in a pink dress is climbing into a wooden playhouse.",
]

if not (BUNDLED / "manifest.json").is_file():
    pytest.skip("the bundled checkpoints/multi30k-en-de is not here", allow_module_level=True)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A root ("lab") holding a small profile of the bundled model's translations, the head with
    the most mass on </s> of its cross-attention, and that head's top sentence."""
    from attnlab.decode.loading import load
    from attnlab.decode.profile import profile, read_profile, write_profile

    root = tmp_path_factory.mktemp("corpus") / "lab"
    model = load(BUNDLED)
    path = write_profile(profile(model, SOURCES), root / "profiles" / "small.parquet", {"checkpoint": "multi30k-en-de"})
    rows = [r for r in read_profile(path).table.to_pylist() if r["kind"] == "cross"]
    top = max(rows, key=lambda r: r["eos"])
    heads = read_profile(path).grid("eos", "cross")
    return {"root": root, "top": top, "layers": heads[0], "translation": model.translate(top["source"])}


@pytest.fixture(scope="module")
def server(profiled: dict) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    running = Server(
        [BUNDLED], ARTIFACTS / "explorer-corpus-server.log", extra=("--checkpoint-root", str(profiled["root"]))
    )
    yield running
    running.stop()


def open_profile(session: Page, request: str) -> None:
    session.page.locator(".bk-tab").filter(has_text=re.compile("^Corpus$")).click()
    session.page.locator(".attn-profile-path input").fill(request)
    session.page.locator(".attn-profile-open button").click()


def test_corpus_view_head_then_sentence_opens_its_heatmap(chromium: object, server: Server, profiled: dict) -> None:
    session = Page(chromium, server.url)  # opens the bundled model and translates its example (run 1)
    try:
        open_profile(session, "lab/profiles/small.parquet")
        session.page.locator(".attn-profile-info[data-sentences='3']").wait_for(timeout=30_000)
        box = session.figure_box("profile-cross", timeout=30_000)
        session.settle()
        assert drawn(session.figure_image("profile-cross")), "the layers × heads grid is blank"
        top, layers = profiled["top"], profiled["layers"]
        # click the head with the most mass on </s> (the grid: head h at x h+0.5, layer row r at y r+0.5)
        x = box["left"] + box["x0"] + (box["x1"] - box["x0"]) * (top["head"] + 0.5)
        y = box["top"] + box["y0"] + (box["y1"] - box["y0"]) * (layers.index(top["layer"]) + 0.5)
        session.page.mouse.click(x, y)
        head = f"cross-{top['layer']}-{top['head']}"
        session.page.locator(f".attn-profile-head[data-head='{head}']").wait_for(timeout=30_000)
        rows = session.page.locator(".attn-profile-sentences .slick-row")
        rows.first.wait_for(timeout=30_000)
        assert rows.count() == 3
        assert top["source"] in rows.first.inner_text()  # the sentence where that head is most on </s>
        session.page.screenshot(path=ARTIFACTS / "explorer-corpus.png", full_page=True)
        run = session.run_number()
        rows.first.locator(".slick-cell").nth(2).click()  # its source: decode it in the usual views
        session.wait_run(run + 1, timeout=60_000)
        caption = f"showing cross · layer {top['layer']} · head {top['head']}"
        session.page.locator(".attn-caption").filter(has_text=caption).wait_for(timeout=30_000)
        assert session.page.locator(".attn-source textarea").input_value() == top["source"]
        want = profiled["translation"]
        shown = session.page.evaluate(JS_HEATMAP_MODEL, "heatmap-cross")  # what BokehJS holds, not just pixels
        assert shown["key_labels"] == want.src_tokens and shown["query_labels"] == want.tokens
        session.settle()
        assert drawn(session.figure_image("heatmap-cross"))
        session.page.screenshot(path=ARTIFACTS / "explorer-corpus-sentence.png", full_page=True)
        # an audit saw Bokeh's "reference already known" in the server's log on Open profile (a
        # model the browser sent back whole): none after opening, picking a head and a sentence
        server.log.flush()
        assert "reference already known" not in Path(server.log.name).read_text()
        session.page.locator(".bk-tab").filter(has_text="Corpus").click()  # its table drawn again (it was blank)
        rows.first.wait_for(timeout=30_000)
        assert rows.count() == 3 and not [e for e in session.errors if "SlickGrid" in e], session.errors
    finally:
        session.close()


def test_the_keyboard_lists_a_heads_sentences_and_opens_one(chromium: object, server: Server, profiled: dict) -> None:
    """The grids and the table take clicks only: the button lists the sentences of the head open
    in the selection bar and the menu opens one; Tab through the table leaves it (each cell it
    reached selected its row, and opened that sentence over the text typed)."""
    session = Page(chromium, server.url)
    try:
        top = profiled["top"]
        open_profile(session, "lab/profiles/small.parquet")
        session.page.locator(".attn-profile-info[data-sentences='3']").wait_for(timeout=30_000)
        session.page.get_by_role("button", name="cross", exact=True).click()
        session.page.locator(".attn-layer select").select_option(str(top["layer"]))
        session.page.locator(".attn-head-select select").select_option(str(top["head"]))
        session.page.wait_for_url(re.compile(f"kind=cross&layer={top['layer']}&head={top['head']}"), timeout=10_000)
        session.page.locator(".attn-profile-open-head button").focus()
        session.page.keyboard.press("Enter")
        head = f"cross-{top['layer']}-{top['head']}"
        session.page.locator(f".attn-profile-head[data-head='{head}']").wait_for(timeout=30_000)
        session.page.locator(".attn-profile-sentences .slick-row").first.wait_for(timeout=30_000)
        typed = "A cat sleeps on the sofa ."
        session.source_box().fill(typed)
        run = session.run_number()
        session.page.locator(".attn-profile-sentence select").focus()
        for _ in range(6):  # past the menu and through the table
            session.page.keyboard.press("Tab")
        session.page.wait_for_timeout(1_500)
        assert session.run_number() == run and session.source_box().input_value() == typed
        menu = session.page.locator(".attn-profile-sentence select")
        assert menu.locator("option").count() == 4  # "—" and the three sentences
        menu.select_option(index=1)  # the most extreme: decoded in the usual views
        session.wait_run(run + 1, timeout=60_000)
        assert session.source_box().input_value() == top["source"]
        assert session.errors == []
    finally:
        session.close()


def test_a_profile_outside_the_roots_is_refused(chromium: object, server: Server, tmp_path: Path) -> None:
    from attnlab.decode.profile import write_profile

    outside = write_profile(pa.table({"sentence": [0]}), tmp_path / "secret.parquet", {})
    session = Page(chromium, server.url)
    try:
        for request in (str(outside), "/etc/passwd", "lab/../../secret.parquet"):
            open_profile(session, request)
            error = session.page.locator(".attn-error-text")
            error.filter(has_text="Cannot open that profile").wait_for(timeout=15_000)
            assert str(tmp_path) not in error.inner_text()
        assert session.page.locator(".attn-profile-info[data-sentences]").count() == 0
    finally:
        session.close()
