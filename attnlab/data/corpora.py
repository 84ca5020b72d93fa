"""The corpora attnlab reads, where to find them, and how each splits into train/valid/test.

The shared corpus directory is `--data-dir`, then `$ATTNLAB_DATA`, then `./data` (where `attnlab
data download` saves by default), then `../shared/data` beside the project. Text is read
streaming (plain or gzip), parallel files are checked to have the same number of lines.
Tatoeba, which comes as one list with no split, has its own module (`tatoeba.py`).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from attnlab.data import treebank
from attnlab.data.sniff import GZIP_MAGIC, HEAD, line_fault, refuse_binary
from attnlab.errors import DataError

CORPORA = ("multi30k", "tatoeba", "wmt14", "ptb", "text")
DEFAULT_VOCAB = {
    "multi30k": 8000,
    "tatoeba": 8000,
    "wmt14": 37000,
    "ptb": 4000,
    "text": 8000,
}  # §5.1: ~37k for WMT EN-DE
PTB_LEAVES = ("words", "XX")  # what stands at a leaf of a prepared target tree
DEFAULT_PAIR = {"multi30k": "en-de", "tatoeba": "de-en", "wmt14": "en-de", "ptb": "en-ptb", "text": "src-tgt"}
TEXT_SPLITS = ("train", "valid", "test")  # `data prepare text`: train and valid are required
MULTI30K_SPLITS = ("train", "valid", "test2016", "test2017", "test2017_mscoco")
WMT14_TESTS = {"valid": "newstest2013", "newstest2014": "newstest2014"}  # split name: file stem
# Every split name a corpus above gives (Tatoeba's are TEXT_SPLITS, PTB's PTB_FILES): the names of
# the files `prepare` writes, so a rerun can remove those of an earlier run's other splits.
SPLIT_NAMES = tuple(dict.fromkeys((*TEXT_SPLITS, *MULTI30K_SPLITS, *WMT14_TESTS)))
PTB_FILES = {"train": (1, 169), "valid": (170, 179), "test": (180, 189)}  # wsj_NNNN ranges, inclusive
DOWNLOADED = "data"  # `attnlab data download`'s directory without --out or $ATTNLAB_DATA, relative to the working one


# --- finding the corpora -------------------------------------------------------------------------


def find_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The corpus directory: `--data-dir`, then `$ATTNLAB_DATA`, then `./data` and `../shared/data`
    when present. `./data` is where `attnlab data download` saves without `--out` or
    `$ATTNLAB_DATA`: download, then prepare, failed "no data directory" without it."""
    for given, origin in ((explicit, "--data-dir"), (os.environ.get("ATTNLAB_DATA"), "$ATTNLAB_DATA")):
        if given:
            if not Path(given).is_dir():
                problem = "is a file, not a directory" if Path(given).exists() else "does not exist"
                raise DataError(f"data directory {given} (from {origin}) {problem}")
            return Path(given)
    shared = (Path(__file__).resolve().parents[3] / "shared" / "data", Path.cwd().parent / "shared" / "data")
    for candidate in (Path(DOWNLOADED), *shared):
        if candidate.is_dir():
            return candidate
    raise DataError(
        f"no data directory: pass --data-dir DIR, set ATTNLAB_DATA, or place the corpora in ./{DOWNLOADED} or "
        f"../shared/data (`attnlab data download multi30k|wmt14|tatoeba` fetches them into ./{DOWNLOADED})"
    )


def _has(data_dir: Path, relative: str) -> bool:
    return (data_dir / relative).is_file() or (data_dir / f"{relative}.gz").is_file()


