"""The explorer in Spanish and Chinese, driven in a real headless Chromium (`panel serve
apps/explorer.py`, as tests/test_explorer_browser.py starts it, with the network cut off).

The page's language comes from `?lang=`, else from the browser's Accept-Language, else English;
the switch in the header reloads the page in the language chosen. Each test reads every text the
page holds (through the nested shadow roots Panel renders into: labels, buttons, tab titles,
options, placeholders, the output and the captions) and checks it against the catalogue: the
words of the language asked for are there, and no English word of the catalogue is left. The
page says its language (`<html lang>`, by which browsers choose CJK glyphs), and the checkpoint
picker says what each model does in it.

The glyphs themselves (fonts for Chinese, no tofu) are not checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from browser import require_chromium

from attnlab.app.i18n import LANGUAGES, MESSAGES, language_code, text

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")
require_chromium()

from test_explorer_browser import ARTIFACTS, Server, make_checkpoints  # noqa: E402  (needs Chromium)

# Words every page shows once the first sentence is decoded (on the first tab or on the others,
# each put in the page when it is opened).
SHOWN = [
    "page.title", "language", "page.checkpoint", "page.open_dir", "page.open", "page.source", "page.reference",
    "decoding.beam", "decoding.greedy", "page.beam_size", "page.translate", "output.translation", "output.score",
    "output.output", "kind.encoder", "kind.decoder", "kind.cross", "selection.layer", "selection.head",
    "selection.mask", "selection.scale", "export.title", "export.trace", "export.html", "tab.heads", "tab.equation",
    "tab.dashboard", "tab.timeline", "tab.ablation", "equation.query", "dashboard.x", "timeline.step",
    "timeline.probe", "ablation.choice", "ablation.add", "ablation.go", "tab.rollout", "rollout.about",
    "tab.lens", "lens.about",
]  # fmt: skip
# A word each tab past the first shows, by the tab's place: it is drawn once that is in the page.
TAB_WORDS = {
    1: "equation.query",
    2: "dashboard.x",
    3: "timeline.step",
    4: "ablation.go",
    7: "rollout.about",
    8: "lens.about",
}
JS_OPTIONS = "s => [...s.options].map(o => o.textContent)"
# Every text node of the page, through shadow roots (not <style>/<script>), and every placeholder.
JS_TEXTS = """() => {
  const out = [];
  const visit = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
    for (let n = walker.currentNode; n; n = walker.nextNode()) {
      if (n.nodeType === Node.TEXT_NODE) {
        const parent = n.parentElement;
        if (!parent || !["STYLE", "SCRIPT"].includes(parent.tagName)) out.push(n.textContent);
      } else {
        if (n.shadowRoot) visit(n.shadowRoot);
        if (n.placeholder) out.push(n.placeholder);
      }
    }
  };
  visit(document.body);
  return out.map(t => t.trim()).filter(t => t);
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    ARTIFACTS.mkdir(exist_ok=True)
    from attnlab import Transformer
    from attnlab.model.checkpoint import read_config, save_checkpoint

    base = tmp_path_factory.mktemp("i18n-browser")
    checkpoints = make_checkpoints(base)
    described = base / "tatoeba-en-zh"  # a second model whose config says what it does: the picker names it
    data = {"task": "translate", "src_lang": "en", "tgt_lang": "zh", "corpus": "tatoeba"}
    config = read_config(checkpoints["translate"])[0]
    save_checkpoint(described, Transformer(config), base / "spm.model", meta={"task": "translate", "data": data})
    running = Server([checkpoints["translate"], described], ARTIFACTS / "i18n-server.log")
    yield running
    running.stop()


