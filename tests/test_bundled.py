"""The bundled checkpoints open offline, decode, and record every kind, layer and head."""

from __future__ import annotations

import importlib
import re
import time
from pathlib import Path

import pytest

import attnlab
from attnlab.data.treebank import leaves, parse_tree

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints"


def _open(name: str) -> attnlab.decode.Model:
    path = BUNDLED / name
    if not (path / "manifest.json").exists():
        pytest.skip(f"{path} is not in this checkout")
    start = time.perf_counter()
    model = attnlab.load(path)
    assert time.perf_counter() - start < 5.0  # 0.13 s here; generous for slow CI disks
    assert (path / "model.safetensors").stat().st_size < 25 * 2**20
    return model


# A sentence each translator gets right, and a word its translation must hold.
EXAMPLES = {
    "multi30k-en-de": ("A little girl climbs into a wooden playhouse.", "Mädchen"),
    "multi30k-en-de-r3": ("A little girl climbs into a wooden playhouse.", "Mädchen"),
    "tatoeba-en-es": ("I like to read books.", "libros"),
    "tatoeba-en-zh": ("I like to read books.", "书"),
}


@pytest.mark.parametrize("name", [*EXAMPLES, "wsj-parser"])
def test_bundled_checkpoint_decodes_and_records_everything(name: str) -> None:
    model = _open(name)
    if model.task == "parse":
        result = model.parse("The company said profits rose sharply .", record=True)
        assert leaves(parse_tree(result.text)) == "The company said profits rose sharply .".split()
    else:
        sentence, word = EXAMPLES[name]
        result = model.translate(sentence, record=True)
        assert word in result.text, result.text
    trace = result.trace
    n, h = model.config.n_layers, model.config.n_heads
    for kind in ("encoder", "decoder", "cross"):
        assert trace.layers[kind] == list(range(n))
        for layer in range(n):
            assert trace.attention(kind, layer).shape[0] == h
    assert list((BUNDLED / name / "probes").glob("step_*/probe_*.trace"))


@pytest.mark.parametrize(("name", "lang"), [("tatoeba-en-es", "es"), ("tatoeba-en-zh", "zh")])
def test_bundled_tatoeba_translators_open_in_the_widgets(name: str, lang: str) -> None:
    """The Spanish and Chinese translators in the notebook widget, in their reader's language:
    the translation typed in is shown, with its attention, and Chinese output has no spaces."""
    from attnlab import widgets
    from attnlab.app.i18n import text

    _open(name)
    sentence, word = EXAMPLES[name]
    explorer = widgets.explore(BUNDLED / name, text=sentence, lang=lang)
    assert explorer.errors.message == "" and word in explorer.result.text
    assert explorer.button.description == text("page.translate", lang)
    assert explorer.view.trace.tgt_tokens == explorer.result.trace.tgt_tokens
    if lang == "zh":
        assert " " not in explorer.result.text.strip(), explorer.result.text


def test_bundled_restricted_model_attends_within_its_band() -> None:
    """The bundled r = 3 model (Table 1's last row): its recorded self-attention is exactly zero
    beyond distance 3 (the decoder's also after the query), its cross-attention is not."""
    import numpy as np

    model = _open("multi30k-en-de-r3")
    assert model.config.attn_window == 3
    trace = model.translate("Two young men in red shirts are playing football on a sunny field.", record=True).trace
    for kind in ("encoder", "decoder", "cross"):
        weights = trace.attention(kind, 0)
        i, j = np.arange(weights.shape[1])[:, None], np.arange(weights.shape[2])[None, :]
        outside = (np.abs(i - j) > 3) | ((j > i) if kind == "decoder" else False)
        if kind == "cross":
            assert weights[:, np.abs(i - j) > 3].max() > 0.01
        else:
            assert outside.any() and weights[:, outside].max() == 0.0


def test_bundled_checkpoints_fit_the_budget() -> None:
    """Each bundled model under 25 MB, all of checkpoints/ under 80 MB."""
    sizes = [p.stat().st_size for p in BUNDLED.rglob("*") if p.is_file()]
    assert sum(sizes) < 80 * 2**20


