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
from the server's cache; the typed text is not kept).
"""

from __future__ import annotations

import panel as pn

from attnlab.app.i18n import LANGUAGES, language, text

# In the browser: the Select's value is the language's code (Panel sends {code: native name} as
# (value, label) pairs); the page reloads at the same address with `lang` set.
RELOAD = """
const url = new URL(window.location.href);
if (url.searchParams.get("lang") !== cb_obj.value) {
  url.searchParams.set("lang", cb_obj.value);
  window.location.assign(url.toString());
}
"""


def session_language() -> str:
    """The language of the session being built: its `?lang=`, else its Accept-Language header,
    else English (outside a server session, e.g. in a notebook: English)."""
    requested = (pn.state.session_args or {}).get("lang") or [b""]
    value = requested[0]
    requested_text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    headers = pn.state.headers or {}
    accept = headers.get("Accept-Language") or headers.get("accept-language") or ""
    if isinstance(accept, list):
        accept = ",".join(accept)
    return language(requested_text, accept)


def language_switch(lang: str) -> pn.widgets.Select:
    """The header's Select of the languages, each by its own name ("Español", "中文"); choosing
    one reloads the page in it."""
    switch = pn.widgets.Select(
        label=text("language", lang),
        options={name: code for code, name in LANGUAGES.items()},
        value=lang,
        width=110,
        css_classes=["attn-language"],
    )
    switch.jscallback(value=RELOAD)
    return switch
