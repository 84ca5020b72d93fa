"""The explorer and the widgets in English, Spanish and Chinese: one catalogue (`attnlab.app.i18n`).

Three kinds of checks:
- the catalogue itself: every entry in every language, non-empty, with the same `{fields}`; a
  singular (`KEY.one`, read for a count of 1) beside its entry, and no "head(s)" left;
- the source (ast): every `text("key", ...)` names an entry (and every entry is used), and no
  user-visible string literal is written in the explorer's or the widgets' code instead of coming
  from the catalogue. The scanner is tried on synthetic code too, so that it is seen to fail;
- the running screens: the explorer (in Python, on a random tiny model) and the widgets built in
  Spanish and Chinese show no English word of the catalogue, and attnlab's errors reach them
  with a lead line in their language.

The explorer in a real browser (the switch, `?lang=`, Accept-Language) is tests/test_i18n_browser.py.
"""

from __future__ import annotations

import ast
import html
import inspect
import re
import string
from pathlib import Path

import ipywidgets as w
import pytest
from test_notebooks import make_checkpoints

from attnlab.app import i18n
from attnlab.app.i18n import LANGUAGES, MESSAGES, error_message, language, text
from attnlab.errors import AttnlabError, CheckpointError, ConfigError, DataError, ModelInputError, TimeLimitError

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "attnlab" / "app"
SCREENS = [
    *sorted((APP / "explorer").glob("*.py")),
    *sorted(APP.glob("*_widget.py")),  # every notebook box (saliency's was missed when listed by hand)
    *sorted(APP.glob("*_text.py")),
    *(APP / name for name in ("widgets.py", "notebook.py", "replay.py")),
]


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


# -- the catalogue ---------------------------------------------------------------------------------------
def test_every_entry_has_every_language_with_the_same_fields() -> None:
    assert set(LANGUAGES) == {"en", "es", "zh"} and len(MESSAGES) > 100
    for key, entry in MESSAGES.items():
        assert set(entry) == set(LANGUAGES), f"{key}: has {sorted(entry)}, not {sorted(LANGUAGES)}"
        for lang, template in entry.items():
            assert template.strip() == template and template, f"{key} [{lang}] is empty or padded"
            assert fields(template) == fields(entry["en"]), f"{key} [{lang}]: fields {fields(template)} ≠ English's"
            text(key, lang, **dict.fromkeys(fields(template), 2))  # formats (2 fits every spec: ',', '.3f', '+g';
            # and, as a count, is not 1: `text` reads this entry, not its `.one`)


def test_a_singular_entry_goes_with_its_plural_one() -> None:
    """`KEY.one` is what `text` reads where `{count}` is 1: it has its entry `KEY`, which counts
    with `{count}`, and the same fields; Chinese has no plural, so its `.one` repeats the sentence.
    No English or Spanish entry hedges a plural ("head(s)", "cabeza(s) desactivada(s)")."""
    singular = [key for key in MESSAGES if key.endswith(".one")]
    assert len(singular) >= 4, singular
    for key in singular:
        base = MESSAGES.get(key.removesuffix(".one"))
        assert base is not None, f"{key}: no entry {key.removesuffix('.one')!r} to be the singular of"
        assert "count" in fields(base["en"]), f"{key}: its entry has no {{count}} to be chosen by"
        assert fields(MESSAGES[key]["en"]) == fields(base["en"]), f"{key}: fields ≠ its entry's"
        assert MESSAGES[key]["zh"] == base["zh"], f"{key} [zh]: Chinese has no plural"
    hedges = r"\w\((?:s|es|a|as|o|os)\)"  # head(s), carácter(es), desactivada(s)
    assert [f"{k} [{lang}]" for k, e in MESSAGES.items() for lang in ("en", "es") if re.search(hedges, e[lang])] == []


def test_a_count_of_one_reads_in_the_singular() -> None:
    said = {(lang, n): text("compare.heads_off", lang, count=n) for lang in LANGUAGES for n in (0, 1, 2)}
    assert said == {
        ("en", 0): "0 heads off",
        ("en", 1): "1 head off",
        ("en", 2): "2 heads off",
        ("es", 0): "0 cabezas desactivadas",
        ("es", 1): "1 cabeza desactivada",
        ("es", 2): "2 cabezas desactivadas",
        ("zh", 0): "关闭 0 个头",
        ("zh", 1): "关闭 1 个头",
        ("zh", 2): "关闭 2 个头",
    }
    assert text("ablation.verdict", "es", count=1, verdict="cambia") == "Con 1 cabeza desactivada, la salida cambia:"
    assert text("ablation.verdict", "es", count=2, verdict="cambia") == "Con 2 cabezas desactivadas, la salida cambia:"
    assert text("ablation.verdict", "en", count=1, verdict="unchanged") == "With 1 head off the output is unchanged:"
    assert text("notice.unknown_characters", "es", count=1, characters="☃").startswith("1 carácter no está en")
    assert text("notice.unknown_characters", "en", count=3, characters="☃").startswith("3 characters are not in")


def test_the_spanish_and_chinese_entries_are_written_in_their_language() -> None:
    """Not English copied over: a Chinese entry with words has Chinese characters, and most Spanish
    entries differ from the English ones (the same ones are symbols, units, format names; codes
    such as "PNG" or a language's "EN", which read the same in Spanish, are not counted)."""
    for key, entry in MESSAGES.items():
        words = re.sub(r"\{[^}]*\}", "", entry["en"])
        if re.search(r"[^\W\d_]{3,}", words) and not re.fullmatch(r"[A-Z]{2,5}|log P", words.strip()):
            assert re.search(r"[\u4e00-\u9fff]", entry["zh"]), f"{key} [zh] has no Chinese: {entry['zh']!r}"
    same = [k for k, e in MESSAGES.items() if e["es"] == e["en"] and not re.fullmatch(r"[A-Z]{2,5}", e["en"])]
    assert len(same) < 12, same


def test_a_sentence_starts_with_a_capital_in_every_language() -> None:
    """An entry that is a sentence in English (a capital, a full stop) is one in Spanish too: the
    patching box's line on where the change sits began "en el codificador ..." under a Spanish page.
    (Chinese has no capitals.)"""
    lower = [
        key
        for key, entry in MESSAGES.items()
        if entry["en"][:1].isupper() and entry["en"].rstrip().endswith((".", "?"))
        and entry["es"][:1].isalpha() and not entry["es"][:1].isupper()
    ]  # fmt: skip
    assert lower == []