class Session:
    """One browser context (its own locale or Accept-Language) on one explorer page, offline."""

    def __init__(self, browser: object, url: str, locale: str = "en-US", accept_language: str | None = None) -> None:
        """`locale`: the browser's language (it sends it as Accept-Language); `accept_language`:
        that header as given instead (Chromium's locale would take precedence over it)."""
        options: dict[str, object] = {"viewport": {"width": 1500, "height": 1200}}
        if accept_language:
            options["extra_http_headers"] = {"Accept-Language": accept_language}
        else:
            options["locale"] = locale
        self.context = browser.new_context(**options)
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(url)
        self.ready()

    def _route(self, route: object) -> None:
        if route.request.url.startswith(("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:")):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def ready(self, run: int = 1) -> None:
        """Until the first sentence is decoded and every view drawn (the status carries the run)."""
        self.page.locator(f".attn-run[data-run='{run}']").wait_for(timeout=90_000)

    def texts(self, lang: str) -> list[str]:
        """The page's texts with each tab open in turn (only the open tab is in the page); the
        first tab is open again at the end."""
        texts = self.page.evaluate(JS_TEXTS)
        tabs = self.page.locator(".bk-tab")
        for index, key in TAB_WORDS.items():
            tabs.nth(index).click()
            joined = f'() => ({JS_TEXTS})().join(" ").includes({json.dumps(text(key, lang))})'
            # (a click waits while the tab opened before it is still being drawn: keys.py; 15 s ran
            # out on a loaded machine)
            self.page.wait_for_function(joined, timeout=40_000)
            texts += self.page.evaluate(JS_TEXTS)
        tabs.nth(0).click()
        return texts

    def switch(self, name: str, lang: str) -> None:
        """Choose a language in the header's switch; the page reloads with ?lang=."""
        self.page.locator(".attn-language select").select_option(label=name)
        self.page.wait_for_url(re.compile(rf"[?&]lang={lang}\b"), timeout=30_000)
        self.ready()

    def close(self) -> None:
        assert self.outside == [], f"requests left 127.0.0.1: {self.outside[:5]}"
        assert self.errors == [], f"JavaScript errors: {self.errors[:3]}"
        self.context.close()


def assert_speaks(session: Session, lang: str, every_tab: bool = True) -> None:
    """The page is in `lang`: the catalogue's words for it are shown, no English one is left,
    the switch and the window title say so. `every_tab=False` reads the open tab only and skips
    the catalogue (each tab's texts take seconds to read; ?lang= checks them in full)."""
    texts = session.texts(lang) if every_tab else session.page.evaluate(JS_TEXTS)
    joined = "\n".join(texts)
    missing = [key for key in SHOWN if text(key, lang) not in joined] if every_tab else []
    assert missing == [], f"not shown in {lang}: {[(k, text(k, lang)) for k in missing]}"
    said = text("status.done", lang, run=1, decode_ms=0, views_ms=0).split("0 ms")[0]
    assert said in joined, said
    if lang != "en":
        english = {e["en"] for e in MESSAGES.values() if e[lang] != e["en"] and "{" not in e["en"]}
        english -= set(LANGUAGES.values())  # the switch names each language in its own words ("English")
        assert sorted(english.intersection(texts)) == [], f"English words on the {lang} page"
    assert session.page.locator(".attn-language select").input_value() in (lang, LANGUAGES[lang])
    assert session.page.title() == text("page.title", lang)
    assert session.page.evaluate("document.documentElement.lang") == lang  # <html lang="...">
    picker = session.page.locator(".attn-checkpoint select").evaluate(JS_OPTIONS)
    what = text("checkpoint.translator", lang, src=language_code("en", lang), tgt=language_code("zh", lang))
    assert f"{what} · tatoeba-en-zh" in picker, picker
    if lang != "en":  # the bundled checkpoints too, when there are any
        said = [name.rsplit(" · ", 1)[0] for name in picker if " · " in name]  # what each model does
        assert said and [s for s in said if re.search(r"\b(translator|parser)\b", s)] == [], picker
    session.page.screenshot(path=ARTIFACTS / f"i18n-{lang}.png", full_page=True)


