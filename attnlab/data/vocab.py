"""Marian's tokenisation: a sentencepiece model cuts the text into pieces, and a separate
vocabulary file (`vocab.json`, `target_vocab.json`) gives each piece its id.

attnlab's own checkpoints have one sentencepiece model whose piece ids are the model's ids.
Hugging Face Marian / OPUS-MT directories instead hold `source.spm` and `target.spm` plus a JSON
vocabulary shared by both sides (or one per side), and a piece the vocabulary lacks is `<unk>`.
`VocabTokenizer` wraps one side with the methods of `SentencePieceProcessor` that attnlab
uses, so decoding, recording and the views need not know which kind of model they read.
"""

from __future__ import annotations

import re
from pathlib import Path

import sentencepiece as spm

from attnlab.data.tokenizer import LEADING_CODE
from attnlab.errors import DataError, json_loads

MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")  # target_vocab.json too when the sides differ
SPACES = re.compile(r" {2,}")  # sentencepiece writes " ⁇ " for each <unk>: two were "⁇  ⁇"


def is_language_code(piece: str) -> bool:
    """`piece` is a multilingual model's target-language token (">>spa<<")."""
    return LEADING_CODE.fullmatch(piece) is not None


def read_vocab(path: str | Path) -> dict[str, int]:
    """A Marian vocabulary file: {piece: id}, ids unique."""
    try:
        vocab = json_loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: not a readable vocabulary ({type(error).__name__})") from None
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise DataError(f"{path}: a vocabulary maps pieces to integer ids")
    if len(set(vocab.values())) != len(vocab):
        raise DataError(f"{path}: two pieces share an id")
    return vocab


class VocabTokenizer:
    """One side of a Marian model: sentencepiece pieces, ids from a vocabulary file.

    Matches Hugging Face's `MarianTokenizer`: a leading language code (`>>spa<<`) is one token,
    pieces missing from the vocabulary are `<unk>`, and decoding skips `<pad>` and `</s>`. An
    `<unk>` written is shown as sentencepiece shows it, "⁇" (`skip_special_tokens` drops it: a
    reader would not see that a word was unknown), one space either side."""

    def __init__(
        self,
        spm_path: str | Path,
        vocab: dict[str, int],
        unk: str = "<unk>",
        pad: str = "<pad>",
        eos: str = "</s>",
        name: str = "the vocabulary",
    ) -> None:
        """`name`: the vocabulary's file, as a refusal names it."""
        for needed in (unk, eos):  # without </s> no output could end (it decoded to the length limit)
            if needed not in vocab:
                raise DataError(f"{name} has no {needed} piece")
        negative = next((piece for piece, i in vocab.items() if i < 0), None)
        if negative is not None:  # (it read as an id counted from the end of the table)
            raise DataError(f"{name} gives {negative!r} the negative id {vocab[negative]}")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(spm_path))
        except (OSError, RuntimeError) as error:
            raise DataError(f"{spm_path}: not a sentencepiece model ({str(error).splitlines()[0]})") from None
        self.vocab = vocab
        self.pieces = {i: piece for piece, i in vocab.items()}
        self._unk = vocab[unk]
        self.special = {vocab[s] for s in (pad, eos) if s in vocab}
        self.size = max(vocab.values()) + 1

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, without `</s>` (the caller appends it, as for attnlab's own models)."""
        code = LEADING_CODE.match(text)  # one piece, as the vocabulary has it
        head, text = ([code.group()], text[code.end() :]) if code else ([], text)
        pieces = head + self.sp.encode(text, out_type=str)
        return [self.vocab.get(piece, self._unk) for piece in pieces]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.pieces.get(i, "<unk>") for i in ids if i not in self.special]
        return SPACES.sub(" ", self.sp.decode_pieces(pieces).replace("\u2581", " ")).strip()

    def id_to_piece(self, i: int) -> str:
        return self.pieces.get(i, "<unk>")

    def piece_to_id(self, piece: str) -> int:
        return self.vocab.get(piece, self._unk)

    def get_piece_size(self) -> int:
        return self.size

    def unk_id(self) -> int:
        return self._unk


def separate_vocabs(directory: str | Path) -> bool:
    """Whether the target side has a vocabulary of its own (`target_vocab.json`): as Hugging
    Face's `MarianTokenizer` decides, by `separate_vocabs` in `tokenizer_config.json` (default
    false: a stray target_vocab.json beside one shared vocabulary is not read); without that
    file (an attnlab checkpoint imported from Marian keeps target_vocab.json only when it is
    read), by whether target_vocab.json is there. Said separate and missing is one line: one
    side's ids read through the other side's vocabulary translated into other words."""
    directory = Path(directory)
    config, target = directory / "tokenizer_config.json", directory / "target_vocab.json"
    if not config.is_file():
        return target.is_file()
    try:
        said = json_loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{config}: not readable JSON ({type(error).__name__})") from None
    separate = said.get("separate_vocabs", False) if isinstance(said, dict) else None
    if not isinstance(separate, bool):
        raise DataError(f"{config}: separate_vocabs is true or false, got {separate!r:.40}")
    if separate and not target.is_file():
        raise DataError(f"{config} says separate_vocabs, and there is no target_vocab.json: the output's ids")
    return separate


def marian_tokenizers(directory: str | Path) -> tuple[VocabTokenizer, VocabTokenizer]:
    """(source, target) tokenizers of a Marian directory (or a checkpoint imported from one)."""
    directory = Path(directory)
    missing = [name for name in MARIAN_FILES if not (directory / name).is_file()]
    if missing:
        raise DataError(f"{directory}: a Marian model needs {', '.join(missing)}")
    source_vocab = read_vocab(directory / "vocab.json")
    target_file = directory / "target_vocab.json"
    separate = separate_vocabs(directory)
    target_vocab, target_name = (
        (read_vocab(target_file), target_file.name) if separate else (source_vocab, "vocab.json")
    )
    return (
        VocabTokenizer(directory / "source.spm", source_vocab, name=str(directory / "vocab.json")),
        VocabTokenizer(directory / "target.spm", target_vocab, name=str(directory / target_name)),
    )