def test_spanish_patching_says_sustituir_not_the_anglicism_parchear() -> None:
    """Activation patching in Spanish: what English calls patching (a head's or a layer's output
    taken from one run into the other) is "sustituir" in every entry; "parchear", an anglicism a
    Spanish-speaking researcher does not write, is in none. The method's name "attribution
    patching" stays as it is, a term of art, as English readers search for it."""
    assert [key for key, entry in MESSAGES.items() if re.search("parche", entry["es"], re.IGNORECASE)] == []
    patching = [
        key
        for key, entry in MESSAGES.items()
        if re.search(r"\bpatch(ed|es|ing)?\b", entry["en"].replace("attribution patching", ""), re.IGNORECASE)
    ]
    assert len(patching) >= 8, patching
    assert [key for key in patching if "sustitu" not in MESSAGES[key]["es"].lower()] == []


def test_an_entry_that_sends_the_reader_to_a_tab_names_it_as_the_tab_reads() -> None:
    """An entry such as "pick the heads in the Head ablation tab" sends the reader to a tab, who
    looks for its title: in Spanish and Chinese the entry names the tab by its title in that
    language (the compare tab's lines sent a Spanish reader to a "pestaña de desactivación de
    cabezas" and a Chinese one to a "关闭注意力头" tab, where the tab reads "Ablación de cabezas"
    and "注意力头消融")."""
    tabs = [entry for key, entry in MESSAGES.items() if key.startswith("tab.") or key.endswith(".tab")]
    sending = {
        (key, tab["en"]): [lang for lang in ("es", "zh") if tab[lang] not in entry[lang]]
        for key, entry in MESSAGES.items()
        for tab in tabs
        if re.search(rf"(?:{re.escape(tab['en'])} tab|(?:under|in) {re.escape(tab['en'])})\b", entry["en"])
    }
    assert len(sending) >= 5, sending  # the compare tab's lines pointing to the Head ablation tab
    assert {sent: langs for sent, langs in sending.items() if langs} == {}


def test_spanish_groups_digits_its_own_way() -> None:
    """A field written {n:,} read "paso 3,026" in Spanish, where a comma is the decimal one: four
    digits stay whole, more go in threes with a narrow space (the RAE's rule); English and Chinese
    keep the comma."""
    assert text("timeline.title", "es", step=3026, head="h") == "paso 3026 · h"
    assert text("timeline.title", "es", step=123456, head="h") == "paso 123\u202f456 · h"
    assert text("timeline.title", "en", step=3026, head="h") == "step 3,026 · h"
    assert text("timeline.title", "zh", step=3026, head="h").startswith("第 3,026 步")
    assert i18n.grouped(999, "es") == "999" and i18n.grouped(-12345, "es") == "-12\u202f345"


def test_chinese_spaces_a_field_by_what_fills_it() -> None:
    """Chinese puts a space between Chinese and a Latin letter or digit, none between two Chinese
    words, and an entry cannot know which its field holds: "平均 {stat}" read "平均 熵", and
    "读取{first}的输出" "读取A的输出". `text` settles the spaces at a filled field's edges."""
    grid = {stat: text("corpus.grid_title", "zh", kind="交叉注意力", stat=stat) for stat in ("熵", "AER")}
    assert grid == {"熵": "交叉注意力：各头的平均熵（点击查看）", "AER": "交叉注意力：各头的平均 AER（点击查看）"}
    largest = text("corpus.extremes_largest", "zh", kind="交叉注意力", layer=1, head=2, stat="熵")
    assert largest == "交叉注意力 · 第 1 层 · 头 2：熵最大的句子（点击打开）"  # the entry's own spaces stay
    lens = {first: text("compare.lens_title_second", "zh", name="B", first=first) for first in ("A", "模型甲")}
    assert lens == {
        "A": "B · logit 透镜，读取 A 的输出（红色：不是 A 在该处的词元）",
        "模型甲": "B · logit 透镜，读取模型甲的输出（红色：不是模型甲在该处的词元）",
    }
    pairs = [text("checkpoint.translator", "zh", src="英", tgt=tgt) for tgt in ("德", "PT")]
    assert pairs == ["英→德翻译模型", "英→PT 翻译模型"]  # PT: a language with no character of its own
    assert text("timeline.entropy", "zh", kind="cross", layer=1) == "熵（cross，第 1 层）"  # punctuation: no space
    assert text("corpus.grid_title", "en", kind="cross", stat="entropy") == "cross: mean entropy per head (click one)"


def test_text_fills_fields_and_falls_back_to_english() -> None:
    assert text("status.done", "es", run=3, decode_ms=12.4, views_ms=40) == (
        "ejecución 3 · decodificado en 12 ms · todas las vistas en 40 ms"
    )
    assert text("page.translate", "zh") == "翻译" and text("page.translate", "fr") == "Translate"
    assert i18n.kind_name("cross", "es") == "cruzada" and i18n.kind_title("decoder", "zh") == "解码器自注意力（带掩码）"


@pytest.mark.parametrize(
    ("requested", "accept", "chosen"),
    [
        ("es", "zh-CN,zh;q=0.9", "es"),  # ?lang= wins over the browser
        ("ZH", None, "zh"),
        ("es-MX", None, "es"),
        ("fr", "zh-CN,zh;q=0.9,en;q=0.8", "zh"),  # a ?lang= we do not have: the browser decides
        (None, "fr-FR,fr;q=0.9,es;q=0.8,en;q=0.7", "es"),  # the first language we have, in order
        (None, "en;q=0.5,zh;q=0.9", "zh"),  # by quality, not by position
        (None, "zh-TW", "zh"),
        (None, "es;q=0,en", "en"),  # q=0: not wanted
        (None, "es;q=abc,zh", "zh"),  # a broken quality counts as not wanted
        (None, "de-DE,de;q=0.9", "en"),
        (None, "*", "en"),
        (None, "", "en"),
        (None, None, "en"),
    ],
)
def test_language_ranking(requested: str | None, accept: str | None, chosen: str) -> None:
    assert language(requested, accept) == chosen


def test_errors_keep_their_detail_and_get_a_lead_line_in_other_languages() -> None:
    empty = ModelInputError("the input is empty")
    assert error_message(empty, "en") == "the input is empty"  # English: the library's message, as it is
    assert error_message(empty, "es") == "El modelo no puede leer esta entrada. Detalle (en inglés): the input is empty"
    assert error_message(empty, "zh") == "模型无法读取此输入。详细信息（英文）：the input is empty"
    leads = {
        error_message(kind("x"), lang).split("x")[0]
        for kind in (TimeLimitError, ModelInputError, CheckpointError, DataError, ConfigError, AttnlabError)
        for lang in ("es", "zh")
    }
    assert len(leads) == 12  # one lead per class and language