def _corpus_file(data_dir: Path, relative: str, corpus: str) -> Path:
    """`relative` (or its .gz) inside the data directory, or an error saying how to get it."""
    for path in (data_dir / relative, data_dir / f"{relative}.gz"):
        if path.is_file():
            return path
    how = (
        "it is the Penn Treebank WSJ sample of NLTK (`python -m nltk.downloader treebank`, then copy its .mrg files)"
        if corpus == "ptb"
        else f"run `attnlab data download {corpus} --out {data_dir}`"
    )
    raise DataError(f"{corpus}: {data_dir / relative} is missing; {how}, or pass --data-dir")


# --- reading text --------------------------------------------------------------------------------


def _open_binary(path: Path) -> IO[bytes]:
    """The bytes of a corpus file, gunzipped when it is named .gz or begins as gzip does (no UTF-8
    text can): a `train.en` saved from a .gz URL under its plain name was read as a few lines of
    binary, "train.en has 13 lines but train.de has 400", which said nothing of why."""
    with open(path, "rb") as handle:
        packed = handle.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if packed or path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115


@contextmanager
def _gzip_errors(path: Path) -> Iterator[None]:
    """A cut-off download or a text file named .gz fails deep inside gzip: name the file."""
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise DataError(f"{path}: a damaged or incomplete gzip file ({error}); download it again") from None


def text_lines(text: str) -> list[str]:
    """`text` cut into lines at "\\n" only, as `wc -l`, `read_lines` and every corpus file count
    them, each without its "\\r\\n" or "\\n", and without a leading byte-order mark (an editor's
    UTF-8 BOM is not text: kept, it changed the first translation and BLEU). `str.splitlines`
    also cuts at form feeds, U+2028 and lone "\\r"s, which shifted every later output line against
    its input line."""
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":  # the newline that ends the last line starts no line
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


MAX_TEXT_BYTES = 256 * 2**20  # a text read whole: WMT's test sets are 0.4 MB, and `--input /dev/zero` grew forever


def read_whole(handle: IO[bytes], name: str) -> bytes:
    """All of `handle`, up to `MAX_TEXT_BYTES`; more is one line (training corpora are streamed by
    `data prepare`, never read whole). Its first block is judged first (`refuse_binary`): a
    binary file or stream is refused whole, before the rest is read."""
    head = handle.read(HEAD)
    refuse_binary(head, name)
    # A short first block is the end: a terminal's Ctrl-D ends one read, and asking again wanted a second
    data = head if len(head) < HEAD else head + handle.read(max(MAX_TEXT_BYTES + 1 - len(head), 0))
    if len(data) > MAX_TEXT_BYTES:
        raise DataError(f"{name} holds over {MAX_TEXT_BYTES >> 20} MiB of text; split it into smaller files")
    return data


def read_text(path: str | os.PathLike[str], keep_invalid: bool = False) -> list[str]:
    """The lines of a UTF-8 text file (`decode_lines`); an unreadable file is one line naming it."""
    try:  # bytes first: text mode would turn a lone "\r" into a line end of its own
        with open(path, "rb") as handle:
            data = read_whole(handle, str(path))
    except IsADirectoryError:  # ("cannot read .: [Errno 21] Is a directory: '.'", the OSError's repr)
        raise DataError(f"{path} is a directory, not a file") from None
    except OSError as error:
        raise DataError(f"cannot read {path} ({error.strerror or error})") from None
    return decode_lines(data, str(path), keep_invalid)


def decode_lines(data: bytes, name: str, keep_invalid: bool = False) -> list[str]:
    """`data` (the bytes `read_whole` read of the file or stream `name`) cut into lines by
    `text_lines`. A line that is not text (`line_fault`) is refused as `read_lines` refuses it,
    NAME:LINE and why; with `keep_invalid` it is kept, its bad bytes as lone surrogates
    (surrogateescape) that `invalid_lines` names, so that a command that answers line by line can
    fail that line alone. Decoding the whole text strictly said only a byte offset in it
    ("invalid start byte at byte 14"), never which line."""
    lines = text_lines(data.decode("utf-8", "surrogateescape"))
    if not keep_invalid and (invalid := invalid_lines(lines)):
        number, said = next(iter(invalid.items()))
        raise DataError(f"{name}:{number}: {said}")
    return lines


