"""The shared sentencepiece BPE vocabulary (§5.1): training it, loading it, and telling which
characters it has no piece for (spelled as UTF-8 byte pieces or <unk>). Ids 0-3 are the
specials every ModelConfig expects.
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import sentencepiece as spm

from attnlab.errors import DataError, ModelInputError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # the ids ModelConfig expects


SAMPLE_SENTENCES = 1_000_000  # sentencepiece trains on at most this many sentences, drawn at random
MAX_SENTENCE_BYTES = 4192  # sentencepiece's max_sentence_length: it skips longer lines when training
UNSPACED = ("zh", "ja")  # written without spaces between words: every character of the training text gets a piece
# Han, kana, CJK punctuation and full-width forms: the characters between which unspaced text
# has no spaces.
_CJK = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_GAP = re.compile(f"(?<=[{_CJK}])\\s+(?=[{_CJK}])")
_LATIN_WORD = f"[^\\W_{_CJK}]"  # a letter or digit of a spaced script
_NOT_BETWEEN_WORDS = re.compile(f"(?<!{_LATIN_WORD})\\s+|\\s+(?!{_LATIN_WORD})")
_UNITS = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # Chinese characters (Japanese kanji too)


def mostly_han(lines: list[str]) -> bool:
    """Whether at least half the written characters of `lines` are Chinese: text that a metric
    cutting words at spaces sees as one word a sentence (BLEU's 13a) or drops (ROUGE)."""
    written = sum(len(line) - sum(c.isspace() for c in line) for line in lines)
    return written > 0 and 2 * sum(len(HAN.findall(line)) for line in lines) >= written


def join_unspaced(text: str) -> str:
    """Drop whitespace between two CJK characters. A model may emit the lone "▁" piece (it exists
    because a few training lines hold spaces) between two Chinese characters; decoded, that is a
    space no Chinese writer would put there. Spaces next to Latin words are kept."""
    return _CJK_GAP.sub("", text)


def text_units(text: str) -> list[str]:
    """The units a reader compares texts by: words, and each CJK character alone (a Chinese
    sentence has no spaces, so as one "word" any change marked all of it changed)."""
    return _UNITS.findall(text)


def join_words(words: list[str], lang: str | None) -> str:
    """Words as running text of `lang`: spaced, or for a language written without spaces with a
    space only between two Latin words or numbers ("和cac 40。", "7.7%," as a Chinese writer
    spells them; joined with no space at all it was "cac40", another word)."""
    text = " ".join(words)
    return _NOT_BETWEEN_WORDS.sub("", text) if lang in UNSPACED else text


# --- tokenizer ------------------------------------------------------------------------------------


def load_tokenizer(path: str | os.PathLike[str]) -> spm.SentencePieceProcessor:
    """The sentencepiece model of a prepared directory (or a .model file)."""
    path = Path(path)
    model = path / "spm.model" if path.is_dir() else path
    if not model.is_file():
        raise DataError(f"no sentencepiece model at {model}; run `attnlab data prepare` first")
    try:
        return spm.SentencePieceProcessor(model_file=str(model))
    except (RuntimeError, OSError) as error:  # sentencepiece's parse errors name the file already
        raise DataError(f"{model}: not a usable sentencepiece model ({type(error).__name__})") from None


def spm_settings(languages: Iterable[str] = ()) -> dict[str, Any]:
    """The sentencepiece settings of a pair, as meta.json records them (§5.1's shared BPE).

    Identity normalisation, kept whitespace and byte fallback make decode(encode(line)) == line for
    every stripped line: no unknown pieces (rare characters, control characters included, become
    byte pieces) and no NFKC rewriting of the references. The one exception is U+2581 "▁",
    sentencepiece's own word-boundary mark, which comes back as a space.

    A Chinese (or Japanese) side changes two settings. character_coverage 1.0: its ~3,000 distinct
    characters have a long tail, and the default 0.9995 would spell the rarest 0.05% of character
    occurrences as UTF-8 byte fragments; with 1.0 every character seen in training is a piece, so
    a Chinese sentence cuts into whole characters and words (bytes only for characters never seen).
    And no dummy prefix: a "▁" would otherwise open every line, so each frequent sentence-initial
    word would be learnt twice ("▁我" and "我", 217 of 3,769 Chinese pieces at 6,000 for Tatoeba
    zh) and a model could put that space before a character mid-sentence; without it a space
    comes out only where the training text had one. Splitting by whitespace stays on (English
    needs it; Chinese has no spaces, so its merges run within a sentence and form words), and so
    does splitting by Unicode script, which keeps Latin names, digits and punctuation out of
    Chinese pieces ("Tom" "游泳" "。", never "了。"). Decoding adds no space between characters.
    """
    unspaced = bool(set(languages) & set(UNSPACED))
    return {
        "model_type": "bpe",
        "character_coverage": 1.0 if unspaced else 0.9995,  # 0.9995: sentencepiece's default
        "add_dummy_prefix": not unspaced,
        "byte_fallback": True,
        "split_by_whitespace": True,
        "split_by_unicode_script": True,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
    }


def train_tokenizer(
    sentences: Iterable[str],
    prefix: Path,
    vocab_size: int,
    seed: int,
    symbols: Iterable[str] = (),
    settings: dict[str, Any] | None = None,
) -> spm.SentencePieceProcessor:
    """Shared BPE over both sides (§5.1) with `settings` (default: `spm_settings()`), written to
    `{prefix}.model` and `{prefix}.vocab`. Each of `symbols` becomes one piece with its
    word-boundary marker, so `(NP` costs one id rather than two."""
    if not 0 <= seed < 2**32:  # sentencepiece's seed is a uint32: outside, a raw TypeError
        raise DataError(f"--seed must be ≥ 0 and < 2**32, got {seed}")
    settings, symbols = settings or spm_settings(), list(symbols)
    failed: list[BaseException] = []

    def guarded() -> Iterator[str]:  # an error reading the corpus, kept whole (sentencepiece rewords it:
        try:  # Ctrl-C was "sentencepiece training failed: INTERNAL: KeyboardInterrupt", not "interrupted")
            yield from sentences
        except BaseException as error:
            failed.append(error)
            raise

    spm.set_random_generator_seed(seed)
    proto = io.BytesIO()  # (not `model_prefix`: it is stored in the model, and the same data gave other bytes)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=guarded(),
            model_writer=proto,
            vocab_size=vocab_size,
            **settings,
            user_defined_symbols=["\u2581" + s for s in symbols],
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            input_sentence_size=SAMPLE_SENTENCES,
            max_sentence_length=MAX_SENTENCE_BYTES,
            shuffle_input_sentence=True,
            num_threads=min(os.cpu_count() or 1, 16),
            minloglevel=2,
        )
    except RuntimeError as error:
        if failed:  # the corpus's own error (a DataError naming file and line), not sentencepiece's
            raise failed[0] from None
        meta_pieces = 4 + 256 * bool(settings.get("byte_fallback")) + len(symbols)
        raise DataError(_training_failure(str(error), vocab_size, meta_pieces)) from None
    trained = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    Path(f"{prefix}.model").write_bytes(proto.getvalue())
    Path(f"{prefix}.vocab").write_text("".join(f"{piece}\t{score:g}\n" for piece, score in _pieces(trained)), "utf-8")
    return load_tokenizer(f"{prefix}.model")