def test_the_errors_a_reader_meets_most_are_said_whole_in_their_language(paths: dict[str, Path]) -> None:
    """An empty box and a text too long name their catalogue entry: said whole in Spanish and
    Chinese ("Detalle (en inglés): the input is empty" before), in English as the library says them."""
    from attnlab.app.checkpoints import open_model
    from attnlab.app.patching_text import compared_circuit
    from attnlab.record.patching import trace_patching

    model = open_model(paths["translate"])
    room = model.config.max_len - 1
    trace = model.translate("A dog runs .", beam=2, record=True).trace
    for call, key, fields in (
        (lambda: model.translate("  "), "error.input_empty", {}),
        (lambda: model.score("A dog .", " "), "error.target_empty", {}),
        (lambda: model.translate("dog " * (room + 5), truncate=False), "error.input_too_long", {"room": room}),
        (lambda: model.score("A dog .", "Hund " * (room + 5)), "error.target_too_long", {"room": room}),
        # the explorer's patching box with the open sentence unchanged ("Detalle (en inglés): the corrupted source")
        (lambda: trace_patching(model, trace, "A dog runs ."), "error.no_difference", {"nats": "+0.0000"}),
        # Compare's "where the change lives" before a changed sentence ("Detalle (en inglés): Para comparar…")
        (
            lambda: compared_circuit(model, trace, "", {}, "A", "es", {}, senders=1, threshold=0.1),
            "compare.patch_none",
            {},
        ),
    ):
        with pytest.raises(AttnlabError) as caught:
            call()
        error = caught.value
        assert error_message(error, "en") == str(error) == text(key, "en", **error.fields)
        assert {name: error.fields[name] for name in fields} == fields
        for lang in ("es", "zh"):
            assert error_message(error, lang) == text(key, lang, **error.fields) and "(" not in text(key, lang)[:2]
    from attnlab.app.explorer.store import sentence

    assert sentence(text("compare.patch_none", "zh")).endswith("句子。")  # (it ended "。.")


def test_the_refusal_says_what_the_roots_say(tmp_path: Path) -> None:
    """The explorer writes the path refusal from the catalogue (so that it is translated); in
    English it is the sentence `CheckpointRoots.refusal` makes, word for word."""
    from attnlab.app.explorer.store import Store, sentence
    from attnlab.app.roots import CheckpointRoots

    (tmp_path / "runs").mkdir()
    roots = CheckpointRoots([tmp_path / "runs"])
    for lang in LANGUAGES:
        store = Store(roots=roots, lang=lang)
        assert not store.open_request("/etc")
        assert store.error == text("error.refused", lang, roots="runs/")
    assert Store(roots=roots).error == "" and text("error.refused", "en", roots="runs/") == sentence(roots.refusal)


