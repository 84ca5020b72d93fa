"""The explorer's compare mode in a real headless Chromium: two bundled translators (the paper's
global attention and an r=3 restricted one) on the same sentence, both outputs with their word
diff, and the open head of each with the difference map; with every box ticked, every figure of
the tab painted and laid out wider than 0 px in a 1500 and a 1024 px window, the heatmaps as they
were before the boxes drew; a translator and a parser are refused in one line. The page runs
offline (tests/test_explorer_browser.py's `Page`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_explorer_browser import ARTIFACTS, JS_HEATMAP_MODEL, JS_TITLE, ROOT, Page, Server, drawn

import attnlab
from attnlab.app.checkpoints import find_checkpoints, same_directory
from attnlab.app.explorer.compare import IMPORTANCE_FIGURES, LENS_FIGURES, PATCHING_FIGURES
from attnlab.app.explorer.compare_attribution import ATTRIBUTION_FIGURES
from attnlab.app.explorer.compare_circuit import CIRCUIT_FIGURES
from attnlab.app.explorer.compare_saliency import SALIENCY_FIGURES

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

FIRST = ROOT / "checkpoints" / "multi30k-en-de"
PARSER = ROOT / "checkpoints" / "wsj-parser"
SECOND = ROOT / "checkpoints" / "multi30k-en-de-r3"  # the bundled r = 3 translator (Table 1's last row)
TEXT = "Two young children are playing with a big brown dog on the beach."
CHANGED = "Two young children are playing with a big black dog on the beach."  # what the patching box patches
FIGURES = (  # every figure the tab draws with all its boxes ticked
    ("compare-first", "compare-second", "compare-diff")
    + ("compare-rollout-first", "compare-rollout-second", "compare-rollout-diff")
    + LENS_FIGURES
    + IMPORTANCE_FIGURES
    + PATCHING_FIGURES
    + ATTRIBUTION_FIGURES
    + CIRCUIT_FIGURES
    + SALIENCY_FIGURES
)
JS_READS = (  # both compare heatmaps are built and read these source pieces
    "(labels) => ['compare-first', 'compare-second'].every(n => { const h = ("
    + JS_HEATMAP_MODEL
    + ")(n); return h && JSON.stringify(h.key_labels) === JSON.stringify(labels); })"
)
JS_WIDTHS = """(name) => {  // the canvas width of each view of figure `name` (null until one is built)
  const widths = [], stack = [...Bokeh.index], seen = new Set();
  while (stack.length) {
    const v = stack.pop();
    if (!v || seen.has(v)) continue;
    seen.add(v);
    if (v.model && v.model.name === name && v.canvas_view) widths.push(v.canvas_view.el.getBoundingClientRect().width);
    try { for (const c of v.children()) stack.push(c); } catch (e) {}
  }
  return widths.length ? widths : null;
}"""
JS_WITHOUT_DELETIONS = (
    "el => { const c = el.cloneNode(true); c.querySelectorAll('del').forEach(d => d.remove()); return c.textContent; }"
)

for bundled in (FIRST, SECOND):
    if not (bundled / "manifest.json").is_file():
        pytest.skip(f"the bundled {bundled.name} is not here", allow_module_level=True)


@pytest.fixture(scope="session")
def second() -> Path:
    """The second model: the bundled restricted (r = 3) translator."""
    return SECOND


@pytest.fixture(scope="module")
def compare_server(second: Path) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    running = Server([FIRST, second], ARTIFACTS / "explorer-compare-server.log")
    yield running
    running.stop()


def picker_name(path: Path, extra: list[Path]) -> str:
    """The name the explorer's pickers give `path` (the server lists the bundled ones and `extra`)."""
    return next(name for name, where in find_checkpoints(extra).items() if same_directory(where, path))


def compared(page: Page, run: int, source: list[str] | None = None) -> dict[str, str]:
    """Wait until the Compare tab shows the comparison of `run` (and, given the `source` pieces,
    both heatmaps read them); its two outputs as shown."""
    page.page.locator(f".attn-compare-result[data-run='{run}']").wait_for(timeout=120_000)
    page.page.wait_for_function(JS_TITLE, arg="compare-diff", timeout=30_000)
    if source is not None:
        page.page.wait_for_function(JS_READS, arg=source, timeout=30_000)
    page.settle()
    second = page.page.locator(".attn-compare-second-text")
    return {
        "first": page.page.locator(".attn-compare-first-text").inner_text().strip(),
        "second": " ".join(second.evaluate(JS_WITHOUT_DELETIONS).split()),  # the word diff, less A's words
        "second_diff": second.inner_html(),
    }


def laid_out(page: Page) -> dict[str, list[float]]:
    """The canvas widths of every figure in `FIGURES`, once BokehJS built them all. A width of 0
    is a figure drawn blank: Bokeh figures that reached a FlexBox after the page was laid out came
    out 0 px wide in Chromium (the path grids, explorer/paths.py), which `painted` would only
    report as a time-out (it waits for a view wider than 0)."""
    for name in FIGURES:
        page.page.wait_for_function(JS_WIDTHS, arg=name, timeout=60_000)
    page.settle()
    return {name: page.page.evaluate(JS_WIDTHS, name) for name in FIGURES}


