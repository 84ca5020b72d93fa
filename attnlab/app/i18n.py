"""The interface's words in English, Spanish and Chinese: one catalogue for the explorer and the
widgets (its entries: `attnlab.app.catalogue`), so that a missing translation is a test failure
rather than an English word in a Chinese page (tests/test_i18n.py checks every entry has every
language). `text(key, lang, name=...)` looks an entry up and fills its `{name}` fields; a
sentence that counts (`{count}`) may have a singular entry `KEY.one` (see `text`).

A page's language is `language(?lang=, Accept-Language)`. attnlab's errors are raised in English
deep in the library, where no page is known; `error_message` puts a lead line in the reader's
language (per error class) before the English detail.
"""

from __future__ import annotations

from attnlab.app.catalogue import MESSAGES
from attnlab.errors import CheckpointError, ConfigError, DataError, ModelInputError, TimeLimitError
from attnlab.record.stats import head_pattern
from attnlab.viz.words import Spaced

LANGUAGES: dict[str, str] = {"en": "English", "es": "Español", "zh": "中文"}
DEFAULT = "en"


def text(key: str, lang: str = DEFAULT, **values: object) -> str:
    """The entry `key` in `lang` (English where `lang` is unknown), its fields filled in.

    Plurals: the number a sentence counts things by is its field `{count}`; where that is 1 and
    the catalogue has an entry `KEY.one`, that entry is read instead ("1 head off", "1 cabeza
    desactivada"; any other count, 0 included, reads `KEY`: "2 heads off"). English and Spanish
    have these two forms; Chinese has no plural, so its `.one` repeats its sentence.

    Chinese spacing: an entry cannot know what its fields will hold ("平均 {stat}": 平均熵 but
    平均 AER), so in Chinese the spaces at each filled field's edges are settled after filling
    (`viz.words.Spaced`, which the figures' Chinese templates fill with too)."""
    if values.get("count") == 1 and f"{key}.one" in MESSAGES:
        key = f"{key}.one"
    entry = MESSAGES[key]
    template = entry.get(lang if lang in LANGUAGES else DEFAULT, entry[DEFAULT])
    for name, value in values.items() if lang == "es" else ():  # a field written {n:,}: Spanish groups it its way
        if isinstance(value, int) and not isinstance(value, bool) and f"{{{name}:,}}" in template:
            template, values[name] = template.replace(f"{{{name}:,}}", f"{{{name}}}"), grouped(value, lang)
    if not values:
        return template
    return (Spaced(template) if lang == "zh" else template).format(**values)


def grouped(number: int, lang: str = DEFAULT) -> str:
    """A whole number with its digits grouped as `lang` writes them: 3,026 and 100,000 in English
    and Chinese; in Spanish 3026 and 100 000 (the RAE's rule: a comma there reads as the decimal
    one, "paso 3,026" as three point zero two six; four digits stay whole, more go in threes with
    a narrow space)."""
    if lang != "es":
        return f"{number:,}"
    return str(number) if abs(number) < 10_000 else f"{number:,}".replace(",", "\u202f")


def listed(items: list[str], lang: str = DEFAULT) -> str:
    """`items` as a sentence lists them: "a, b, c"; in Chinese with the enumeration comma, "a、b、c"."""
    return ("、" if lang == "zh" else ", ").join(items)


def sentences(parts: list[str], lang: str = DEFAULT) -> str:
    """Sentences one after another: a space between them, none in Chinese, whose full stop "。"
    is wide ("两者输出相同。 B 的注意力图…" had a stray space)."""
    return ("" if lang == "zh" else " ").join(parts)


def checked(lang: str) -> str:
    """`lang` as a caller chose it (the widgets' `lang=`): one we have, exactly ("ES" and "zh-CN"
    are refused too, rather than guessed), else a one-line `ConfigError` naming those we have."""
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ConfigError(f"lang must be one of {', '.join(map(repr, LANGUAGES))}, got {lang!r}")
    return lang


def head_pattern_text(stats: list[dict], kind: str, layer: int, head: int, lang: str = DEFAULT) -> str:
    """What a head does on the sentence `stats` (its `head_stats`) were read from, in a sentence
    (`attnlab.record.stats.head_pattern`): a reader new to attention learns what to look for in
    its map. "" when `stats` hold no such head."""
    row = next((r for r in stats if (r["kind"], r["layer"], r["head"]) == (kind, layer, head)), None)
    if row is None:
        return ""
    name, share = head_pattern(row)
    if kind == "decoder" and name in ("self", "prev"):  # its queries are named by the pieces they predict
        name += "_decoder"
    what = text(  # (the keys written out, for the catalogue's test to read)
        {
            "self_decoder": "pattern.self_decoder",
            "prev_decoder": "pattern.prev_decoder",
            "prev": "pattern.prev",
            "self": "pattern.self",
            "next": "pattern.next",
            "diagonal": "pattern.diagonal",
            "first": "pattern.first",
            "eos": "pattern.eos",
            "peaked": "pattern.peaked",
            "broad": "pattern.broad",
            "mixed": "pattern.mixed",
        }[name],
        lang,
        share=share,
    )
    return text("pattern.lead", lang, what=what)