# -- the source ---------------------------------------------------------------------------------------------
def catalogue_calls(tree: ast.AST) -> list[tuple[int, list[str] | None]]:
    """(line, the keys it may name) of every `text(...)` / `i18n.text(...)` call; None for a key
    that is not written out (an f-string, a variable), which no test can check."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "text") or (
            isinstance(func, ast.Attribute) and func.attr == "text" and getattr(func.value, "id", "") == "i18n"
        ):
            found.append((node.lineno, literal_keys(node.args[0])))
    return found


def literal_keys(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = literal_keys(node.body), literal_keys(node.orelse)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):  # {name: "key", ...}[name]
        keys = [literal_keys(value) for value in node.value.values]
        return None if None in keys else [key for found in keys for key in found]
    return None


def app_sources() -> dict[str, str]:
    files = sorted(APP.rglob("*.py")) + sorted((ROOT / "apps").glob("*.py"))
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files}


def test_every_key_used_exists_and_every_entry_is_used() -> None:
    used, problems = set(), []
    for name, source in app_sources().items():
        for line, keys in catalogue_calls(ast.parse(source)):
            if keys is None:
                problems.append(f"{name}:{line}: the key is not written out, so it cannot be checked")
                continue
            used.update(keys)
            problems += [f"{name}:{line}: no entry {key!r}" for key in keys if key not in MESSAGES]
            problems += [f"{name}:{line}: {key!r} is read by count, not named" for key in keys if key.endswith(".one")]
    assert problems == []
    used |= {f"{key}.one" for key in used}  # a singular is used where its entry is (`text` picks it)
    assert sorted(set(MESSAGES) - used) == [], "entries no screen uses"


SHOWN_KEYWORDS = {"label", "name", "placeholder", "title", "description", "tooltip", "tooltips", "stat", "options"}
SHOWN_ATTRIBUTES = {"object", "value", "label", "name", "placeholder", "title", "description", "error", "options"}
TEXT_PANES = {"Markdown", "HTML", "Alert", "Str", "Label", "HTMLMath"}  # Panel panes, ipywidgets: first argument shown
SAYING_LISTS = {"notices", "notes"}  # lists of sentences a screen shows
VALUES = {"beam", "greedy"}  # literals that are an option's value, not words
NAMES = {"attnlab"}  # the project's name reads the same in every language


def words(node: ast.AST) -> str:
    """The words a literal (a string, an f-string, or strings in a list, tuple, dict or condition)
    shows a reader: markup, `{fields}` and symbols removed; '' when it shows none. What a call
    returns (e.g. `text(...)`) or a variable holds is no literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "" if node.value in VALUES else words_of(node.value)
    if isinstance(node, ast.JoinedStr):  # an f-string: its fields are not its words
        return words_of("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
    if isinstance(node, ast.IfExp):
        parts = [node.body, node.orelse]
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        parts = node.elts
    elif isinstance(node, ast.Dict):
        parts = [k for k in node.keys if k is not None]  # a dict's keys are its labels ({label: value})
    else:
        return ""
    return " ".join(w for w in map(words, parts) if w)


def words_of(literal: str) -> str:
    if re.fullmatch(r"[a-z0-9{}]+(?:[-_][a-z0-9{}]+)+", literal):  # an identifier ("timeline-heatmap", "cells-{}")
        return ""
    plain = re.sub(r"<code>.*?</code>|<[^>]*>|&\w+;|\{[^}]*\}", " ", literal)  # code reads the same everywhere
    return " ".join(w for w in re.findall(r"[^\W\d_]{2,}", plain) if w not in NAMES)


def shown_literals(source: str) -> list[tuple[int, str]]:
    """(line, words) of each string literal in `source` that a reader would see: passed as a
    label / name / placeholder / title / description, given to a text pane, assigned to what a
    widget shows, raised as an error, appended to notices, or written into HTML."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[int, str]] = []

    def flag(node: ast.AST) -> None:
        said = words(node)
        if said:
            found.append((node.lineno, said))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            for keyword in node.keywords:
                if keyword.arg in SHOWN_KEYWORDS:
                    flag(keyword.value)
            if called in TEXT_PANES and node.args:
                flag(node.args[0])
            if called.endswith("Error") and node.args:
                flag(node.args[0])
            if called == "Tabs":
                for arg in node.args:
                    if isinstance(arg, ast.Tuple) and arg.elts:
                        flag(arg.elts[0])
            if called == "append" and isinstance(func, ast.Attribute) and node.args:
                owner = func.value
                if getattr(owner, "attr", getattr(owner, "id", "")) in SAYING_LISTS:
                    flag(node.args[0])
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Attribute) and t.attr in SHOWN_ATTRIBUTES for t in node.targets):
                flag(node.value)
        elif isinstance(node, (ast.JoinedStr, ast.Constant)) and id(node) not in docstrings:
            parts = [node] if isinstance(node, ast.Constant) else node.values
            literal = "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in parts
            )
            if re.search(r"<[a-z/][^>]*>", literal):  # HTML: its text is shown
                flag(node)
    return sorted(dict(found).items())  # one finding per line


def test_no_user_visible_string_is_written_outside_the_catalogue() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}": said
        for path in SCREENS
        for line, said in shown_literals(path.read_text(encoding="utf-8"))
    }
    assert found == {}, "user-visible words that do not come from attnlab.app.i18n"


def test_the_scanner_finds_each_kind_of_stray_word() -> None:
    stray = '''
import panel as pn
def build(store, lang):
    """A docstring with <b>HTML</b> is no label."""
    select = pn.widgets.Select(label="Checkpoint", options={"beam": "beam"})
    tabs = pn.Tabs(("Heads", None), (text("tab.equation", lang), None))
    note = pn.pane.HTML("<b>Export</b>")
    store.error = "Give a directory to open."
    store.notices.append(f"The input has {n} characters")
    status.object = f"<span class='attn-run'>run {run} · decoded</span>"
    raise AttnlabError(f"{caller}() takes a checkpoint")
    fine = pn.widgets.Button(label=text("page.open", lang), css_classes=["attn-go"], align="end")
    fine.object = f"<span class='attn-caption'>{html.escape(caption)}</span>"
    fine.value = "beam"
'''
    lines = [line for line, _ in shown_literals(stray)]
    assert lines == [5, 6, 7, 8, 9, 10, 11], shown_literals(stray)
    keys = catalogue_calls(ast.parse("text('page.open', lang)\ntext(f'compare.{key}', lang)\ntext('a' if x else 'b')"))
    assert keys == [(1, ["page.open"]), (2, None), (3, ["a", "b"])]


# -- the screens, built ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster than two busy ones
    yield make_checkpoints(tmp_path_factory.mktemp("i18n"))
    torch.set_num_threads(threads)


def from_catalogue(shown: str, lang: str) -> bool:
    """Whether `shown` is one of the catalogue's entries in `lang`, its fields filled in somehow."""
    for entry in MESSAGES.values():
        pattern = "".join(
            re.escape(literal) + ("" if name is None else ".+?")
            for literal, name, _, _ in string.Formatter().parse(entry[lang])
        )
        if re.fullmatch(pattern, shown, flags=re.S):
            return True
    return False


def english_words(lang: str) -> set[str]:
    """Every English catalogue text (without fields) that reads differently in `lang` (but not
    "English": the language switch names each language in its own words)."""
    return {e["en"] for e in MESSAGES.values() if e[lang] != e["en"] and not fields(e["en"])} - set(LANGUAGES.values())


def panel_texts(explorer: object) -> list[str]:
    """What the explorer's widgets and panes show: names, labels, placeholders, option labels, tab
    titles, and the text of every HTML pane (markup removed, split at line breaks)."""
    import panel as pn

    texts = list(explorer.tabs._names)
    for widget in explorer.layout.select(pn.widgets.Widget):
        texts += [str(getattr(widget, a, "") or "") for a in ("name", "label", "placeholder")]
        options = getattr(widget, "options", None)
        if isinstance(options, dict):
            texts += list(options)
    for pane in explorer.layout.select(pn.pane.HTML):
        texts += re.split(r"<br>|</div>|</p>|</summary>|</th>", str(pane.object or ""))
    return [re.sub(r"<[^>]*>", "", t).strip() for t in texts]


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_explorer_speaks_the_language_it_was_built_in(paths: dict[str, Path], lang: str) -> None:
    from attnlab.app.explorer import Explorer

    explorer = Explorer({"tiny": str(paths["translate"])}, lang=lang)
    assert explorer.lang == explorer.store.lang == lang and explorer.language.value == lang
    explorer.open_listed("tiny")  # outside a server session: decodes and draws at once
    assert explorer.store.trace is not None and not explorer.store.error
    explorer.tabs.active = 3  # a tab's widgets are set up when it opens (the timeline's note)
    explorer.tabs.active = 4
    explorer.ablation.add_open_head()
    explorer.ablation.ablate()
    shown = panel_texts(explorer)
    for key in ("page.checkpoint", "page.source", "page.open", "tab.heads", "tab.ablation", "export.title"):
        assert text(key, lang) in shown, key
    store, model = explorer.store, explorer.store.model
    config = model.config
    said = text("status.done", lang, run=1, decode_ms=0, views_ms=0).split("0 ms")[0]  # up to the timings
    assert said in explorer.status.object and said.startswith(("ejecución 1 · ", "第 1 次运行 · "))
    task = f"<b>{text('task.translate', lang)}</b>"
    info = text(
        "page.model_info",
        lang,
        task=task,
        layers=2,
        heads=config.n_heads,
        d_model=config.d_model,
        vocab=config.vocab_size,
    )
    assert info in explorer.model_info.object and config.n_layers == 2
    q, k = store.trace.attention(store.kind, store.layer).shape[1:]
    kind = i18n.kind_name(store.kind, lang)
    caption = text(
        "heads.caption",
        lang,
        kind=kind,
        layer=store.layer,
        head=0,
        size=f"{q}×{k}",
        mask=text("heads.on", lang),
        scale="0..1",
    )
    assert html.escape(caption) in explorer.heads.caption.object
    decoding = text("decoding.settings", lang, beam=4, alpha=0.6)
    hypotheses = text("output.hypotheses", lang, count=len(store.result.hypotheses), decoding=decoding)
    assert text("output.translation", lang) in explorer.output.text.object and hypotheses in explorer.output.text.object
    effect = explorer.ablation.effect.objects[0].object
    assert any(
        text("ablation.verdict", lang, count=1, verdict=f"<b>{text(v, lang)}</b>") in effect
        for v in ("ablation.changed", "ablation.unchanged")
    )
    folder, command = "<code>probes/step_N/</code>", "<code>attnlab train --probes K</code>"
    assert explorer.timeline.note.object == text("timeline.none", lang, folder=folder, command=command)
    english = english_words(lang)
    assert sorted(t for t in shown if t in english) == [], "English words on a page in another language"
    import panel as pn

    widgets = explorer.layout.select(pn.widgets.Widget)
    labels = {str(getattr(w, a)) for w in widgets for a in ("name", "label", "placeholder") if getattr(w, a, None)}
    assert {t for t in labels if not from_catalogue(t, lang)} == set(), "widget labels not from the catalogue"
    helps = {w.description for w in widgets if getattr(w, "description", None)}
    assert {h for h in helps if not from_catalogue(h, lang)} == set(), "help texts (tooltips) not from the catalogue"
    assert text("page.beam_help", lang, most=32) in helps

    explorer.text_input.value = "  "
    explorer.translate()
    # said whole in the page's language (it read "El modelo no puede leer esta entrada. Detalle (en inglés): …")
    assert explorer.store.error == text("error.input_empty", lang) != text("error.input_empty", "en")


def label_px(label: str) -> float:
    """Pixels a widget label takes in Panel's 12 px Helvetica/Arial, as measured in Chromium: about
    5.4 a Latin character (the English reference label, 59 characters, is 308 px) and 12 a Chinese
    one (the Chinese reference label is 276 px)."""
    from attnlab.viz.labels import cluster_width, clusters

    return sum(12.0 if cluster_width(c) == 2 else 5.4 for c in clusters(label))


@pytest.mark.parametrize("lang", list(LANGUAGES))
def test_every_widget_label_fits_its_width(lang: str) -> None:
    """A label is one line cut at the widget's edge: the Spanish reference label (346 px in 320)
    lost its last words. Every tab's widgets, built with no model open."""
    import panel as pn

    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots

    explorer = Explorer({}, CheckpointRoots([]), lang=lang)
    too_wide = {
        label: widget.width
        for widget in explorer.layout.select(pn.widgets.Widget)
        if widget.width and not isinstance(widget, pn.widgets.Checkbox)  # a check box's label is beside it
        for label in {getattr(widget, "label", None) or widget.name}
        if label and label_px(label) > widget.width
    }
    assert too_wide == {}, f"labels wider than their widget in {lang}"


def test_the_page_fits_a_1024_px_window() -> None:
    """Beside the 350 px inputs a 1024 px window leaves 674 px: no row of widgets and no text pane
    is fixed wider (the output's 900 px pane, the ablation row's 890 and the patching row's 870
    made the page scroll sideways), and the tab titles go onto a second line (Bokeh cut them at the
    window's edge: "Logit lens" could not be clicked)."""
    import panel as pn

    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots

    explorer = Explorer({}, CheckpointRoots([]), lang="es")  # the longest words
    column = {c.width for c in explorer.layout[0]}.pop()  # the inputs' two columns, one over the other
    assert column == 350 and [c.width for c in explorer.layout[0]] == [350, 350]
    rows = {
        " + ".join(type(o).__name__ for o in row): sum((o.width or 0) + 10 for o in row)  # each with its margin
        for row in explorer.layout[1].select(pn.Row)
    }
    assert {row: px for row, px in rows.items() if px > 1024 - column} == {}
    panes = [p for kind in (pn.pane.HTML, pn.pane.Alert) for p in explorer.layout.select(kind)]
    panes = [p for p in panes if (p.width or 0) > 1024 - column]
    assert panes == [], [(p.css_classes, p.width) for p in panes]
    assert any("flex-wrap: wrap" in str(css) for css in explorer.tabs.stylesheets)


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_widgets_speak_lang(paths: dict[str, Path], lang: str) -> None:
    from attnlab import widgets

    explorer = widgets.explore(paths["translate"], text="A dog runs .", beam=2, lang=lang)
    view = explorer.view
    assert explorer.button.description == text("page.translate", lang)
    assert explorer.beam.description == text("widgets.beam", lang)
    assert view.mask.description == text("widgets.hatch", lang) and view.scale.description == text(
        "widgets.scale", lang
    )
    assert view.picker.layer.description == text("selection.layer", lang)
    assert [label for label, _ in view.picker.kind.options] == [i18n.kind_name(k, lang) for k in view.trace.kinds]
    assert view.picker.kind.tooltips[0] == i18n.kind_title(view.trace.kinds[0], lang)
    result = explorer.result
    pieces = text("widgets.pieces", lang, source=len(result.src_tokens), output=len(result.tokens))
    assert pieces in html.unescape(explorer.status.value)
    best = result.hypotheses[0]
    score = text("widgets.score", lang, score=best.score, logprob=best.logprob, count=len(best.tokens))
    which = text("widgets.hypothesis", lang, rank=1, count=len(result.hypotheses), score=score)
    assert html.escape(which) in explorer.output.value
    assert explorer.run("   ") is None
    # an empty box is said whole in the reader's language ("Detalle (en inglés): the input is empty")
    assert explorer.errors.message == text("error.input_empty", lang) != text("error.input_empty", "en")
    assert f"<b>{text('widgets.error', lang)}</b> {html.escape(explorer.errors.message)}" in explorer.errors.value
    compared = widgets.compare_models(explorer.model, text="A dog .", heads_off={("cross", 0): [0]}, lang=lang)
    assert compared.names == (text("widgets.all_heads", lang), text("widgets.heads_off", lang))
    assert compared.button.description == text("widgets.compare", lang)
    kind, layer, head = compared.picker.value
    names = {"kind": i18n.kind_name(kind, lang), "kind_title": i18n.kind_title(kind, lang)}
    title = text("compare.map_title", lang, name=compared.names[0], layer=layer, head=head, **names)
    assert " ".join(compared.figures["first"].title.text.split()) == title  # (a long one wraps)
    with pytest.raises(AttnlabError, match=re.escape(text("widgets.not_a_model", lang, caller="explore", got="int"))):
        widgets.explore(42, lang=lang)
    with pytest.raises(
        AttnlabError, match=re.escape(text("widgets.not_a_model", lang, caller="Explorer", got="NoneType"))
    ):
        widgets.Explorer(None, lang=lang)  # an AttributeError (NoneType ... no attribute task)
    # ipywidgets cuts a label longer than its box (a button 148 px, a checkbox 300): every one of
    # them, hidden parts too, is as wide as its label ("Sustituir cabeza a cabeza" was cut)
    found, boxes = [explorer, compared], []
    while found:
        widget = found.pop()
        found.extend(getattr(widget, "children", ()))
        if isinstance(widget, w.Button | w.Checkbox):
            boxes.append((widget.description, widget.layout.width))
    assert len(boxes) >= 12 and [box for box in boxes if box[1] != "auto"] == []


def test_every_public_widget_takes_lang_english_by_default() -> None:
    from attnlab.app import widgets

    wordless = {"plot", "setup"}  # they show a figure, or load BokehJS: no words of their own
    for name in sorted(set(widgets.__all__) - wordless):
        parameter = inspect.signature(getattr(widgets, name)).parameters.get("lang")
        assert parameter is not None and parameter.default == "en", f"{name}() takes no lang='en'"


# -- the checkpoint picker ---------------------------------------------------------------------------------------
def test_the_picker_names_models_in_the_page_language(tmp_path: Path) -> None:
    """What a checkpoint does, in each language, before its directory (" · NAME", which the
    browser tests read back)."""
    import json

    from attnlab.app.checkpoints import find_checkpoints

    for name, data in {
        "tatoeba-en-es": {"task": "translate", "src_lang": "en", "tgt_lang": "es", "corpus": "tatoeba"},
        "tatoeba-en-zh": {"task": "translate", "src_lang": "en", "tgt_lang": "zh", "corpus": "tatoeba"},
        "wsj-parser": {"task": "parse", "src_lang": "en", "tgt_lang": "ptb", "corpus": "ptb"},
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"model": {}, "meta": {"data": data}}))
        (tmp_path / name / "manifest.json").write_text("{}")
    expected = {
        "en": ["EN→ES translator", "EN→ZH translator", "English parser (WSJ)"],
        "es": ["Traductor EN→ES", "Traductor EN→ZH", "Analizador del inglés (WSJ)"],
        "zh": ["英→西翻译模型", "英→中翻译模型", "英语句法分析模型（WSJ）"],  # no space between Chinese words
    }
    for lang, described in expected.items():
        names = list(find_checkpoints(bundled=tmp_path, lang=lang))
        directories = ["tatoeba-en-es", "tatoeba-en-zh", "wsj-parser"]
        assert names == [f"{what} · {where}" for what, where in zip(described, directories, strict=True)]
    assert list(find_checkpoints(bundled=tmp_path)) == list(find_checkpoints(bundled=tmp_path, lang="en"))


