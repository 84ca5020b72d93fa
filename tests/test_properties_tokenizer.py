"""Property: the shared sentencepiece vocabulary gives text back exactly (§5.1's BPE as
`attnlab.data.tokenizer.train_tokenizer` trains it: identity normalisation, kept whitespace, byte
fallback), on random Unicode: CJK, emoji and their joiners, combining marks, control characters,
every kind of space.

The contract (train_tokenizer's docstring): decode(encode(line)) == line for every stripped line,
with no <unk> piece: characters the vocabulary lacks are spelled as UTF-8 byte pieces, control
characters included (NUL, tab, CR, DEL, C1). The one exception is U+2581 "▁", sentencepiece's own
word-boundary mark, which comes back as a plain space.
"""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import pytest
from hypothesis import strategies as st
from properties import examples, prove

from attnlab.data.tokenizer import as_read, spaced_controls, train_tokenizer

MARK = "\u2581"  # sentencepiece's word-boundary mark

# Characters from the places text breaks, one alphabet per family. A line is a few runs drawn
# from the families (one alphabet mixing them all would be sampled by code point, and the small
# families, combining marks or emoji, would hardly ever be drawn).
FAMILIES = [
    st.sampled_from("abcdefghij ABC .,;!?'\"()-ein der die"),  # what the vocabulary has pieces for
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK ideographs
    st.characters(min_codepoint=0x3040, max_codepoint=0x30FF),  # kana
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),  # emoji
    st.sampled_from("\u200d\ufe0f\U0001f3fd\u20e3"),  # ZWJ, variation selector, skin tone, keycap
    st.characters(categories=["Mn", "Mc", "Me"]),  # combining marks (also at the start of a line)
    st.characters(categories=["Cc", "Cf"]),  # control and format characters: NUL, tab, CR, DEL, C1, BOM, ...
    st.sampled_from(" \t\u00a0\u2009\u3000\u200b\u2028\x0b\x0c\x85"),  # spaces and breaks of every kind
    st.characters(codec="utf-8"),  # anything encodable (no lone surrogates: no UTF-8 file holds them)
]
RUNS = st.one_of([st.text(family, min_size=1, max_size=5) for family in FAMILIES])


def lines(with_mark: bool = False) -> st.SearchStrategy[str]:
    """Stripped lines, as the CLI and the API hand them to the tokenizer."""
    runs = st.one_of(RUNS, st.just(MARK)) if with_mark else RUNS
    return st.lists(runs, min_size=1, max_size=8).map(lambda parts: "".join(parts).strip())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """A small shared BPE trained the way `attnlab data prepare` trains it, on made-up lines that
    give CJK, kana and an emoji pieces of their own (the rest goes to byte pieces)."""
    rng = random.Random(0)
    words = "ein der die das und ist a the man dog runs in park 日本 語 東京 です ます 😀 café naïve".split()
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(500)]
    return train_tokenizer(sentences, tmp_path_factory.mktemp("spm") / "spm", 360, seed=1)


def _checked_ids(tokenizer, line: str) -> list[int]:
    ids = tokenizer.encode(line)
    assert tokenizer.unk_id() not in ids, f"{line!r} has an unknown piece: byte fallback failed"
    assert all(0 <= i < tokenizer.get_piece_size() for i in ids)
    return ids


@examples(400)
def test_every_stripped_line_comes_back_exactly(examples: int, tokenizer) -> None:
    families = {"byte pieces": 0, "control": 0, "combining": 0, "CJK": 0}

    def holds(line: str) -> None:
        if MARK in line:
            return  # the documented exception, tested below
        ids = _checked_ids(tokenizer, line)
        assert tokenizer.decode(ids) == line
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        families["byte pieces"] += any(p.startswith("<0x") for p in pieces)
        families["control"] += any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in line)
        families["CJK"] += any(0x4E00 <= ord(c) <= 0x9FFF for c in line)
        families["combining"] += any(unicodedata.category(c).startswith("M") for c in line)

    prove(holds, examples, line=lines())
    # the examples really exercised the hard cases (not only ASCII the vocabulary has pieces for)
    assert min(families.values()) >= examples // 20, families


@examples(60)
def test_the_word_boundary_mark_comes_back_as_a_space(examples: int, tokenizer) -> None:
    def holds(line: str) -> None:
        assert MARK in line
        assert tokenizer.decode(_checked_ids(tokenizer, line)) == line.replace(MARK, " ")

    prove(holds, examples, line=lines(with_mark=True).filter(lambda line: MARK in line))


def test_a_line_read_from_a_file_comes_back(tokenizer, tmp_path: Path) -> None:
    """The way the CLI reads input: UTF-8 text split into lines, each stripped."""
    text = "  日本語のテキスト ✓ ∑\n\tcafe\u0301 😀👍🏽 \x00\x7f\n\u3000\u200bzero width\u200d\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    for line in (tmp_path / "in.txt").read_text(encoding="utf-8").splitlines():
        assert tokenizer.decode(_checked_ids(tokenizer, line.strip())) == line.strip()


def test_every_control_character_is_read_as_a_space() -> None:
    """`as_read` dropped control characters, joining the words around them: "A\\x00man." was read
    "Aman." (translated "Ein Wachmann."). Every one of C0, DEL and C1 (those the tokenizer would
    keep as byte pieces a model never saw between words) now parts the words as a space does; a
    byte-order mark, which is no word break, is still dropped."""
    controls = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc"]
    assert len(controls) == 65 and "\x00" in controls and "\x85" in controls  # C0 (32), DEL, C1 (32)
    for char in controls:
        assert as_read(f"A{char}man{char}{char}sleeps.") == "A man sleeps.", repr(char)
        assert spaced_controls(f"A{char}b") == "A b"
    assert as_read("A\ufeffman") == "Aman" and as_read("\ufeff A  man ") == "A man"
    for unseen in "\u200b\u00ad\u2060":  # invisible and no word break: gone, as Tatoeba's Chinese had them removed
        assert as_read(f"一个{unseen}男人 walks{unseen}.") == "一个男人 walks."