def test_a_bundled_models_tokenizer_swapped_for_another_is_refused(tmp_path: Path) -> None:
    """The Spanish and Chinese models both have 6,000 pieces: with the Chinese spm.model and a
    manifest rewritten to list it, the Spanish one wrote "ap蚁ter为了…" for "A dog runs .". Every
    bundled checkpoint records its tokenizer's digest in its config."""
    import hashlib
    import json
    import shutil

    from attnlab.errors import CheckpointError

    spanish, chinese = BUNDLED / "tatoeba-en-es", BUNDLED / "tatoeba-en-zh"
    if not all((path / "manifest.json").is_file() for path in (spanish, chinese)):
        pytest.skip("the bundled Tatoeba translators are not in this checkout")
    for path in BUNDLED.iterdir():
        assert "spm.model" in json.loads((path / "config.json").read_text())["meta"]["tokenizer_sha256"], path.name
    copy = shutil.copytree(spanish, tmp_path / "copy")
    shutil.copyfile(chinese / "spm.model", copy / "spm.model")
    manifest = json.loads((copy / "manifest.json").read_text())
    data = (copy / "spm.model").read_bytes()
    manifest["files"]["spm.model"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="spm.model is not the tokenizer this model was saved with"):
        attnlab.load(copy)


def test_bf16_decoding_keeps_the_translations() -> None:
    """`dtype="bf16"` (about 2x faster on CPUs with bf16 products) computes in bfloat16 from the same stored
    weights: same model identity, nearly the same outputs, and maps close to fp32's."""
    import torch

    exact = _open("multi30k-en-de")
    fast = attnlab.load(BUNDLED / "multi30k-en-de", dtype="bf16")
    assert fast.model.embed.weight.dtype == torch.bfloat16
    assert fast.info["weights_sha256"] == exact.info["weights_sha256"]
    sentences = [
        "A little girl climbs into a wooden playhouse.",
        "Two men are playing soccer in a park.",
        "A woman in a red coat walks down the street.",
        "A dog runs through the snow.",
    ]
    slow, quick = exact.translate(sentences, record=True), fast.translate(sentences, record=True)
    same = [(a.trace, b.trace) for a, b in zip(slow, quick, strict=True) if a.text == b.text]
    assert len(same) >= 3
    # where the outputs agree, the maps do: bf16 moves them by ~0.011 at most here, while two different
    # heads of one layer differ by 0.55 or more (what showing the wrong map would look like)
    for a, b in same:
        assert abs(a.attention("cross", 2) - b.attention("cross", 2)).max() < 0.05
    with pytest.raises(attnlab.errors.AttnlabError, match="dtype must be one of"):
        attnlab.load(BUNDLED / "multi30k-en-de", dtype="fp16")


def test_int8_decoding_quantizes_the_linear_layers() -> None:
    """`dtype="int8"` (CTranslate2's fast CPU precision): every linear layer holds int8 weights,
    the outputs stay nearly the same, the maps close, and the trace says which weights made it."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    exact = _open("multi30k-en-de")
    small = attnlab.load(BUNDLED / "multi30k-en-de", dtype="int8")
    linears = [m for m in small.model.modules() if isinstance(m, Int8Linear)]
    n = exact.config.n_layers  # Q, K, V, O per attention and 2 per FFN: encoder 4 + 2, decoder 4 + 4 + 2
    assert len(linears) == 6 * n + 10 * n
    assert small.info["weights_sha256"] != exact.info["weights_sha256"]  # rounded weights: another identity
    sentences = ["A little girl climbs into a wooden playhouse.", "Two men are playing soccer in a park."]
    slow, quick = exact.translate(sentences, record=True), small.translate(sentences, record=True)
    same = [(a.trace, b.trace) for a, b in zip(slow, quick, strict=True) if a.text == b.text]
    assert same, [b.text for b in quick]
    for a, b in same:  # int8 moves the maps a little; another head would differ by 0.55 or more
        assert abs(a.attention("cross", 2) - b.attention("cross", 2)).max() < 0.1


def test_the_readmes_python_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python block is what a reader copies first: it once used names it never
    defined. Run from a scratch directory, with the checkpoint paths pointing at this checkout."""
    if not (BUNDLED / "multi30k-en-de" / "manifest.json").exists():
        pytest.skip("the bundled translator is not in this checkout")
    readme = (BUNDLED.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(block.replace('"checkpoints/', f'"{BUNDLED}/'), "README.md", "exec"), {})
    assert (tmp_path / "girl.trace").is_file()


def _where(name: str) -> object:
    """What the dotted `name` names where its longest importable start is a module."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
            break
        except ImportError:
            continue
    for part in parts[end:]:
        found = getattr(found, part)
    return found


def _reached(name: str) -> object:
    """What `name` reaches written as a reader types it after `import attnlab`, attribute by
    attribute (its modules imported by `_where` first)."""
    found: object = attnlab
    for part in name.split(".")[1:]:
        found = getattr(found, part)
    return found


def test_every_attnlab_name_the_docs_give_is_there() -> None:
    """Every `attnlab.…` name in the README and docs/ names something that exists, and one written
    as a call runs as written: `attnlab.record.norm_trace(model, trace)` was an AttributeError
    (`attnlab.record` is the recording function; its room's names are imported from it)."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    names = {
        (match[1], bool(match[2]), path.name)
        for path in texts
        for code in re.findall(r"`([^`\n]+)`", path.read_text(encoding="utf-8"))
        for match in re.finditer(r"(?<![\w.])(attnlab(?:\.\w+)+)(\()?", code)
    }
    assert len(names) > 40  # (the pattern finds them)
    missing = []
    for name, called, where in sorted(names):
        try:
            _where(name)
            if called:
                _reached(name)
        except AttributeError as error:
            missing.append(f"{where}: {name}{'(' if called else ''}: {error}")
    assert not missing, missing