# -- the figures' own words (attnlab.viz draws them; attnlab.app.words hands it the catalogue's) ----------------
@pytest.mark.parametrize("lang", ["es", "zh"])
def test_every_toolbar_tip_is_in_the_pages_language(lang: str) -> None:
    """bokeh names its tools itself, in English ("Pan", "Wheel Zoom", "Hover"): on a Spanish or
    Chinese page each tip is the figure's own word for it (`viz.words.name_tools`)."""
    from bokeh.models import Tool
    from test_viz import synthetic_trace

    from attnlab import viz
    from attnlab.app.words import figure_words
    from attnlab.record.stats import head_stats

    said, trace = figure_words(lang), synthetic_trace()
    source = viz.stats_source(head_stats(trace), words=said)
    figures = [
        viz.heatmap(trace, "cross", 0, 0, words=said, fit=True),
        viz.grid(trace, "cross", words=said, on_select=lambda *_: None),
        viz.lines_figure(trace, "cross", 0, None, words=said),
        viz.stats_scatter(source, words=said),
        viz.tree_figure("(S (NP (XX A) (XX dog)) (VP (XX runs)))", words=said),
        viz.timeline_curve([1, 2], {"h": [1.0, 2.0]}, words=said),
        viz.rollout_figure(trace, "cross", words=said),
    ]
    tips = {tool.description for fig in figures for tool in fig.select({"type": Tool})}
    ours = {value for key, value in said.items() if key.startswith(("tool.", "lines.tool_"))}
    assert None not in tips and tips <= ours, tips - ours
    assert {said["tool.save"], said["tool.hover"], said["tool.xpan"], said["tool.tap"]} <= tips