def task_name(task: str, lang: str = DEFAULT) -> str:
    """What a model does, as the page says it ("translate", "traducción", "句法分析"); a task
    with no entry (a config may name any) is shown as it is."""
    return {"translate": text("task.translate", lang), "parse": text("task.parse", lang)}.get(task, task)


def kind_name(kind: str, lang: str = DEFAULT) -> str:
    """A kind of attention as a button or a picker names it ("cross", "cruzada", "交叉")."""
    return {
        "encoder": text("kind.encoder", lang),
        "decoder": text("kind.decoder", lang),
        "cross": text("kind.cross", lang),
    }.get(kind, kind)


def kind_title(kind: str, lang: str = DEFAULT) -> str:
    """A kind of attention in full, as a title or a tooltip says it ("encoder–decoder attention")."""
    return {
        "encoder": text("kind.encoder.title", lang),
        "decoder": text("kind.decoder.title", lang),
        "cross": text("kind.cross.title", lang),
    }.get(kind, kind)


def language_name(code: str, lang: str = DEFAULT) -> str:
    """A language (ISO 639 code, e.g. "en") by name, as `lang` writes it ("English", "inglés",
    "英语"); a code with no entry is shown as the code itself ("PT")."""
    return {
        "en": text("lang.en", lang),
        "de": text("lang.de", lang),
        "fr": text("lang.fr", lang),
        "es": text("lang.es", lang),
        "zh": text("lang.zh", lang),
        "ro": text("lang.ro", lang),
    }.get(code, code.upper())


def language_code(code: str, lang: str = DEFAULT) -> str:
    """A language in a pair ("EN→DE"), as `lang` writes it: the code in English and Spanish, a
    character in Chinese ("英→德"); a code with no entry is shown as the code itself."""
    return {
        "en": text("lang.en.code", lang),
        "de": text("lang.de.code", lang),
        "fr": text("lang.fr.code", lang),
        "es": text("lang.es.code", lang),
        "zh": text("lang.zh.code", lang),
        "ro": text("lang.ro.code", lang),
    }.get(code, code.upper())


def said_whole(error: BaseException, lang: str) -> str | None:
    """The message of an error that names its catalogue entry (`AttnlabError.key`), in `lang`."""
    fields = getattr(error, "fields", {})
    match getattr(error, "key", None):
        case "input_empty":
            return text("error.input_empty", lang)
        case "target_empty":
            return text("error.target_empty", lang)
        case "input_too_long":
            return text("error.input_too_long", lang, **fields)
        case "target_too_long":
            return text("error.target_too_long", lang, **fields)
        case "no_difference":
            return text("error.no_difference", lang, **fields)
        case "patch_none":
            return text("compare.patch_none", lang)
    return None


def error_message(error: BaseException, lang: str = DEFAULT, detail: str | None = None) -> str:
    """One of attnlab's errors as a reader of `lang` sees it.

    The library raises English one-liners from deep inside (a tokenizer, a checkpoint reader), where
    no page and no language is known. In English the message is shown as it is (`detail`: the
    message as the screen tidied it, default `str(error)`); in another language a lead line from
    the catalogue says, per error class, what went wrong, and the English detail follows it for
    the specifics (a file name, a size) and for a search or a bug report. An error a reader
    meets often (an empty box, a text too long) names its catalogue entry (`key`): it is said
    whole in the reader's language."""
    detail = str(error) if detail is None else detail
    if lang not in LANGUAGES or lang == DEFAULT:
        return detail
    whole = said_whole(error, lang)
    if whole is not None:
        return whole
    if isinstance(error, TimeLimitError):
        lead = text("error.time_limit", lang)
    elif isinstance(error, ModelInputError):
        lead = text("error.input", lang)
    elif isinstance(error, CheckpointError):
        lead = text("error.checkpoint", lang)
    elif isinstance(error, DataError):
        lead = text("error.data", lang)
    elif isinstance(error, ConfigError):
        lead = text("error.config", lang)
    else:
        lead = text("error.other", lang)
    return text("error.with_detail", lang, lead=lead, detail=detail)


def language(requested: str | None = None, accept_language: str | None = None) -> str:
    """The page's language: `?lang=` when it names one we have (`es`, or `es-MX`), else the first
    of the browser's preferred languages (its Accept-Language header, e.g.
    "es-ES,es;q=0.9,en;q=0.8") that we have, by quality and then order, else English. A language
    the browser marks `q=0` is one it does not want."""
    wanted = (requested or "").strip().lower().replace("_", "-").split("-")[0]
    if wanted in LANGUAGES:
        return wanted
    ranked = []
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if quality > 0:
            ranked.append((-quality, i, tag.strip().lower().replace("_", "-").split("-")[0]))
    for _, _, tag in sorted(ranked):
        if tag in LANGUAGES:
            return tag
    return DEFAULT