def test_decomposed_text_is_read_as_the_composed_text() -> None:
    """Text pasted from macOS is often decomposed ("café" as "cafe" + U+0301): it was split into
    other pieces and a stray accent byte, the translation changed, and the explorer said the
    accent was not in the vocabulary."""
    import unicodedata

    from attnlab.data.tokenizer import unknown_characters

    model = _open("tatoeba-en-es")
    text = "The café is near the lake."
    decomposed = unicodedata.normalize("NFD", text)
    assert decomposed != text
    ours, theirs = model.translate(text), model.translate(decomposed)
    assert theirs.src_tokens == ours.src_tokens and theirs.text == ours.text
    assert unknown_characters(model.tokenizer, decomposed) == []
    assert model.score(text, "El café.").tokens == model.score(text, unicodedata.normalize("NFD", "El café.")).tokens


def test_whitespace_inside_a_line_is_read_as_one_space() -> None:
    """Tabs, no-break spaces, doubled spaces, a line separator, a byte-order mark or NUL inside a
    line (a file joined with `cat`, a spreadsheet's column) became byte pieces the model never saw
    between words: "A\\tman\\tis\\triding\\ta\\tbike." came back as "Ein Quuarterback verste …"."""
    from attnlab.data.tokenizer import unknown_characters

    model = _open("multi30k-en-de")
    plain = model.translate("A man is riding a bike.")
    for spaced in (
        "A\tman\tis\triding\ta\tbike.",
        "A\u00a0man\u00a0is\u00a0riding\u00a0a\u00a0bike.",
        "A  man  is   riding a bike. ",
        "A man is\u2028riding a bike.",
        "\ufeffA man\x00 is riding\r a bike.",
    ):
        read = model.translate(spaced)
        assert (read.src_tokens, read.text) == (plain.src_tokens, plain.text), spaced
        assert unknown_characters(model.tokenizer, spaced) == []
    assert (
        model.score(plain.text, "Ein\tMann  fährt\u00a0Fahrrad.").tokens == model.score(plain.text, plain.text).tokens
    )


def test_a_word_segmented_chinese_reference_is_read_as_running_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alignment gold and many references write Chinese word by word ("科学家 一直 …"): `score`,
    `lens --reference` and `heads importance --tgt` read each space as a "▁" piece training never
    showed between Chinese words (65 pieces weighed where the same text unsegmented has 44), while
    `heads profile` and `align` joined the words. Spaces beside Latin words stay."""
    from attnlab.cli import main

    model = _open("tatoeba-en-zh")
    source = "The scientists have always worked hard."
    running = model.score(source, "科学家一直努力工作。")
    segmented = model.score(source, "科学家 一直 努力 工作 。")
    assert "▁" not in running.tokens and segmented.tokens == running.tokens
    assert segmented.logprob == pytest.approx(running.logprob, abs=1e-4)
    assert "▁P" in model.score("I like Python.", "我 喜欢 Python 。").tokens
    src, ref = tmp_path / "src.en", tmp_path / "ref.zh"
    src.write_text(source + "\n", encoding="utf-8")
    ref.write_text("科学家 一直 努力 工作 。\n", encoding="utf-8")
    capsys.readouterr()
    argv = ["lens", "--checkpoint", str(BUNDLED / "tatoeba-en-zh"), "--input", str(src), "--reference", str(ref)]
    assert main([*argv, "--json"]) == 0
    read = capsys.readouterr().out
    assert "科学" in read and "▁" not in read


def test_the_parser_reads_a_typed_sentence_as_treebank_words() -> None:
    """A student typing "The dog barks loudly." got a tree whose last leaf was "loudly.": the
    parser reads the Penn Treebank's words, so running text is cut into them first."""
    from attnlab.data.treebank import leaves, parse_tree

    parser = _open("wsj-parser")
    tree = parse_tree(parser.parse("The dog barks loudly.").text)
    assert leaves(tree) == ["The", "dog", "barks", "loudly", "."]
    assert parser.parse("The dog barks loudly.").text == parser.parse("The dog barks loudly .").text