def test_the_figures_words_are_the_catalogues() -> None:
    """Every template `attnlab.viz` draws with has an entry in every language with its fields, and
    in English the catalogue says exactly what the library says by itself."""
    from attnlab import viz
    from attnlab.app.words import figure_words

    assert dict(figure_words("en")) == viz.WORDS
    for lang in LANGUAGES:
        words = figure_words(lang)
        assert set(words) == set(viz.WORDS), lang
        assert {k: fields(t) for k, t in words.items()} == {k: fields(t) for k, t in viz.WORDS.items()}, lang
    with pytest.raises(ConfigError, match="lang must be one of"):  # not English without a word
        figure_words("fr")
    assert figure_words("zh")["head.query"] == "查询" and figure_words("es")["head.key"] == "clave"


def figure_texts(*views: object) -> tuple[list[str], set[str]]:
    """(the words bokeh views show, the data they show): titles, axis labels, colour bar titles,
    hover fields and the masked cells' hover, legend entries, table headers, the grid's layers and
    heads, the stats' hover labels, notes (Divs); and apart, the tokens (ticks, hover labels, bars)."""
    from bokeh.models import (
        Axis,
        ColorBar,
        ColumnDataSource,
        CustomJSHover,
        Div,
        HoverTool,
        LegendItem,
        Plot,
        TableColumn,
        Title,
    )

    texts: list[str] = []
    data: set[str] = set()
    for view in views:
        for root in view if isinstance(view, list) else [view]:
            if root is None:
                continue
            models = root.references()
            grids = {id(a) for m in models if isinstance(m, Plot) and (m.name or "").startswith("grid") for a in m.axis}
            for model in models:
                if isinstance(model, Title):
                    texts.append(model.text)
                elif isinstance(model, Axis):
                    texts.append(model.axis_label or "")
                    shown = [str(v) for v in model.major_label_overrides.values()]
                    (texts.extend if id(model) in grids else data.update)(shown)  # the grid's names, else tokens
                elif isinstance(model, ColorBar):
                    texts.append(model.title or "")
                elif isinstance(model, HoverTool):
                    texts += [name for name, _ in model.tooltips or []]
                elif isinstance(model, CustomJSHover):
                    texts += [v for k, v in model.args.items() if isinstance(v, str)]
                    data.update(s for v in model.args.values() if isinstance(v, list) for s in v if isinstance(s, str))
                elif isinstance(model, LegendItem):
                    label = model.label
                    if getattr(label, "field", None):
                        texts += [str(v) for v in model.renderers[0].data_source.data[label.field]]
                    else:
                        texts.append(str(getattr(label, "value", label)))
                elif isinstance(model, TableColumn):
                    texts.append(model.title)
                elif isinstance(model, Div):
                    texts += re.split(r"<br>|</p>|</h2>", model.text)
                elif isinstance(model, ColumnDataSource):
                    for column in ("name", "label", "kind_name"):  # the grid's and the stats' hover
                        texts += [v for v in model.data.get(column, []) if isinstance(v, str)]
                    for column in ("token", "key", "text"):  # tokens and tree words
                        data.update(v for v in model.data.get(column, []) if isinstance(v, str))
    return [t for t in (re.sub(r"<[^>]*>", "", t).strip() for t in texts) if t], data