def invalid_lines(lines: list[str]) -> dict[int, str]:
    """{line number, from 1: what is wrong} of the lines `decode_lines` kept that are not text
    (`line_fault`: invalid UTF-8, a NUL)."""
    faults = {number: line_fault(line.encode("utf-8", "surrogateescape")) for number, line in enumerate(lines, 1)}
    return {number: said for number, said in faults.items() if said}


def read_lines(path: Path) -> Iterator[str]:
    """Lines as `text_lines` cuts them, streamed and decoded strictly: a file that is no text is
    refused whole (`refuse_binary`), a line that is not (`line_fault`) names file and line."""
    with _gzip_errors(path), _open_binary(path) as handle:
        refuse_binary(handle.read(HEAD), str(path))
        handle.seek(0)
        for number, raw in enumerate(handle, 1):
            if said := line_fault(raw):
                raise DataError(f"{path}:{number}: {said}")
            line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            yield line.removeprefix("\ufeff") if number == 1 else line


def count_lines(path: Path) -> int:
    """Lines in a file, counting a last line without a newline (a cheap pass over the bytes). A
    file that is no text is refused first (`refuse_binary`): counted, a UTF-16 file beside its
    UTF-8 partner was "has 301 lines but ... has 300", which said nothing of why."""
    count, last = 0, b"\n"
    with _gzip_errors(path), _open_binary(path) as handle:
        refuse_binary(block := handle.read(HEAD), str(path))
        while block:
            count += block.count(b"\n")
            last = block[-1:]
            block = handle.read(1 << 20)
    return count + (last != b"\n")


def check_parallel(src: Path, tgt: Path) -> int:
    """The line count shared by two aligned files; different counts are an error naming both."""
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise DataError(f"{src} has {n_src} lines but {tgt} has {n_tgt}; the files must be aligned line by line")
    return n_src


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    """Aligned (source, target) lines of two files."""
    try:
        yield from zip(read_lines(src), read_lines(tgt), strict=True)
    except ValueError:  # zip(strict=True): one file ended first
        check_parallel(src, tgt)
        raise


# --- the corpora ----------------------------------------------------------------------------------


@dataclass
class Split:
    """One split of a corpus: how to stream its (source, target) text, and the files it reads."""

    name: str
    pairs: Callable[[], Iterator[tuple[str, str]]]
    files: tuple[Path, Path] | None = None  # aligned text files, checked for equal length up front


def file_split(name: str, src: Path, tgt: Path) -> Split:
    return Split(name, lambda: read_pairs(src, tgt), (src, tgt))


def _languages(pair: str, offered: set[str]) -> tuple[str, str]:
    src, sep, tgt = pair.partition("-")
    if not sep or src == tgt or {src, tgt} - offered or "en" not in (src, tgt):
        choices = ", ".join(f"en-{lang}, {lang}-en" for lang in sorted(offered - {"en"}))
        raise DataError(f"unsupported --pair {pair!r}; choose one of: {choices}")
    return src, tgt


def check_pair(corpus: str, pair: str) -> None:
    """`--pair` of the corpora whose split function takes no languages (meta.json's src_lang and
    tgt_lang are what decoding and scoring read): ptb's one pair is English words to their trees
    (`de-en` was recorded for a parsing corpus); text takes any SRC-TGT, but two codes (`foo` was
    recorded as `foo-`, an empty target language)."""
    if corpus == "ptb" and pair != DEFAULT_PAIR["ptb"]:
        raise DataError(f"--pair {pair!r}: ptb parses English sentences into trees; its only pair is en-ptb")
    if corpus == "text" and not re.fullmatch(r"[^\s-]+-[^\s-]+", pair):
        raise DataError(f"--pair {pair!r}: a text corpus needs SRC-TGT, two language codes such as en-de")


