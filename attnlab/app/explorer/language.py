"""The page's language and the switch in its header.

A session's language is chosen once, when the page is requested: `?lang=en|es|zh` when the URL
names one, else the browser's preferred languages (its Accept-Language header), else English
(`attnlab.app.i18n.language` does the ranking). It is the store's `lang`, which every view reads
when it builds its widgets and writes its words.

The switch reloads the page with `?lang=xx` (other query parameters kept) rather than relabelling
the page in place: the views write their words when they draw, in many places (labels, tab
titles, captions, notices, figure titles), and a reload draws all of them again in the new
language by the same code that drew the first ones, so no view is ever half translated and the
URL says what the page shows. What the reload costs: the session starts again (the model comes
from the server's cache); the typed text and the open model ride along in the address (`?text=`,
`?checkpoint=`, up to `CARRIED_CHARS`), so the same sentence is decoded again in the new language,
and the rest of what the address names (`link`: the reference, the view, the head) with them.

The page itself says its language too (`<html lang="zh">`): browsers pick fonts by it (a Chinese
page gets Chinese glyph shapes for the characters Chinese and Japanese share), and screen readers
and translators read it. Panel's page template writes `lang="en"`; `set_page_language` gives the
session's document the same template with the session's language in its place.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import panel as pn
from panel.io.resources import BASE_TEMPLATE, parse_template

if TYPE_CHECKING:
    from jinja2 import Template

from attnlab.app.explorer.link import CARRIED_CHARS, requested
from attnlab.app.i18n import LANGUAGES, language, text

# In the browser: the Select's value is the language's code (Panel sends {code: native name} as
# (value, label) pairs); the page reloads at the same address with `lang` set, and with the text
# typed and the model open (its directory's name, the part of a picker entry after " · ") carried
# over as `text` and `checkpoint`, which `app` reads: a switch once started the reader afresh.
# The two widgets are found in the document by their classes: the switch holds no reference to them.
RELOAD = """
const url = new URL(window.location.href);
if (url.searchParams.get("lang") !== cb_obj.value) {
  url.searchParams.set("lang", cb_obj.value);
  const find = (name) => [...cb_obj.document.all_models].find(m => (m.css_classes || []).includes(name));
  const checkpoint = find("attn-checkpoint");
  for (const [name, box] of [["text", find("attn-source")], ["reference", find("attn-reference")]]) {
    const typed = box ? box.value_input ?? box.value ?? "" : "";  // what is typed, sent or not
    if (typed.length <= MAX && (typed || name === "text")) url.searchParams.set(name, typed);
    else url.searchParams.delete(name);
  }
  if (checkpoint && checkpoint.value) url.searchParams.set("checkpoint", checkpoint.value.split(" · ").pop());
  window.location.assign(url.toString());
}
"""


def session_language() -> str:
    """The language of the session being built: its `?lang=`, else its Accept-Language header,
    else English (outside a server session, e.g. in a notebook: English)."""
    requested_text = requested("lang")
    headers = pn.state.headers or {}
    accept = headers.get("Accept-Language") or headers.get("accept-language") or ""
    if isinstance(accept, list):
        accept = ",".join(accept)
    return language(requested_text, accept)


def _page_template() -> Template | None:
    """Panel's page template with `lang` read from the document's `html_lang` variable, or None
    when this Panel's template has no `<html lang="en"` to replace; and a phone's viewport: without
    one a phone laid the page out 980 px wide and shrank it to 40%, its text 4-5 px high."""
    source, tag, charset = (
        Path(BASE_TEMPLATE.filename).read_text(encoding="utf-8"),
        '<html lang="en"',
        '<meta charset="utf-8">',
    )
    if tag not in source:
        return None
    source = source.replace(
        charset, f'{charset}<meta name="viewport" content="width=device-width, initial-scale=1">', 1
    )
    return parse_template(source.replace(tag, "<html lang=\"{{ html_lang | default('en') }}\"", 1))


PAGE_TEMPLATE = _page_template()


def set_page_language(lang: str) -> None:
    """Serve the page of the session being built as `<html lang="{lang}">` (outside a server
    session, e.g. in a notebook, there is no page of its own: nothing to do)."""
    doc = pn.state.curdoc
    if PAGE_TEMPLATE is None or doc is None or doc.session_context is None:
        return
    doc.template = PAGE_TEMPLATE
    doc.template_variables["html_lang"] = lang if lang in LANGUAGES else "en"


def language_switch(lang: str) -> pn.widgets.Select:
    """The header's Select of the languages, each by its own name ("Español", "中文"); choosing
    one reloads the page in it, with the text of the `attn-source` and `attn-reference` boxes
    (typed, sent or not: a reference not yet sent was dropped) and the model the `attn-checkpoint`
    picker shows."""
    switch = pn.widgets.Select(
        label=text("language", lang),
        options={name: code for code, name in LANGUAGES.items()},
        value=lang,
        width=100,  # (with the 220 px title, clear of the views column beside the 350 px inputs)
        css_classes=["attn-language"],
    )
    switch.jscallback(value=RELOAD.replace("MAX", str(CARRIED_CHARS)))
    return switch