def english_figure_words(texts: list[str], data: set[str], lang: str) -> list[str]:
    """The words of `texts` that are English figure words (of `attnlab.viz.WORDS`) and no word of the
    catalogue in `lang` (nor of the data: a token may be any word)."""
    from attnlab import viz

    def words_of(text: str) -> set[str]:
        return set(re.findall(r"[^\W\d_]{2,}", re.sub(r"\{[^}]*\}", " ", text).lower()))

    english = set().union(*map(words_of, viz.WORDS.values()))
    theirs = set().union(*(words_of(entry[lang]) for entry in MESSAGES.values()), *map(words_of, data))
    leaking = english - theirs
    assert {"query", "key", "weight", "layer", "head", "entropy", "masked"} <= leaking
    return sorted({f"{w!r} in {t!r}" for t in texts for w in words_of(t) & leaking})


@pytest.fixture(scope="module")
def with_probes(paths: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny translator with probe traces at two steps (for the training timeline)."""
    import json
    import shutil

    import numpy as np

    from attnlab.app.checkpoints import open_model

    path = tmp_path_factory.mktemp("probes") / "tiny-probes"
    shutil.copytree(paths["translate"], path)
    model = open_model(path)
    for step in (10, 20):
        trace = model.score("A dog runs .", "Ein hund läuft .", record=True).trace
        trace.save(path / "probes" / f"step_{step}" / "probe_0.trace")
        weighed = np.full((3, model.config.n_layers, model.config.n_heads), step / 10).tolist()  # as `train` writes
        (path / "probes" / f"step_{step}" / "importance.json").write_text(json.dumps({"gradient": weighed}))
    return path


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_explorer_draws_its_figures_in_its_language(
    with_probes: Path, lang: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every figure of every tab (titles, axes, hover, legends, table headers, notes), the
    comparison with heads off, and the exports (SVG, the HTML page's views) carry no English word."""
    import panel as pn
    from bokeh.models import HoverTool

    from attnlab import viz
    from attnlab.app.explorer import Explorer
    from attnlab.app.explorer.compare import ABLATED

    explorer = Explorer({"tiny": str(with_probes)}, lang=lang)
    explorer.open_listed("tiny")
    store = explorer.store
    explorer.tabs.active = 3  # the timeline finds its snapshots when its tab opens
    assert store.trace is not None and not store.error and explorer.timeline._snapshots
    explorer.tabs.active = 4
    explorer.ablation.add_open_head()
    explorer.ablation.ablate()
    explorer.compare.second.value = ABLATED
    explorer.compare.attributions.show.value = True  # both models' direct logit attribution
    for tab in range(len(explorer.tabs)):
        explorer.tabs.active = tab  # hidden tabs draw when they are opened
    store.select(kind="decoder")  # a causal mask: the masked cells' hover and the mask's title
    for tab in range(len(explorer.tabs)):
        explorer.tabs.active = tab
    assert not store.error, store.error
    figures = [pane.object for pane in explorer.layout.select(pn.pane.Bokeh)]
    rows = [row for row in explorer.layout.select(pn.Row) if sum(isinstance(o, pn.pane.Bokeh) for o in row) > 1]
    rows = [row for row in rows if not any("flex-wrap: wrap" in str(css) for css in row.stylesheets)]
    assert rows == [], "figures side by side in a Row that does not wrap run past a narrow window"
    exported: list[object] = []
    monkeypatch.setattr(viz, "standalone_html", lambda layout, title, lang: exported.append(layout) or lang)
    assert explorer.export.html().getvalue() == lang  # the page's language, its <html lang>
    drawn = {(f.name or "").split("-")[0] for f in figures if f is not None}
    assert drawn >= {"heatmap", "grid", "mask", "eq1", "stats", "timeline", "ablation", "compare"}, drawn
    assert {"compare-attribution-first", "compare-attribution-second"} <= {f.name for f in figures if f is not None}
    texts, data = figure_texts(*figures, *exported)
    assert exported and len(texts) > 60, len(texts)
    assert english_figure_words(texts, data, lang) == [], "English words in the figures"

    words, kind = store.words, store.kind
    heatmap = explorer.heads.heatmap.object
    title = words["head.title"].format(kind_title=i18n.kind_title(kind, lang), layer=store.layer, head=store.head)
    assert heatmap.title.text == title and heatmap.xaxis[0].axis_label == text("figure.key", lang)
    tooltips = [name for name, _ in heatmap.select_one(HoverTool).tooltips]
    assert tooltips == [text("figure.query", lang), text("figure.key", lang), text("figure.weight", lang)]
    assert text("figure.masked", lang) in texts and text("figure.entropy", lang) in texts
    assert text("selection.layer", lang) in texts and i18n.kind_name("cross", lang) in texts  # table, legend
    assert text("figure.grid_cell", lang, layer=store.layer, head=0) in texts
    svg = explorer.export.svg().getvalue()
    assert f">{html.escape(title)}</text>" in svg  # the exported picture's title


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_compare_and_corpus_tabs_name_tasks_and_statistics_in_lang(
    paths: dict[str, Path], tmp_path: Path, lang: str
) -> None:
    """What the library names in English (a model's task, a profile's statistics, a grid's layers
    and heads) reaches these tabs in the page's language, as the Dashboard names statistics."""
    from bokeh.models import HoverTool

    from attnlab import viz
    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots
    from attnlab.app.words import figure_words
    from attnlab.decode.loading import load
    from attnlab.decode.profile import profile, write_profile

    explorer = Explorer(
        {"tiny": str(paths["translate"]), "parser": str(paths["parse"])}, CheckpointRoots([tmp_path]), lang=lang
    )
    explorer.open_listed("tiny")
    explorer.tabs.active = 5
    explorer.compare.second.value = "parser"
    tasks = {"a": text("task.translate", lang), "b": text("task.parse", lang)}
    said = text("compare.other_task", lang, first="tiny", second="parser", **tasks)
    assert html.escape(said) in explorer.compare.notice.object and explorer.compare.notice.visible

    table = profile(load(paths["translate"]), ["the dog runs .", "a girl sits ."])
    write_profile(table, tmp_path / "profiles" / "p.parquet", {"checkpoint": "tiny-translator", "mode": "translate"})
    corpus, words = explorer.corpus, figure_words(lang)
    explorer.tabs.active = 6
    assert corpus.open("profiles/p.parquet"), explorer.store.error
    assert list(corpus.stat.options.items()) == [(viz.stat_name(s, words), s) for s in corpus.profile.stats]
    english = {"entropy", "distance", "self", "eos"}  # the columns as the library names them
    assert english & set(corpus.stat.options) == set()
    corpus.stat.value = "entropy"
    corpus.pick("cross", 1, 0)
    entropy = text("figure.entropy", lang)
    grid = corpus.grids.objects[-1].object
    title = text("corpus.grid_title", lang, kind=i18n.kind_title("cross", lang), stat=entropy)
    assert grid.title.text.split() == title.split() or lang == "zh"  # wrapped onto lines at spaces
    assert "".join(grid.title.text.split()) == "".join(title.split())  # Chinese wraps inside a run too
    assert list(grid.xaxis[0].major_label_overrides.values())[:2] == [words["grid.head"].format(head=h) for h in (0, 1)]
    assert list(grid.yaxis[0].major_label_overrides.values()) == [words["grid.layer"].format(layer=n) for n in (0, 1)]
    assert grid.select_one(HoverTool).tooltips[0][1] == words["grid.cell"].format(layer="@layer", head="@head")
    caption = text("corpus.extremes_largest", lang, kind=i18n.kind_title("cross", lang), layer=1, head=0, stat=entropy)
    assert html.escape(caption) in corpus.caption.object
    assert [c.title for c in corpus.table.object.columns][1] == entropy


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_widgets_draw_their_figures_in_lang(paths: dict[str, Path], with_probes: Path, lang: str) -> None:
    from attnlab import widgets

    explorer = widgets.explore(paths["translate"], text="A dog runs .", beam=2, lang=lang)
    explorer.view.show_mask.value = explorer.view.show_rollout.value = True
    explorer.view.picker.select(kind="decoder")
    explorer.show_lens.value = explorer.show_importance.value = explorer.attribution.show.value = True
    compared = widgets.compare_models(explorer.model, text="A dog .", heads_off={("cross", 0): [0]}, lang=lang)
    compared.show_rollouts.value = compared.show_lenses.value = compared.show_importances.value = True
    compared.attributions.show.value = compared.circuits.show.value = compared.saliency.show.value = True
    compared.patch("A cat .")
    timeline = widgets.replay(with_probes, lang=lang)
    explorer.patch("A cat runs .")
    drawn = ("lens", "importance", "patching", "residual_decoder", "attribution", "attribution_source")
    shown = {name: explorer.figures[name] for name in drawn}
    views = {**explorer.view.figures, **shown, **compared.figures, **timeline.figures}
    assert None not in views.values() and len(views) == 33, views
    assert not (explorer.errors.message or compared.errors.message or timeline.errors.message)
    texts, data = figure_texts(*views.values())
    assert english_figure_words(texts, data, lang) == [], "English words in the widgets' figures"
    assert views["head"].yaxis[0].axis_label == text("figure.query", lang)
    assert views["mask"].title.text.startswith(i18n.kind_name("decoder", lang))
    assert views["curve"].xaxis[0].axis_label == text("timeline.step", lang)
    assert text("figure.diff_value", lang) in texts and text("figure.masked", lang) in texts


@pytest.mark.parametrize("lang", ["en", "es", "zh"])
def test_a_decoder_heads_pattern_names_positions_by_the_pieces_its_axes_show(lang: str) -> None:
    """A decoder's queries are named by the pieces they predict, its keys by the pieces it was
    given: "its own position" read as the previous word under those labels, so it says which."""
    import numpy as np

    from attnlab.record.stats import head_stats
    from attnlab.record.trace import AttentionTrace

    own = 0.4 * np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None] + 0.6 * np.eye(3)
    rows = head_stats(AttentionTrace(["▁a", "</s>"], ["▁x", "▁y", "</s>"], {"decoder": [own[None]]}))
    said = i18n.head_pattern_text(rows, "decoder", 0, 0, lang)
    assert said == text("pattern.lead", lang, what=text("pattern.self_decoder", lang, share=rows[0]["self"]))
    assert "the one before the piece it predicts" in said or lang != "en"


