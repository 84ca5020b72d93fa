"""Corpora to prepared token ids (§5.1), and the memory-mapped reader the trainer uses.

`attnlab data prepare CORPUS --out DIR` turns a corpus into a directory holding one shared
source-target sentencepiece BPE model (`spm.model`), `meta.json`, and for each split the token ids
of both sides as flat memory-mapped arrays (`{split}.{src,tgt}.bin` + `.idx` offsets) next to the
text they came from (`{split}.{src,tgt}.txt`, kept for BLEU references and probes). Ids are stored
without BOS/EOS; the batcher adds them.

Everything streams: the tokenizer is trained on a reservoir sample drawn by sentencepiece, and
each split is encoded chunk by chunk straight into its files, so memory does not grow with the
corpus (a full WMT14 run is 4.5M pairs). The directory is made beside --out and renamed into
place when whole (`staging.py`): a run that fails or is interrupted leaves --out as it was.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import numpy as np
import sentencepiece as spm

from attnlab.data import treebank
from attnlab.data.corpora import (
    CORPORA,
    DEFAULT_PAIR,
    DEFAULT_VOCAB,
    PTB_FILES,
    PTB_LEAVES,
    Split,
    check_options,
    check_pair,
    check_parallel,
    find_data_dir,
    multi30k_splits,
    ptb_splits,
    ptb_symbols,
    refuse_empty,
    wmt14_splits,
)
from attnlab.data.staging import EXTS, check_out, publish, read_meta, refuse_overwriting_inputs, spm_digest, staged
from attnlab.data.summary import summary
from attnlab.data.tatoeba import chinese_share, tatoeba_splits
from attnlab.data.text_corpus import text_splits
from attnlab.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, TrainingLines, spm_settings, train_tokenizer
from attnlab.errors import DataError

CHUNK = 8192  # pairs encoded per sentencepiece call
REQUIRED_SPLITS = ("train", "valid")  # what `attnlab train` reads; a test split is optional
MAX_VOCAB = 2**24  # ModelConfig's limit (attnlab.model.config.MAX_SIZES), which attnlab.data may not import


# --- writing prepared splits ----------------------------------------------------------------------


class _SideWriter:
    """Appends one side of a split to its `.bin` (ids), `.idx` (int64 offsets) and `.txt` files."""

    def __init__(self, bin_file: IO[bytes], idx_file: IO[bytes], txt_file: IO[bytes], dtype: np.dtype) -> None:
        self.bin, self.idx, self.txt, self.dtype = bin_file, idx_file, txt_file, dtype
        self.tokens = 0
        self.idx.write(np.zeros(1, np.int64).tobytes())

    def add(self, texts: list[str], ids: list[list[int]]) -> None:
        if not texts:
            return
        ends = self.tokens + np.cumsum(np.fromiter(map(len, ids), np.int64, count=len(ids)))
        flat = np.fromiter(itertools.chain.from_iterable(ids), self.dtype, count=ends[-1] - self.tokens)
        self.bin.write(flat.tobytes())
        self.idx.write(ends.tobytes())
        self.txt.write(("\n".join(texts) + "\n").encode("utf-8"))
        self.tokens = int(ends[-1])


def write_split(
    sp: spm.SentencePieceProcessor, split: Split, out: Path, max_len: int | None, dtype: np.dtype
) -> dict[str, int]:
    """Encode a split chunk by chunk into its files; count what was kept and what was dropped.

    Lines are stripped at both ends. A pair with an empty side is dropped; a pair with a side over
    `max_len` tokens is dropped when `max_len` is given (training only: test sets stay whole).
    """
    stats = dict(pairs=0, dropped_empty=0, dropped_long=0)
    limit = sys.maxsize if max_len is None else max_len
    with ExitStack() as files:
        src, tgt = (
            _SideWriter(*(files.enter_context(open(out / f"{split.name}.{side}.{ext}", "wb")) for ext in EXTS), dtype)
            for side in ("src", "tgt")
        )
        pairs = split.pairs()
        while chunk := list(itertools.islice(pairs, CHUNK)):
            stripped = [(s.strip(), t.strip()) for s, t in chunk]
            texts = [pair for pair in stripped if pair[0] and pair[1]]
            src_ids, tgt_ids = sp.encode([s for s, _ in texts]), sp.encode([t for _, t in texts])
            lengths = zip(map(len, src_ids), map(len, tgt_ids), strict=True)
            keep = [i for i, (s, t) in enumerate(lengths) if max(s, t) <= limit]
            src.add([texts[i][0] for i in keep], [src_ids[i] for i in keep])
            tgt.add([texts[i][1] for i in keep], [tgt_ids[i] for i in keep])
            stats["pairs"] += len(keep)
            stats["dropped_empty"] += len(stripped) - len(texts)
            stats["dropped_long"] += len(texts) - len(keep)
    return {**stats, "src_tokens": src.tokens, "tgt_tokens": tgt.tokens}


def _splits_for(
    corpus: str,
    data_dir: Path | None,
    pair: str,
    seed: int,
    train_dir: Path | None,
    leaves: str,
    text_files: dict[str, tuple[str, str]] | None,
    limit: int | None,
) -> tuple[list[Split], list[str], dict[str, Any]]:
    """The corpus's splits, the symbols its tokenizer must keep whole, and what meta.json should
    say about how the splits were made (beyond the files they come from)."""
    if corpus == "text":
        return text_splits(text_files or {}, pair), [], {}
    if corpus == "multi30k":
        return multi30k_splits(data_dir, pair), [], {}
    if corpus == "tatoeba":
        splits, info = tatoeba_splits(data_dir, pair, seed, limit)
        return splits, [], {"tatoeba": info}
    if corpus == "wmt14":
        return wmt14_splits(data_dir, pair, train_dir), [], {}
    if corpus == "ptb":
        splits = ptb_splits(data_dir, spelled=leaves == "words")
        return splits, ptb_symbols(splits), {}
    raise DataError(f"unknown corpus {corpus!r}; choose one of: {', '.join(CORPORA)}")


def prepare(
    corpus: str,
    out: str | os.PathLike[str],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    vocab_size: int | None = None,
    pair: str | None = None,
    max_len: int = 250,
    seed: int = 0,
    train_dir: str | os.PathLike[str] | None = None,
    leaves: str = "words",
    echo: Callable[[str], Any] = print,
    text_files: dict[str, tuple[str, str]] | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Prepare `corpus` into `out` (see the module docstring) and return its meta.json contents.
    `leaves` (ptb): "words" spells the words out in the target trees, "XX" is Vinyals & Kaiser's.
    `text_files` (text): {"train": (SRC, TGT), "valid": ..., "test": ...}, any parallel files.
    `limit`: keep only the first `limit` pairs of each split (a quick look, or a test)."""
    started = time.perf_counter()
    if corpus not in CORPORA:
        raise DataError(f"unknown corpus {corpus!r}; choose one of: {', '.join(CORPORA)}")
    given = {"--train-dir": train_dir is not None, "--leaves": leaves != "words", "--data-dir": data_dir is not None}
    check_options(corpus, given | {"--train/--valid/--test": bool(text_files)})
    pair = DEFAULT_PAIR[corpus] if pair is None else pair  # ("": an unset $PAIR, refused below)
    check_pair(corpus, pair)
    vocab_size = DEFAULT_VOCAB[corpus] if vocab_size is None else vocab_size  # (0 is refused, not the default)
    if max_len < 1:  # (each said alone: --vocab-size 0 was "--max-len must be positive and ...")
        raise DataError(f"--max-len must be positive, got {max_len}")
    if vocab_size < 300:
        raise DataError(f"--vocab-size must be at least 300 (256 byte pieces + specials), got {vocab_size}")
    if vocab_size > MAX_VOCAB:  # past 2**31 - 1, sentencepiece's ValueError traceback
        raise DataError(
            f"--vocab-size must be at most {MAX_VOCAB:,}, the most pieces a model takes, got {vocab_size:,}"
        )
    if limit is not None and not 1 <= limit <= sys.maxsize:  # past it, itertools.islice's ValueError traceback
        raise DataError(f"--limit must be from 1 to {sys.maxsize:,} pairs, got {limit:,}")
    if not 0 <= seed < 2**32:  # sentencepiece's seed is a uint32: outside, a raw TypeError
        raise DataError(f"--seed must be ≥ 0 and < 2**32, got {seed}")
    out = Path(out)
    check_out(out)
    root = None if corpus == "text" else find_data_dir(data_dir)
    if leaves not in PTB_LEAVES:
        raise DataError(f"--leaves must be one of {', '.join(PTB_LEAVES)}, got {leaves!r}")
    splits, symbols, about = _splits_for(
        corpus, root, pair, seed, Path(train_dir) if train_dir else None, leaves, text_files, limit
    )
    for split in splits:
        if split.files:
            check_parallel(*split.files)
    refuse_overwriting_inputs(out, splits)
    for split in splits:
        if split.name in REQUIRED_SPLITS:
            refuse_empty(split, corpus, root)
    if limit:
        splits = [Split(s.name, lambda s=s: itertools.islice(s.pairs(), limit), s.files) for s in splits]
    src_lang, _, tgt_lang = pair.partition("-")
    settings = spm_settings((src_lang, tgt_lang))
    with staged(out) as tmp:  # --out is untouched until `publish`: an error or Ctrl-C leaves it as it was
        lines = TrainingLines(splits[0].files)
        try:
            sp = train_tokenizer(lines.sentences(splits[0].pairs()), tmp / "spm", vocab_size, seed, symbols, settings)
        finally:  # a side sentencepiece mostly skipped is the reason, before its own ("--vocab-size 8000: this
            skipped = lines.check()  # corpus supports at most 2000", of the other side alone) or --max-len's
        dtype = np.dtype(np.uint16 if sp.get_piece_size() < 2**16 else np.int32)
        stats = {s.name: write_split(sp, s, tmp, max_len if s.name == "train" else None, dtype) for s in splits}
        if not stats["train"]["pairs"]:  # every pair had a side over --max-len
            raise DataError(f"no training pair has both sides within --max-len {max_len} tokens; raise --max-len")
        meta = {
            "corpus": corpus,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "task": "parse" if corpus == "ptb" else "translate",
            "vocab_size": sp.get_piece_size(),
            "spm": settings,
            "dtype": dtype.name,
            "specials": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "splits": stats,
            "max_len": max_len,
            "seed": seed,
            "limit": limit,
            "data_dir": str(root) if root else None,
            "seconds": round(time.perf_counter() - started, 2),
            "spm_sha256": spm_digest(tmp / "spm.model"),  # checked as the ids are read (`read_meta`)
        }
        if corpus == "ptb":
            files = {name: f"wsj_{a:04d}-wsj_{b:04d}" for name, (a, b) in PTB_FILES.items()}
            meta.update(placeholder=treebank.PLACEHOLDER, leaves=leaves, split_files=files)
        meta.update(about)
        if any(skipped.values()):
            meta["spm_skipped_lines"] = skipped
        if "zh" in (src_lang, tgt_lang):
            meta["chinese_pieces"] = chinese_share([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
        if corpus == "wmt14":
            meta["train_dir"] = str(train_dir or root / "opennmt_toy_ende")
        if corpus == "text":
            meta["files"] = {
                name: [str(Path(path).resolve()) for path in pair] for name, pair in (text_files or {}).items()
            }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        removed = publish(tmp, out, splits)
    echo(summary(meta, out))
    if removed:
        echo(f"  removed the {', '.join(removed)} split files an earlier prepare left in {out}")
    return meta


# --- reading prepared splits ----------------------------------------------------------------------


def _size(path: Path) -> int:
    if not path.is_file():
        raise DataError(f"{path} is missing; prepare the data again")
    return path.stat().st_size


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    if _size(path) == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _cut_short(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}; the file was cut short or changed, prepare the data again")


class _Side:
    """One side of a prepared split, memory-mapped on first use.

    Each file is checked against meta.json's pair count when first opened (sizes and offsets,
    no scan of the ids), so a file cut short is a `DataError` naming it, never an IndexError
    later or a sentence silently cut off by a slice past the end of a memory map.
    """

    def __init__(self, prefix: Path, dtype: str, pairs: int) -> None:
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self.pairs = pairs

    @cached_property
    def offsets(self) -> np.ndarray:
        """pairs + 1 int64 offsets into the ids, from 0, never decreasing."""
        path = Path(f"{self.prefix}.idx")
        size, need = _size(path), (self.pairs + 1) * 8
        if size != need:
            raise _cut_short(path, f"{size:,} bytes where meta.json's {self.pairs:,} pairs need {need:,}")
        offsets = np.fromfile(path, dtype=np.int64)
        if offsets[0] != 0 or (np.diff(offsets) < 0).any():
            raise _cut_short(path, "its offsets do not start at 0 and grow")
        return offsets

    @cached_property
    def ids(self) -> np.ndarray:
        path = Path(f"{self.prefix}.bin")
        size, need = _size(path), int(self.offsets[-1]) * self.dtype.itemsize
        if size != need:
            raise _cut_short(path, f"{size:,} bytes where its .idx file needs {need:,}")
        return _map(path, self.dtype)

    @cached_property
    def text(self) -> np.ndarray:
        return _map(Path(f"{self.prefix}.txt"), np.dtype(np.uint8))

    @cached_property
    def line_starts(self) -> np.ndarray:
        """Byte offset of each line's start, found once from the newlines."""
        ends = np.flatnonzero(self.text == ord("\n"))
        if len(ends) != self.pairs:
            raise _cut_short(
                Path(f"{self.prefix}.txt"), f"{len(ends):,} lines where meta.json has {self.pairs:,} pairs"
            )
        return np.concatenate([[0], ends + 1])

    def line(self, i: int) -> str:
        start, end = self.line_starts[i], self.line_starts[i + 1] - 1
        return bytes(self.text[start:end]).decode("utf-8")

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        return padded_rows(self.ids, self.offsets, indices, pad)


def padded_rows(ids: np.ndarray, offsets: np.ndarray, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentences `indices` of a side stored as `ids` cut at `offsets`: one (B, longest) int64
    array padded with `pad`, and their lengths. One gather from the memory map, not a slice and
    a copy per sentence: collating the paper's 25k-token batch (1,785 Multi30k pairs) took 38 ms
    of the host's time that way, which on a GPU must hide behind the device's step."""
    starts = offsets[indices]
    lengths = offsets[indices + 1] - starts
    columns = np.arange(int(lengths.max(initial=0)))
    inside = columns < lengths[:, None]
    out = np.full(inside.shape, pad, np.int64)
    out[inside] = ids[(starts[:, None] + columns)[inside]]
    return out, lengths


class ParallelData:
    """A prepared split: token ids of pair `i` by `src(i)`/`tgt(i)`, their text by `src_text(i)`.

    Construction reads only meta.json; the arrays are memory-mapped when first used, so opening a
    split of WMT14 costs no memory until batches are drawn from it.
    """

    def __init__(self, prepared_dir: str | os.PathLike[str], split: str) -> None:
        self.dir = Path(prepared_dir)
        meta_path = self.dir / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{self.dir} is not a prepared data directory (no meta.json); run `attnlab data prepare`")
        self.meta: dict[str, Any] = read_meta(meta_path)
        if split not in self.meta["splits"]:
            raise DataError(f"{self.dir} has no split {split!r}; it has: {', '.join(self.meta['splits'])}")
        self.split = split
        self._src = _Side(self.dir / f"{split}.src", self.meta["dtype"], len(self))
        self._tgt = _Side(self.dir / f"{split}.tgt", self.meta["dtype"], len(self))

    def __len__(self) -> int:
        return int(self.meta["splits"][self.split]["pairs"])

    def check(self) -> None:
        """Every id file's size against meta.json now, not at the first batch: a run found a
        train.src.bin cut short after making its run directory, and left it empty. (Sizes and
        offsets only: the text files are scanned when a line is first read.)"""
        for side in (self._src, self._tgt):
            side.ids  # noqa: B018  (opened for its check)

    def __repr__(self) -> str:
        return f"ParallelData({str(self.dir)!r}, {self.split!r}: {len(self)} pairs)"

    @cached_property
    def src_lens(self) -> np.ndarray:
        """Source length of every pair in tokens, without BOS/EOS."""
        return np.diff(self._src.offsets)

    @cached_property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self._tgt.offsets)

    def src(self, i: int) -> np.ndarray:
        return self._src[i]

    def tgt(self, i: int) -> np.ndarray:
        return self._tgt[i]

    def src_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        """Sources of pairs `indices`, (B, longest) padded with `pad`, and their lengths."""
        return self._src.rows(indices, pad)

    def tgt_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        """Targets of pairs `indices`, (B, longest) padded with `pad`, and their lengths."""
        return self._tgt.rows(indices, pad)

    def src_text(self, i: int) -> str:
        return self._src.line(i)

    def tgt_text(self, i: int) -> str:
        return self._tgt.line(i)