def check_options(corpus: str, given: dict[str, bool]) -> None:
    """Refuse an option `corpus` does not read, keyed by its flag in `given` (True: given):
    `prepare multi30k --train-dir MINE` prepared the shared Multi30k and `--train A B` with a
    corpus other than text ignored A and B, each with exit 0."""
    for flag, reader in {"--train-dir": "wmt14", "--leaves": "ptb", "--train/--valid/--test": "text"}.items():
        if given.get(flag) and corpus != reader:
            raise DataError(f"{corpus} does not read {flag} (only {reader} does); leave it out")
    if given.get("--data-dir") and corpus == "text":
        raise DataError("text reads the files --train, --valid and --test name, not --data-dir; leave it out")


def multi30k_splits(data_dir: Path, pair: str) -> list[Split]:
    """Multi30k task 1, official splits: train 29,000, valid 1,014, test2016 1,000, test2017 ..."""
    src, tgt = _languages(pair, {"en", "de", "fr", "cs"})
    required = MULTI30K_SPLITS[:3]  # Czech has no 2017 test sets
    splits = []
    for name in MULTI30K_SPLITS:
        if name in required or all(_has(data_dir, f"multi30k/{name}.{lang}") for lang in (src, tgt)):
            files = [_corpus_file(data_dir, f"multi30k/{name}.{lang}", "multi30k") for lang in (src, tgt)]
            splits.append(file_split(name, *files))
    return splits


def parallel_files(directory: Path, src: str, tgt: str) -> list[tuple[Path, Path]]:
    """Every `STEM.src`/`STEM.tgt` pair (optionally .gz) in a directory, less dev and test sets.

    A side present both plain and gzipped (`a.en` and `a.en.gz`, say an unpacked copy left beside
    its archive) is an error: both were read, so every pair was trained on twice, silently."""
    found = []
    for src_path in sorted(directory.iterdir()):
        stem = src_path.name.removesuffix(".gz").removesuffix(f".{src}")
        if src_path.name not in (f"{stem}.{src}", f"{stem}.{src}.gz"):
            continue
        if stem.lower().startswith(("valid", "dev", "test", "newstest")):
            continue
        for lang in (src, tgt):
            plain, packed = directory / f"{stem}.{lang}", directory / f"{stem}.{lang}.gz"
            if plain.is_file() and packed.is_file():
                raise DataError(f"{plain} and {packed} are both in the training directory; keep one of them")
        for tgt_path in (directory / f"{stem}.{tgt}", directory / f"{stem}.{tgt}.gz"):
            if tgt_path.is_file():
                found.append((src_path, tgt_path))
                break
    return found


def wmt14_splits(data_dir: Path, pair: str, train_dir: Path | None) -> list[Split]:
    """WMT14 EN-DE: training from a directory of parallel files, newstest2013 valid, newstest2014 test."""
    src, tgt = _languages(pair, {"en", "de"})
    train_dir = train_dir or data_dir / "opennmt_toy_ende"
    if not train_dir.is_dir():
        problem = "is a file, not a directory" if train_dir.exists() else "does not exist"
        raise DataError(f"wmt14: training directory {train_dir} {problem}; pass --train-dir")
    train_files = parallel_files(train_dir, src, tgt)
    if not train_files:
        raise DataError(f"wmt14: no STEM.{src}/STEM.{tgt} file pairs in {train_dir}")
    for pair_files in train_files:
        check_parallel(*pair_files)

    def train() -> Iterator[tuple[str, str]]:
        for files in train_files:
            yield from read_pairs(*files)

    splits = [Split("train", train)]
    for name, stem in WMT14_TESTS.items():
        files = [_corpus_file(data_dir, f"wmt14_en_de/{stem}.{lang}", "wmt14") for lang in (src, tgt)]
        splits.append(file_split(name, *files))
    return splits