def test_the_timeline_step_reads_with_the_pages_colon() -> None:
    """Panel writes "label: value" with an ASCII colon; a Chinese page's is full-width."""
    from attnlab.app.explorer.screen import StepSlider
    from attnlab.app.explorer.store import Store

    for lang, said in (("zh", "训练步数：<b>300</b>"), ("es", "paso de entrenamiento: <b>300</b>")):
        slider = StepSlider(Store(lang=lang), label=text("timeline.step", lang), options=[100, 300], value=300)
        assert slider.labels[1] == said and slider._text.value == said


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_widgets_say_the_librarys_errors_with_a_lead_in_lang(paths: dict[str, Path], lang: str) -> None:
    """A missing checkpoint given to `explore(..., lang=...)` and a layer the model lacks given to
    `compare_models` raised English alone, where a bad beam was said in the reader's language."""
    from attnlab import widgets
    from attnlab.errors import AttnlabError, CheckpointError

    with pytest.raises(CheckpointError) as missing:
        widgets.explore(paths["translate"].parent / "no-such-model", lang=lang)
    assert str(missing.value).startswith(text("error.checkpoint", lang)) and "no such directory" in str(missing.value)
    with pytest.raises(AttnlabError) as layer:
        widgets.compare_models(paths["translate"], heads_off={("cross", 7): [0]}, lang=lang)
    assert str(layer.value).startswith(text("error.other", lang)) and "layer 7 does not exist" in str(layer.value)