def test_english_by_default(chromium: object, server: Server) -> None:
    session = Session(chromium, server.url)
    try:
        assert_speaks(session, "en")
    finally:
        session.close()


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_lang_parameter_sets_the_language(chromium: object, server: Server, lang: str) -> None:
    session = Session(chromium, f"{server.url}?lang={lang}")
    try:
        assert_speaks(session, lang)
    finally:
        session.close()


def test_the_switch_reloads_the_page_in_spanish_then_chinese(chromium: object, server: Server) -> None:
    """Each switch reloads the page in the new language, with the typed text and the open model
    carried over in the address (a switch once started the reader afresh, on the example)."""
    session = Session(chromium, server.url)
    try:
        assert_speaks(session, "en", every_tab=False)  # (the catalogue: test_english_by_default, ?lang= below)
        picker = session.page.locator(".attn-checkpoint select")
        picker.select_option(label=next(o for o in picker.evaluate(JS_OPTIONS) if o.endswith("· tatoeba-en-zh")))
        session.ready(2)
        session.page.locator(".attn-source textarea").fill("The cat sits on the red mat .")
        session.page.locator(".attn-reference textarea").fill("猫坐在红垫子上。")  # typed, not sent (it was dropped)
        session.switch("Español", "es")
        assert session.page.locator(".attn-source textarea").input_value() == "The cat sits on the red mat ."
        assert session.page.locator(".attn-reference textarea").input_value() == "猫坐在红垫子上。"
        assert picker.evaluate("s => s.options[s.selectedIndex].textContent").endswith("· tatoeba-en-zh")
        assert "text=The+cat+sits" in session.page.url and "checkpoint=tatoeba-en-zh" in session.page.url
        assert_speaks(session, "es", every_tab=False)
        session.page.locator(".attn-reference textarea").fill("")  # emptied: the address keeps no reference
        session.switch("中文", "zh")
        assert_speaks(session, "zh", every_tab=False)
        assert (
            "reference=" not in session.page.url
            and session.page.locator(".attn-reference textarea").input_value() == ""
        )
        assert session.page.url.count("lang=") == 1  # the parameter is replaced, not repeated
        session.switch("English", "en")
        assert_speaks(session, "en", every_tab=False)
    finally:
        session.close()


@pytest.mark.parametrize(
    ("locale", "accept_language", "query", "lang"),
    [
        ("es-ES", None, "", "es"),  # the browser's own language (Playwright sets Accept-Language from it)
        ("en-US", "fr-FR,fr;q=0.9,zh-CN;q=0.8,en;q=0.5", "", "zh"),  # the first one we have
        ("es-ES", None, "?lang=en", "en"),  # ?lang= wins over the browser
    ],
)
def test_the_browsers_language_is_the_default(
    chromium: object, server: Server, locale: str, accept_language: str | None, query: str, lang: str
) -> None:
    session = Session(chromium, server.url + query, locale=locale, accept_language=accept_language)
    try:
        assert_speaks(session, lang, every_tab=False)
    finally:
        session.close()


def test_errors_reach_a_spanish_reader_in_spanish(chromium: object, server: Server) -> None:
    session = Session(chromium, f"{server.url}?lang=es")
    error = session.page.locator(".attn-error-text")
    try:
        session.page.locator(".attn-path input").fill("/etc")
        session.page.get_by_role("button", name=text("page.open", "es"), exact=True).click()
        refusal = text("error.refused", "es", roots="§").split("§")[0]  # up to the roots' names
        error.filter(has_text=refusal).wait_for(timeout=10_000)
        session.page.locator(".attn-source textarea").fill("   ")
        session.page.locator(".attn-go button").click()
        error.filter(has_text=text("error.input_empty", "es")).wait_for(timeout=10_000)
        assert error.inner_text() == text("error.input_empty", "es")  # all in Spanish, no English detail
        session.page.screenshot(path=ARTIFACTS / "i18n-es-error.png", full_page=True)
    finally:
        session.close()