def test_compare_two_translators(chromium: object, compare_server: Server, second: Path, artifacts: Path) -> None:
    session = Page(chromium, compare_server.url)  # opens FIRST and translates its example (run 1)
    try:
        first_name, second_name = picker_name(FIRST, [FIRST, second]), picker_name(second, [FIRST, second])
        assert first_name == "EN→DE translator · multi30k-en-de"  # the pickers name what a model does
        assert second_name.startswith("EN→DE translator · multi30k-en-de-r3"), second_name
        assert session.page.locator(".attn-checkpoint select").input_value() == first_name
        session.page.locator(".bk-tab").filter(has_text="Head ablation").click()
        session.page.locator(".attn-patch-input input").fill(CHANGED)  # what the Compare tab's 4th box patches
        session.page.locator(".bk-tab").filter(has_text=re.compile("^Compare$")).click()
        session.page.locator(".attn-compare-notice-text").filter(has_text="Choose a second model").wait_for()
        session.page.locator(".attn-compare-second select").select_option(label=second_name)
        compared(session, session.run_number())  # the example, with both models

        run = session.run_number()
        session.source_box().fill(TEXT)
        session.page.locator(".attn-go button").click()  # Translate, with the Compare tab open
        a = attnlab.load(FIRST).translate(TEXT, beam=4, alpha=0.6, record=True)
        b = attnlab.load(second).translate(TEXT, beam=4, alpha=0.6)
        shown = compared(session, run + 1, a.trace.src_tokens)
        assert shown["first"] == a.text.strip() and shown["second"] == " ".join(b.text.split()), shown
        assert ("<del>" in shown["second_diff"] or "<ins>" in shown["second_diff"]) == (a.text != b.text)
        for name in ("compare-first", "compare-second"):  # B's maps are read on A's output: same labels
            held = session.page.evaluate(JS_HEATMAP_MODEL, name)
            assert held["key_labels"] == a.trace.src_tokens and held["query_labels"] == a.trace.tgt_tokens, name
            assert drawn(session.figure_image(name)), f"{name} is blank"
        assert drawn(session.figure_image("compare-diff")), "the difference map is blank"
        assert session.page.evaluate(JS_TITLE, "compare-diff") == "A − B · layer 2 · head 0"
        session.page.locator(".attn-compare-outputs").get_by_text("B · " + second_name).wait_for()
        session.page.screenshot(path=artifacts / "explorer-compare.png", full_page=True)

        session.page.get_by_role("button", name="encoder", exact=True).click()  # the page's selection
        session.page.locator(".attn-layer select").select_option("0")
        session.page.wait_for_function(
            f"n => ({JS_TITLE})(n) === 'B · encoder self-attention · layer 0 · head 0'", arg="compare-second"
        )
        assert session.run_number() == run + 1  # a new head is only drawn, not decoded again
        session.page.locator(".attn-compare-rollouts input").check()  # each model's flow up to encoder layer 0
        session.page.locator(".attn-compare-lenses input").check()  # each model's decoder, layer by layer
        for name in ("compare-rollout-first", "compare-rollout-second", "compare-rollout-diff"):
            assert session.painted(name), f"{name} is blank"
        for name in ("compare-lens-first", "compare-lens-second"):
            assert session.painted(name, 5), f"{name} is blank"
        session.page.screenshot(path=artifacts / "explorer-compare-rollouts-lenses.png", full_page=True)
        shown_before = np.asarray(session.figure_image("compare-first")).astype(int)
        for box in (
            "importances",
            "patchings",
            "attributions",
            "circuits",
            "saliency",
        ):  # every figure, drawn after the page
            session.page.locator(f".attn-compare-{box} input").check()
        for name in CIRCUIT_FIGURES + SALIENCY_FIGURES:  # (the last boxes drawn)
            session.figure_box(
                name, timeout=90_000
            )  # five analyses of two models: over 15 s with four tests on two cores
            assert session.painted(name), f"{name} is blank"
        # the boxes' figures left the heatmap above as it was (the circuits' took its title, labels and toolbar)
        shown_after = np.asarray(session.figure_image("compare-first")).astype(int)
        assert shown_after.shape == shown_before.shape and np.abs(shown_after - shown_before).mean() < 1
        for width in (1500, 1024):
            session.page.set_viewport_size({"width": width, "height": 1200})
            widths = laid_out(session)
            assert all(w and min(w) > 0 for w in widths.values()), f"{width} px window: 0 px wide figures {widths}"
            assert session.page.evaluate("document.documentElement.scrollWidth") == width  # nothing runs past it
        for name in (
            IMPORTANCE_FIGURES + PATCHING_FIGURES + ATTRIBUTION_FIGURES + CIRCUIT_FIGURES + SALIENCY_FIGURES
        ):  # (the others: above)
            assert session.painted(name, 5), f"{name} is blank in a 1024 px window"
        session.page.screenshot(path=artifacts / "explorer-compare-every-box.png", full_page=True)
        session.page.set_viewport_size({"width": 1500, "height": 1200})

        if (PARSER / "manifest.json").is_file():
            session.page.locator(".attn-compare-second select").select_option(label=picker_name(PARSER, []))
            notice = session.page.locator(".attn-compare-notice-text").filter(has_text="Cannot compare")
            notice.wait_for(timeout=30_000)
            assert "different tasks (translate and parse)" in notice.inner_text()
            assert session.page.locator(".attn-compare-result").count() == 0  # no stale comparison stays
            session.page.screenshot(path=artifacts / "explorer-compare-refused.png", full_page=True)
    finally:
        session.close()
