"""The interface's words in English, Spanish and Chinese: one catalogue for the explorer and the
widgets, so that a missing translation is a test failure rather than an English word in a
Chinese page (tests/test_i18n.py checks every entry has every language).

Entries are written for each language (short labels a native reader would choose), not rendered
word for word. `{name}` fields are filled by `text(key, lang, name=...)`.
"""

from __future__ import annotations

LANGUAGES: dict[str, str] = {"en": "English", "es": "Español", "zh": "中文"}
DEFAULT = "en"

MESSAGES: dict[str, dict[str, str]] = {
    "language": {"en": "Language", "es": "Idioma", "zh": "语言"},
    # --- compare mode (#17) ---
}


def text(key: str, lang: str = DEFAULT, **values: object) -> str:
    """The entry `key` in `lang` (English where `lang` is unknown), its fields filled in."""
    entry = MESSAGES[key]
    template = entry.get(lang if lang in LANGUAGES else DEFAULT, entry[DEFAULT])
    return template.format(**values) if values else template


def language(requested: str | None = None, accept_language: str | None = None) -> str:
    """The page's language: `?lang=` when it names one we have, else the first of the browser's
    preferred languages (its Accept-Language header, e.g. "es-ES,es;q=0.9,en;q=0.8") that we
    have, else English."""
    if requested and requested.lower() in LANGUAGES:
        return requested.lower()
    ranked = []
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        ranked.append((-quality, i, tag.strip().lower().split("-")[0]))
    for _, _, tag in sorted(ranked):
        if tag in LANGUAGES:
            return tag
    return DEFAULT