def ptb_splits(data_dir: Path, spelled: bool = True) -> list[Split]:
    """WSJ sample: words -> linearised tree (§6.3), split by file number as in `PTB_FILES`;
    `spelled` trees write the words where Vinyals & Kaiser write `XX` (`treebank.linearize`)."""
    folder = data_dir / "ptb_wsj_sample" / "mrg"
    _corpus_file(data_dir, "ptb_wsj_sample/mrg/wsj_0001.mrg", "ptb")

    def part(first: int, last: int) -> Callable[[], Iterator[tuple[str, str]]]:
        def pairs() -> Iterator[tuple[str, str]]:
            files = [folder / f"wsj_{n:04d}.mrg" for n in range(first, last + 1)]
            for tree in treebank.read_trees([f for f in files if f.exists()]):
                cleaned = treebank.clean(tree)
                yield " ".join(treebank.leaves(cleaned)), " ".join(treebank.linearize(cleaned, spelled))

        return pairs

    return [Split(name, part(*numbers)) for name, numbers in PTB_FILES.items()]


def ptb_symbols(splits: list[Split]) -> list[str]:
    """Every bracket token of the linearised trees and the POS placeholder, to be single pieces."""
    symbols = {treebank.PLACEHOLDER}
    for split in splits:
        for _, target in split.pairs():
            symbols.update(t for t in target.split() if t[0] in "()" and len(t) > 1)
    return sorted(symbols)


def refuse_empty(split: Split, corpus: str, data_dir: Path | None) -> None:
    """Training reads both train and valid: a split with no pair (empty or whitespace-only files,
    a partial treebank) was prepared with exit 0 and left training with nothing to learn from or
    no dev loss. Stops at the first usable pair, so it costs nothing on real data."""
    if any(src.strip() and tgt.strip() for src, tgt in split.pairs()):
        return
    if split.files:
        where = f" in {split.files[0]} and {split.files[1]}"
    elif corpus == "ptb" and data_dir is not None:
        first, last = PTB_FILES[split.name]
        where = f" (wsj_{first:04d}.mrg to wsj_{last:04d}.mrg of {data_dir / 'ptb_wsj_sample' / 'mrg'})"
    else:
        where = ""
    raise DataError(f"the {split.name} split has no sentence pair with both sides non-empty{where}")


# Human word alignments (`alignment/` of the shared data): STEM.src-tgt pairs and STEM.gold links,
# 1-indexed, with the languages of the pair's two sides.
ALIGNMENT_SETS = {"zhen_dev": ("zh", "en"), "enfr": ("en", "fr")}


def alignment_set(name: str, data_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path, tuple[str, str]]:
    """(pairs file, gold file, (left language, right language)) of a shared alignment set named
    in ALIGNMENT_SETS, or of any `STEM` path with STEM.src-tgt and STEM.gold in the same format
    (its languages unknown: empty strings, unless the path is a shared set's own: zhen_dev given
    by its path skipped the language check and was read unreversed on an en→zh model)."""
    if name in ALIGNMENT_SETS:
        stem, languages = find_data_dir(data_dir) / "alignment" / name, ALIGNMENT_SETS[name]
    else:
        stem, languages = Path(name), ("", "")
        with suppress(DataError):  # (no shared data here: no set of its own)
            shared = find_data_dir(data_dir) / "alignment"
            found = [k for k in ALIGNMENT_SETS if Path(f"{stem}.gold").resolve() == (shared / f"{k}.gold").resolve()]
            languages = ALIGNMENT_SETS[found[0]] if found else languages
    pairs, gold = Path(f"{stem}.src-tgt"), Path(f"{stem}.gold")
    for path in (pairs, gold):
        if not path.is_file():
            known = ", ".join(ALIGNMENT_SETS)
            raise DataError(f"alignment set {name!r}: {path} is missing (a set is {known} or a STEM of two files)")
    return pairs, gold, languages
