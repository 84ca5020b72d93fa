"""Pieces to words: which words of a sentence each sentencepiece piece spells, by character
offsets, so that attention between pieces can be read as links between words
(`attnlab.decode.alignment`). The pieces are detokenised cumulatively, UTF-8 byte pieces
included, and their characters aligned to the words' characters, so Chinese fed without spaces,
byte-fallback pieces and punctuation split off a word all land on the right word, and a piece
that runs over a word boundary (Chinese "我爱" for the words 我 爱) counts for both.
"""

from __future__ import annotations

import codecs
import difflib
from collections.abc import Sequence

from attnlab.data.tokenizer import BYTE_PIECE
from attnlab.errors import AttnlabError

SPECIALS = frozenset({"<s>", "</s>", "<pad>"})  # pieces that spell no word


def _piece_bytes(piece: str) -> bytes:
    byte = BYTE_PIECE.match(piece)
    if byte:
        return bytes([int(byte[1], 16)])
    if piece == "<unk>":
        return "\ufffd".encode()  # a character that matches no word's: placed between its neighbours
    return piece.replace("\u2581", " ").encode()


def piece_words(pieces: Sequence[str], words: Sequence[str]) -> list[tuple[int, ...]]:
    """The indices of the words each piece spells: one for most pieces, several for a piece
    that runs over a word boundary, none for <s>, </s>, <pad>.

    The pieces are detokenised one after another (UTF-8 byte pieces are joined into their
    character) and the non-space characters of the result are aligned to those of the words, so
    the text the model read may have had spaces between the words or not (Chinese). A piece
    that is only a word boundary ("▁") belongs to the word after it. Characters the
    tokenizer changed are placed between their aligned neighbours."""
    for name, texts in (("pieces", pieces), ("words", words)):  # None was a TypeError from deep inside
        if (
            isinstance(texts, str | bytes)
            or not isinstance(texts, Sequence)
            or not all(isinstance(t, str) for t in texts)
        ):
            raise AttnlabError(f"piece_words takes {name} as a list of strings, got {texts!r:.60}")
    if not words:
        return [()] * len(pieces)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, spans = "", []
    for piece in pieces:
        if piece in SPECIALS:
            spans.append(None)
            continue
        start = len(text)
        text += decoder.decode(_piece_bytes(piece))
        spans.append((start, max(len(text), start + 1)))  # a partial character: the one it begins
    text += decoder.decode(b"", final=True)
    # characters of the text (spaces dropped) -> characters of the words -> word index
    kept = [i for i, char in enumerate(text) if not char.isspace()]
    ours = "".join(text[i] for i in kept)
    theirs = "".join(word for word in words)
    word_of_char = [w for w, word in enumerate(words) for _ in word]
    target = [0] * len(ours)
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        for a in range(a0, a1):
            if op == "equal":
                target[a] = b0 + a - a0
            elif op == "replace":
                target[a] = b0 + (a - a0) * (b1 - b0) // (a1 - a0)
            else:  # a character the words do not have: next to where it stands
                target[a] = min(b0, len(theirs) - 1)
    stripped_index = {i: n for n, i in enumerate(kept)}
    result: list[tuple[int, ...]] = []
    for span in spans:
        chars = [stripped_index[i] for i in range(*span) if i in stripped_index] if span and theirs else []
        result.append(tuple(dict.fromkeys(word_of_char[target[c]] for c in chars)))  # in order, once each
    # a piece of spaces only (a lone "▁") joins the next word, else the previous one
    for n, span in enumerate(spans):
        if span is not None and not result[n]:
            after = [w for w in result[n + 1 :] if w]
            before = [w for w in result[:n] if w]
            result[n] = after[0][:1] if after else before[-1][-1:] if before else ()
    return result
