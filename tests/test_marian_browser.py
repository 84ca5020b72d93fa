"""The explorer, in a real headless Chromium, opens a Hugging Face Marian directory (converted in
memory) and an imported one, translates, and shows every head of them with the model's own pieces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from marian_models import make_marian
from test_explorer_browser import ARTIFACTS, JS_HEATMAP_MODEL, Page, Server, drawn

import attnlab
from attnlab.cli import main

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def marian_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("marian-browser")
    raw = make_marian(base / "opus-mt-random", "separate-untied")
    assert main(["import", "marian", str(raw), "--out", str(base / "imported")]) == 0
    return {"raw": raw, "imported": base / "imported"}


@pytest.fixture(scope="module")
def marian_server(marian_dirs: dict[str, Path]) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    running = Server([marian_dirs["raw"], marian_dirs["imported"]], ARTIFACTS / "explorer-marian-server.log")
    yield running
    running.stop()


def test_explorer_shows_the_heads_of_a_marian_model(
    chromium: object, marian_server: Server, marian_dirs: dict[str, Path]
) -> None:
    session = Page(chromium, marian_server.url)  # opens the first --checkpoint: the raw Marian directory
    try:
        text = "the small dog plays with a red ball"
        session.translate(text)
        expected = attnlab.load(marian_dirs["raw"]).translate(text, record=True)
        heatmap = session.page.evaluate(JS_HEATMAP_MODEL, "heatmap-cross")
        assert heatmap["key_labels"] == expected.trace.src_tokens  # the model's own source pieces
        assert heatmap["query_labels"] == expected.trace.tgt_tokens and heatmap["queries"] == len(expected.tokens)
        assert drawn(session.figure_image("heatmap-cross")) and drawn(session.figure_image("grid-cross"))
        session.page.get_by_text("2 layers · 4 heads · d_model 32").wait_for(timeout=10_000)  # the model info
        session.shot("marian")
        run = session.run_number()
        session.page.locator(".attn-checkpoint select").select_option(label="imported")
        session.wait_run(run + 1)
        assert session.page.evaluate(JS_HEATMAP_MODEL, "heatmap-cross")["key_labels"] == expected.trace.src_tokens
    finally:
        session.close()