def _pieces(processor: spm.SentencePieceProcessor) -> list[tuple[str, float]]:
    """(piece, score) of every id, in order: what sentencepiece writes to its .vocab file."""
    return [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]


def same_vocabulary(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two sentencepiece models hold one vocabulary: the same bytes, or the same pieces
    with the same scores and kinds in the same order. Models trained before 2026-12-06 stored the
    temporary directory they were trained in (sentencepiece's `model_prefix`), so preparing the
    same corpus twice gave other bytes for the same vocabulary, and a run refused to resume on it."""
    first, second = Path(a).read_bytes(), Path(b).read_bytes()
    if first == second:
        return True
    try:
        models = [spm.SentencePieceProcessor(model_proto=proto) for proto in (first, second)]
    except RuntimeError:  # one that does not parse is no vocabulary, and so not the same
        return False
    kinds = ("is_control", "is_unknown", "is_unused", "is_byte")
    tables = [
        [(*piece, *(getattr(model, kind)(i) for kind in kinds)) for i, piece in enumerate(_pieces(model))]
        for model in models
    ]
    return tables[0] == tables[1]


class TrainingLines:
    """The lines sentencepiece learns the shared vocabulary from, counted side by side as they
    pass, with those it skips for being over MAX_SENTENCE_BYTES (it says nothing of them).

    A side it skips is learnt from the other side alone: long documents opposite short sentences
    gave a vocabulary of the targets, and each 900-word source line became ~5,000 byte pieces,
    without a word. So a side more than half of whose lines are skipped is refused (what is left
    of it would be a minority of its own text, outweighed by the other side's); fewer skipped
    lines are counted for the summary to say.
    """

    def __init__(self, files: tuple[Path, Path] | None = None) -> None:
        self.files = files  # the sides' files, for the refusal to name (a corpus of many files has none)
        self.lines, self.skipped, self.read = [0, 0], [0, 0], False  # read: every pair was counted

    def sentences(self, pairs: Iterable[tuple[str, str]]) -> Iterator[str]:
        """The stripped, non-empty lines of each pair, source then target."""
        for pair in pairs:
            for side, line in enumerate(pair):
                if text := line.strip():
                    self.lines[side] += 1  # a character is 1-4 bytes: encode only what may be over
                    long = (
                        len(text) > MAX_SENTENCE_BYTES // 4
                        and len(text.encode("utf-8", "surrogatepass")) > MAX_SENTENCE_BYTES
                    )
                    self.skipped[side] += long
                    yield text
        self.read = True

    def check(self) -> dict[str, int]:
        """The lines skipped per side ("src", "tgt"); a refusal if more than half of a side's were.
        Counts of a corpus not read to its end say nothing; with no line kept at all, sentencepiece's
        own failure says why (`_training_failure`)."""
        some_kept = self.read and self.lines != self.skipped
        over = [side for side in (0, 1) if some_kept and 2 * self.skipped[side] > self.lines[side]]
        if over:
            sides, every = ("source", "target"), [self.skipped[s] == self.lines[s] for s in over]
            shares = " and ".join(
                f"{'every one' if all_ else f'{self.skipped[s]:,}'} of the {self.lines[s]:,} training lines of the "
                f"{sides[s]}" + (f" ({self.files[s]})" if self.files else "")
                for s, all_ in zip(over, every, strict=True)
            )
            verb = "is" if every == [True] else "are"
            whence = (
                f"from the {sides[1 - over[0]]} {'alone' if every[0] else 'mostly'}"
                if len(over) == 1
                else "from few lines"
            )
            raise DataError(
                f"{shares} {verb} longer than the {MAX_SENTENCE_BYTES:,} bytes sentencepiece learns from: the shared "
                f"vocabulary would be learnt {whence}, and the model would read such lines as byte pieces; split them "
                "into sentences (a side is refused when more than half of its lines are that long)"
            )
        return dict(zip(("src", "tgt"), self.skipped, strict=True))


def _training_failure(message: str, vocab_size: int, meta_pieces: int) -> str:
    """sentencepiece's reason in attnlab's terms: its messages name its own options
    (`--character_coverage`), which attnlab does not have, and its source lines."""
    if high := re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message):
        return f"--vocab-size {vocab_size}: this corpus supports at most {int(high[2])} pieces"
    if low := re.search(r"smaller than required_chars\. \d+ vs (\d+)", message):
        needed, characters = int(low[1]), int(low[1]) - meta_pieces
        chars = f"its {characters:,} distinct characters, " if characters > 0 else ""
        return (
            f"--vocab-size {vocab_size} is too small for this corpus: {chars}the specials and the byte pieces "
            f"need {needed:,} pieces; pass --vocab-size {needed} or more"
        )
    if "[!sentences_.empty()]" in message:  # it trains on lines of at most MAX_SENTENCE_BYTES only
        return (
            f"no training line sentencepiece can learn from: every one is longer than {MAX_SENTENCE_BYTES:,} bytes "
            "(lines end at \\n only: a file ended by \\r alone, as old Macs wrote it, is one line)"
        )
    return f"sentencepiece training failed: {message.splitlines()[0] if message else 'no reason given'}"


BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # a UTF-8 byte spelled as a piece (byte fallback)


# -- input notices ---------------------------------------------------------------------------------------
def composed(text: str) -> str:
    """`text` in Unicode's composed form (NFC), as the corpora are written and a model reads
    them. Text pasted from macOS is often decomposed: "café" as "cafe" + U+0301, which the
    tokenizer (normalisation "identity", so that pieces spell the text exactly) split into other
    pieces and a stray accent byte, and the translation changed."""
    return unicodedata.normalize("NFC", text)


# Invisible, and no word break: a byte-order mark, a zero-width space (Tatoeba's Chinese side had
# them removed before training), a soft hyphen, a word joiner. Read as UTF-8 byte pieces, they put
# pieces no model saw between or inside words. (ZWJ and ZWNJ stay: they shape emoji and scripts.)
UNSEEN = dict.fromkeys(map(ord, "\ufeff\u200b\u00ad\u2060"))


def spaced_controls(text: str) -> str:
    """`text` with each control character (C0, DEL and C1: NUL, ESC, U+0080, ...) a space, as
    `as_read` reads them. Dropped, they joined the words around them: "A\x00man." was read as
    "Aman." and translated "Ein Wachmann."; a parser must split its words where the model does."""
    return "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)


def as_read(text: str) -> str:
    """`text` as a model reads it: composed (`composed`), every run of whitespace one space
    (tabs, no-break spaces, line separators, doubled spaces), control characters spaces too
    (`spaced_controls`), the invisible characters that are no word break dropped (`UNSEEN`). The
    tokenizer keeps all of them as pieces of their own (a tab is the byte piece <0x09>, a no-break
    space two), which a model never saw between words: "A\tman\tis\triding" came back as "Ein
    Quuarterback verste Henna-…" where "A man is riding" gives "Ein Mann fährt"."""
    return " ".join(composed(spaced_controls(text.translate(UNSEEN))).split())


def is_blank(text: str) -> bool:
    """Whether `text` has nothing to read: only whitespace and invisible characters (controls
    and format characters such as U+200B, a BOM, NUL). The tokenizer keeps those, so a text of
    them alone passed `str.strip()` and came back "translated" into a sentence the model made up."""
    return all(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in text)


def check_text(text: str, what: str) -> None:
    """One-line errors for a text the model cannot read: a blank one (`is_blank`), or one with a
    lone surrogate (what a mangled copy-paste or a bad decode of bytes leaves), on which
    sentencepiece fails with a C++ cast error."""
    if is_blank(text):
        raise ModelInputError(f"the {what} is empty", key=f"{what}_empty")
    check_unicode(text, f"the {what}")


def check_unicode(text: str, what: str) -> None:
    """Refuse text with a lone surrogate in one line naming `what`: the model's input, or a
    view's title or words (a view drew it, and the page or SVG it returned raised
    UnicodeEncodeError only when the user wrote it out)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ModelInputError(f"{what} is not valid Unicode (it holds a lone surrogate)") from None


def too_long(what: str, pieces: int, room: int) -> ModelInputError:
    """A text (`what`: input or target) of more pieces than the model takes, named for the
    screens that say it in another language (`AttnlabError.key`)."""
    return ModelInputError(
        f"the {what} has {pieces} pieces; this model takes at most {room}",
        key=f"{what}_too_long",
        pieces=pieces,
        room=room,
    )


LEADING_CODE = re.compile(r"^>>[^\s<>]+<<")  # a multilingual Marian model's ">>spa<<", read first


def unknown_characters(tokenizer: spm.SentencePieceProcessor, text: str) -> list[str]:
    """Characters the vocabulary has no piece for (sentencepiece spells them as UTF-8 byte pieces
    or maps them to <unk>), in the form the model reads (`as_read`). A line's leading language
    code that the tokenizer reads as one known piece (Marian's `>>de<<`) is no character of the
    text: read one character at a time, its ">" and "<" were named as unknown on every line."""
    unk = tokenizer.unk_id()

    def without_code(line: str) -> str:
        code = LEADING_CODE.match(line)
        known = code is not None and [i != unk for i in tokenizer.encode(code.group())] == [True]
        return line[code.end() :] if known else line

    text = "\n".join(without_code(line) for line in text.split("\n"))
    missing = []
    for char in dict.fromkeys(as_read(text)):
        if char.isspace():
            continue
        ids = tokenizer.encode(char)
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        if any(i == unk or BYTE_PIECE.match(p) for i, p in zip(ids, pieces, strict=True)):
            missing.append(char)
    return missing


def read_as_bytes(tokenizer: spm.SentencePieceProcessor, char: str) -> bool:
    """Whether the model reads `char`, which its vocabulary lacks, as UTF-8 byte pieces
    (sentencepiece's byte fallback, attnlab's own models) rather than as <unk> (Marian's)."""
    return any(BYTE_PIECE.match(tokenizer.id_to_piece(i)) for i in tokenizer.encode(char))


DOTTED_CIRCLE = "\u25cc"  # the base a lone combining mark is shown on (as in the Unicode charts)


def shown_characters(characters: list[str], most: int = 12) -> str:
    """The first `most` of `characters` as a line can show them, " …" after when there are more:
    one that draws nothing (a zero-width joiner, a control) by its code point, U+200D, and a
    combining mark on a dotted circle (a notice listed "👩 ‍ 👧", the joiner an empty entry)."""

    def shown(char: str) -> str:
        category = unicodedata.category(char)
        if category[0] in "CZ":
            return f"U+{ord(char):04X}"
        return DOTTED_CIRCLE + char if category[0] == "M" else char

    return " ".join(map(shown, characters[:most])) + (" …" if len(characters) > most else "")
