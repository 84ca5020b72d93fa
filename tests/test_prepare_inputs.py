"""Bad input to `attnlab data prepare` is one line naming what to change, found before anything is
written, and a rerun into the same directory leaves nothing of the earlier run behind: never a
traceback, sentencepiece's own option names, or a silent wrong result (pairs read twice, a pair
of languages a corpus does not have, counts of data that was not prepared)."""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnlab import cli, data, publish
from attnlab.data import prepared, staging, tokenizer
from attnlab.data.corpora import Split, wmt14_splits
from attnlab.errors import DataError


def quiet(_: str) -> None:
    """`echo` for prepare that prints nothing."""


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def text_files(root: Path, splits: tuple[str, ...] = ("train", "valid")) -> dict[str, tuple[str, str]]:
    """Made-up parallel files for `prepare("text", ...)`: 200 training pairs, 20 per other split."""
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in splits:
        count = 200 if name == "train" else 20
        src = write_lines(root / f"{name}.in", [f"line {i} of {name} says {i % 7} things" for i in range(count)])
        tgt = write_lines(root / f"{name}.out", [f"{name} {i % 5} said" for i in range(count)])
        files[name] = (str(src), str(tgt))
    return files


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("attnlab data prepare: error: ") and "\n" not in error, error
    return error


# --- the corpus and its languages -------------------------------------------------------------------


def test_a_training_file_both_plain_and_gzipped_is_refused(tmp_path: Path) -> None:
    """a.en beside a.en.gz (an unpacked copy left next to its archive) read every pair twice:
    train 4,000 from 2,000 pairs, with no note."""
    for lang in ("en", "de"):
        (tmp_path / f"a.{lang}").write_bytes(b"x\ny\n")
        (tmp_path / f"a.{lang}.gz").write_bytes(gzip.compress(b"x\ny\n"))
    with pytest.raises(DataError, match=rf"^{tmp_path}/a\.en and {tmp_path}/a\.en\.gz are both in") as error:
        data.parallel_files(tmp_path, "en", "de")
    assert "\n" not in str(error.value)
    (tmp_path / "a.en.gz").unlink()  # the target side alone, twice, is just as ambiguous
    with pytest.raises(DataError, match=r"a\.de and .*a\.de\.gz are both in"):
        data.parallel_files(tmp_path, "en", "de")
    (tmp_path / "a.de").unlink()
    assert [(a.name, b.name) for a, b in data.parallel_files(tmp_path, "en", "de")] == [("a.en", "a.de.gz")]


def test_a_training_directory_that_is_a_file_says_so(tmp_path: Path) -> None:
    """It said "training directory a.en does not exist" of a file that does."""
    file = write_lines(tmp_path / "a.en", ["x"])
    with pytest.raises(DataError, match=r"training directory .*a\.en is a file, not a directory"):
        wmt14_splits(tmp_path, "en-de", file)
    with pytest.raises(DataError, match=r"training directory .*nope does not exist"):
        wmt14_splits(tmp_path, "en-de", tmp_path / "nope")


def test_pair_is_checked_for_ptb_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ptb --pair de-en` recorded German to English for a parsing corpus, and `text --pair foo`
    printed "prepared text foo-" with an empty target language in meta.json."""
    out = tmp_path / "out"
    assert "its only pair is en-ptb" in refused(
        capsys, ["data", "prepare", "ptb", "--pair", "de-en", "--out", str(out)]
    )
    files = text_files(tmp_path / "text")
    argv = ["data", "prepare", "text", "--out", str(out), "--vocab-size", "300"]
    argv += ["--train", *files["train"], "--valid", *files["valid"]]
    for bad in ("foo", "en-", "-de", "en-de-fr", "en de"):
        assert "a text corpus needs SRC-TGT" in refused(capsys, [*argv, f"--pair={bad}"])
    assert not out.exists()
    assert cli.main([*argv, "--pair", "en-en"]) == 0  # a summary of English is English
    assert "prepared text en-en" in capsys.readouterr().out
    meta = data.prepare("text", out, text_files=files, pair="de-en", vocab_size=300, echo=quiet)
    assert (meta["src_lang"], meta["tgt_lang"]) == ("de", "en")


def test_a_text_corpus_whose_sides_are_mixed_up_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each was prepared with exit 0 and trained without a word: files named the reverse of
    --pair (train.en train.zh as zh-en: its Chinese outputs scored with the 13a tokenizer, 0.0
    BLEU), a valid split given target first, and an empty --pair (an unset $PAIR), which became
    "src-tgt". One file given as both sides, or two copies of it, is a copy task: said, not refused."""
    root = tmp_path / "text"
    files = text_files(root)
    named = {}
    for name, (src, tgt) in files.items():  # the same lines, in files named by their languages
        named[name] = (str(shutil.copy(src, root / f"{name}.en")), str(shutil.copy(tgt, root / f"{name}.zh")))
    out = tmp_path / "out"
    argv = ["data", "prepare", "text", "--out", str(out), "--vocab-size", "300"]
    train, valid = named["train"], named["valid"]
    for sides, pair, said in (
        ([*train, *valid], "zh-en", "--train: train.en and train.zh are named en then zh, the reverse of --pair zh-en"),
        ([*train, *valid[::-1]], "en-zh", "--valid: valid.zh and valid.en are named zh then en, the reverse of --pair"),
        ([*train, *valid], "", "--pair '': a text corpus needs SRC-TGT"),
    ):
        line = refused(capsys, [*argv, "--train", *sides[:2], "--valid", *sides[2:], f"--pair={pair}"])
        assert said in line, line
    assert not out.exists()
    (root / "copy.en").write_bytes(Path(train[0]).read_bytes())
    for copy, said in ((train[0], "is both the source and the target"), (str(root / "copy.en"), "are the same text")):
        where = ["--out", str(tmp_path / Path(copy).name)]
        assert cli.main([*argv, *where, "--train", train[0], copy, "--valid", *valid, "--pair", "en-en"]) == 0
        err = capsys.readouterr().err
        assert f"warning: --train: {train[0]} " in err and f"{said}: the model learns to copy its input" in err, err
    assert cli.main([*argv, "--train", *train, "--valid", *valid, "--pair", "en-zh"]) == 0  # the right way round


def test_an_option_the_corpus_does_not_read_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`prepare multi30k --train-dir MINE`, `--train A B --valid C D` or `--leaves XX` prepared
    the shared Multi30k with exit 0, the option ignored; `text --data-dir D` did not look in D."""
    files = text_files(tmp_path / "text")
    pairs = ["--train", *files["train"], "--valid", *files["valid"]]
    out = tmp_path / "out"
    for corpus, extra, flag in (
        ("multi30k", ["--train-dir", str(tmp_path)], "--train-dir (only wmt14 does)"),
        ("tatoeba", pairs, "--train/--valid/--test (only text does)"),
        ("wmt14", ["--leaves", "XX"], "--leaves (only ptb does)"),
    ):
        argv = ["data", "prepare", corpus, "--data-dir", str(tmp_path), "--out", str(out), *extra]
        assert f"{corpus} does not read {flag}" in refused(capsys, argv)
    argv = ["data", "prepare", "text", "--data-dir", str(tmp_path), "--out", str(out), *pairs]
    assert "text reads the files --train, --valid and --test name, not --data-dir" in refused(capsys, argv)
    assert not out.exists()
    with pytest.raises(DataError, match="multi30k does not read --train/--valid/--test"):
        data.prepare("multi30k", out, text_files=files, echo=quiet)


# --- the run's own settings ---------------------------------------------------------------------------


def test_an_out_directory_that_cannot_be_made_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out under a file was a NotADirectoryError, under /proc a FileNotFoundError: tracebacks."""
    files = text_files(tmp_path / "text")
    argv = ["data", "prepare", "text", "--vocab-size", "300", "--train", *files["train"], "--valid", *files["valid"]]
    file = write_lines(tmp_path / "a.en", ["x"])
    error = refused(capsys, [*argv, "--out", str(file / "sub")])
    assert error.endswith(f"--out {file}/sub: {file} is a file, not a directory")
    if Path("/proc/self").is_dir():  # Linux: nothing can be made in /proc
        assert "--out /proc/attnlab-test: cannot create it (" in refused(capsys, [*argv, "--out", "/proc/attnlab-test"])


def test_a_seed_sentencepiece_cannot_take_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sentencepiece's seed is a uint32: --seed 99999999999 was a raw TypeError from it."""
    files = text_files(tmp_path / "text")
    argv = ["data", "prepare", "text", "--out", str(tmp_path / "out"), "--vocab-size", "300"]
    argv += ["--train", *files["train"], "--valid", *files["valid"]]
    for seed in ("99999999999", str(2**32), "-1"):
        assert "--seed must be ≥ 0 and < 2**32" in refused(capsys, [*argv, "--seed", seed])
    assert not (tmp_path / "out").exists()
    with pytest.raises(DataError, match=r"--seed must be ≥ 0 and < 2\*\*32, got 4294967296"):
        data.train_tokenizer(["a b c"], tmp_path / "spm", 300, 2**32)
    assert cli.main([*argv, "--seed", str(2**32 - 1)]) == 0


def test_a_vocabulary_or_limit_past_what_the_libraries_take_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--vocab-size past 2**31 - 1 was sentencepiece's ValueError traceback ("cannot parse ...
    as int"), --limit past 2**63 - 1 itertools.islice's; a vocabulary is now capped where the
    model's is (ModelConfig's 2**24)."""
    from attnlab.model.config import MAX_SIZES

    assert MAX_SIZES["vocab_size"] == prepared.MAX_VOCAB
    files = text_files(tmp_path / "text")
    argv = ["data", "prepare", "text", "--out", str(tmp_path / "out"), "--train", *files["train"]]
    argv += ["--valid", *files["valid"]]
    for flag, value, said in (
        ("--vocab-size", 2**32 + 1, "--vocab-size must be at most 16,777,216, the most pieces a model takes"),
        ("--vocab-size", 2**24 + 1, "--vocab-size must be at most 16,777,216"),
        ("--limit", 2**63, "--limit must be from 1 to 9,223,372,036,854,775,807 pairs"),
        ("--limit", 0, "--limit must be from 1"),
    ):
        assert said in refused(capsys, [*argv, flag, str(value)])
    assert not (tmp_path / "out").exists()
    assert cli.main([*argv, "--vocab-size", "300", "--limit", str(2**63 - 1)]) == 0


# --- sentencepiece's failures, in attnlab's words -------------------------------------------------------


def test_a_vocabulary_too_large_for_the_corpus_names_the_most_it_supports(tmp_path: Path) -> None:
    """It was sentencepiece's "INTERNAL: src/trainer_interface.cc(744) [...] Vocabulary size too
    high (50000). Please set it to a value <= 302."."""
    files = text_files(tmp_path / "text")
    with pytest.raises(DataError) as error:
        data.prepare("text", tmp_path / "out", text_files=files, vocab_size=50000, echo=quiet)
    assert re.fullmatch(r"--vocab-size 50000: this corpus supports at most \d+ pieces", str(error.value))


def test_training_text_of_only_overlong_lines_says_why(tmp_path: Path) -> None:
    """sentencepiece trains on lines of at most 4,192 bytes: files ended by a lone \\r (one line
    each) or of long documents alone failed as "sentencepiece training failed: INTERNAL:
    src/trainer_interface.cc(467) [!sentences_.empty()]"."""
    files = text_files(tmp_path / "text")
    for name, end, words in (("mac", "\r", 10), ("long", "\n", 1000)):
        for path in (tmp_path / f"{name}.in", tmp_path / f"{name}.out"):  # (two sides: not a copy task)
            path.write_text("".join(f"{path.suffix} {i} " + "word " * words + end for i in range(200)), newline="")
        files["train"] = (str(tmp_path / f"{name}.in"), str(tmp_path / f"{name}.out"))
        with pytest.raises(DataError) as error:
            data.prepare("text", tmp_path / "out", text_files=files, vocab_size=300, echo=quiet)
        assert str(error.value).startswith("no training line sentencepiece can learn from: every one is longer than")
        assert "\n" not in str(error.value) and "trainer_interface" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_side_sentencepiece_mostly_skips_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Long documents opposite short sentences prepared without a word (with --max-len raised): the
    vocabulary was learnt from the targets alone and a 900-word source line became ~5,000 byte
    pieces. A side more than half of whose lines sentencepiece skips is refused in one line naming
    it, its file and the limit; fewer skipped lines are said in the summary and meta.json."""
    files = text_files(tmp_path / "text")
    src, tgt = (Path(path) for path in files["train"])
    short, targets = src.read_text().splitlines(), tgt.read_text().splitlines()
    document = [f"line {i} " + "word " * 1000 for i in range(200)]  # 5,000 bytes and more
    argv = ["data", "prepare", "text", "--vocab-size", "300", "--max-len", "100000", "--valid", *files["valid"]]
    argv += ["--train", str(src), str(tgt), "--out", str(tmp_path / "out")]
    write_lines(src, document)
    assert refused(capsys, argv) == (
        f"attnlab data prepare: error: every one of the 200 training lines of the source ({src}) is longer than the 4,192 "
        "bytes sentencepiece learns from: the shared vocabulary would be learnt from the target alone, and the model "
        "would read such lines as byte pieces; split them into sentences (a side is refused when more than half of "
        "its lines are that long)"
    )
    write_lines(src, short)
    write_lines(tgt, document[:101] + short[101:])  # a bare majority of the target's lines
    error = refused(capsys, argv)
    assert f"101 of the 200 training lines of the target ({tgt}) are longer than the 4,192 bytes" in error
    assert "learnt from the source mostly" in error and not (tmp_path / "out").exists()
    write_lines(tgt, document[:100] + short[100:])  # half is kept, and said
    meta = data.prepare("text", tmp_path / "out", text_files=files, vocab_size=300, max_len=100_000)
    assert meta["spm_skipped_lines"] == {"src": 0, "tgt": 100}
    assert "the vocabulary was learnt without 0 source and 100 target training lines longer than 4,192 bytes" in (
        capsys.readouterr().out
    )
    write_lines(tgt, targets)
    assert "spm_skipped_lines" not in data.prepare("text", tmp_path / "out", text_files=files, vocab_size=300)


def test_a_vocabulary_too_small_says_what_to_pass_instead(tmp_path: Path) -> None:
    """sentencepiece said "Increase vocab_size or decrease character_coverage with
    --character_coverage option", an option attnlab does not have."""
    chinese = [chr(0x4E00 + i) for i in range(120)]
    lines = ["".join(chinese[(7 * i + j) % 120] for j in range(10)) for i in range(400)]
    root = tmp_path / "text"
    root.mkdir()
    src, tgt = write_lines(root / "zh.txt", lines), write_lines(root / "en.txt", lines[::-1])
    files = {name: (str(src), str(tgt)) for name in ("train", "valid")}
    with pytest.raises(DataError) as error:
        data.prepare("text", tmp_path / "out", text_files=files, pair="zh-en", vocab_size=300, echo=quiet)
    message = str(error.value)
    assert "character_coverage" not in message and "sentencepiece" not in message, message
    assert message == (
        "--vocab-size 300 is too small for this corpus: its 120 distinct characters, the specials and the byte "
        "pieces need 380 pieces; pass --vocab-size 380 or more"
    )
    data.prepare("text", tmp_path / "out", text_files=files, pair="zh-en", vocab_size=380, echo=quiet)  # it is enough


def test_bad_utf8_in_the_training_text_is_the_corpus_error_alone(tmp_path: Path) -> None:
    """It read "sentencepiece training failed: INTERNAL: DataError: bad.en:10: invalid UTF-8 ..."."""
    files = text_files(tmp_path / "text")
    bad = Path(files["train"][0])
    lines = bad.read_bytes().split(b"\n")
    lines[9] = b"caf\xe9"
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError) as error:
        data.prepare("text", tmp_path / "out", text_files=files, vocab_size=300, echo=quiet)
    assert str(error.value) == f"{bad}:10: invalid UTF-8 (invalid continuation byte at byte 3)"


def test_a_file_that_is_not_text_is_said_before_the_line_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One training file saved as UTF-16 (Notepad's "Unicode") was "train.in has 201 lines but
    train.out has 200; the files must be aligned line by line": counted before it was read, it was
    never said to be UTF-16 (two such files were). A file holding a NUL in its first block was
    prepared, the NUL read as a space; one further on names its line, as invalid UTF-8 does."""
    files = text_files(tmp_path / "text")
    src, tgt = (Path(path) for path in files["train"])
    argv = ["data", "prepare", "text", "--vocab-size", "320", "--out", str(tmp_path / "out")]
    argv += ["--train", *files["train"], "--valid", *files["valid"]]
    src.write_bytes(src.read_text(encoding="utf-8").encode("utf-16"))  # its byte-order mark, then little-endian
    assert refused(capsys, argv).endswith(
        f": {src}: UTF-16 text (it begins with UTF-16's byte-order mark, as Notepad's \"Unicode\"); save it as UTF-8"
    )
    write_lines(src, [f"line {i} of train" for i in range(200)])
    lines = tgt.read_bytes().split(b"\n")
    tgt.write_bytes(b"\n".join([b"a\x00b", *lines[1:]]))
    assert refused(capsys, argv).endswith(
        f": {tgt}: not text, a NUL byte at byte 1 (a binary file, or UTF-16 "
        "without its byte-order mark); give a UTF-8 text file"
    )
    lines = [f"{i % 5} was said, and said again, and then said once more" for i in range(200)]  # 10 kB
    far = 8000 // len(lines[0]) + 5  # a line past the first 8000 bytes
    write_lines(tgt, [*lines[:far], "a\x00b", *lines[far + 1 :]])
    assert refused(capsys, argv).endswith(f": {tgt}:{far + 1}: a NUL byte at byte 1, which no text holds")


# --- what the run reports and leaves behind ----------------------------------------------------------


def test_tatoeba_counts_under_limit_describe_the_pairs_prepared(tmp_path: Path) -> None:
    """With --limit 300 the summary printed the whole splits' distinct English sentences
    ("train 99,277") beside 300 pairs."""
    folder = tmp_path / "data" / "tatoeba_deu_eng"
    folder.mkdir(parents=True)
    english = [f"Sentence number {i} is here." for i in range(3000)]
    write_lines(folder / "train.en", english)
    write_lines(folder / "train.de", [f"Satz Nummer {i} ist hier." for i in range(3000)])
    printed: list[str] = []
    meta = data.prepare(
        "tatoeba", tmp_path / "out", data_dir=tmp_path / "data", vocab_size=300, limit=20, echo=printed.append
    )
    assert {name: s["pairs"] for name, s in meta["splits"].items()} == {"train": 20, "valid": 20, "test": 20}
    assert "distinct English sentences: train 20, valid 20, test 20" in printed[0], printed[0]
    full = meta["tatoeba"]["split"]["distinct_english"]  # the whole splits' counts are kept in meta.json
    assert sum(full.values()) == 3000 and full["train"] > 2800


def test_a_rerun_removes_the_splits_an_earlier_run_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rerun with fewer splits left the earlier test.* files, encoded with the old spm.model,
    beside the new ones. Only files by the names prepare writes go; other files stay."""
    out = tmp_path / "out"
    with_test = text_files(tmp_path / "text", ("train", "valid", "test"))
    data.prepare("text", out, text_files=with_test, vocab_size=300, echo=quiet)
    assert (out / "test.src.bin").is_file()
    (out / "notes.txt").write_text("mine")
    (out / "test.src.csv").write_text("mine too")
    printed: list[str] = []
    without = {name: with_test[name] for name in ("train", "valid")}
    data.prepare("text", out, text_files=without, vocab_size=400, echo=printed.append)
    assert not [path.name for path in out.glob("test.*.*") if path.suffix != ".csv"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "test.src.csv").is_file()
    assert printed[-1] == f"  removed the test split files an earlier prepare left in {out}"
    assert data.ParallelData(out, "train").meta["splits"].keys() == {"train", "valid"}

    # a file of that name that is this run's input is read, not removed
    data.prepare("text", out, text_files=with_test, vocab_size=300, echo=quiet)
    own = {"train": with_test["train"], "valid": (str(out / "test.src.txt"), str(out / "test.tgt.txt"))}
    before = Path(own["valid"][0]).read_bytes()
    meta = data.prepare("text", out, text_files=own, vocab_size=300, echo=quiet)
    assert Path(own["valid"][0]).read_bytes() == before and meta["splits"]["valid"]["pairs"] == 20


# --- --out is replaced whole when the new preparation is, or not at all --------------------------------


def files_in(directory: Path) -> dict[str, bytes | None]:
    """Everything under `directory` by its relative path: a file's bytes, None for a directory."""
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None for p in directory.rglob("*")}


def leftovers(parent: Path) -> list[str]:
    """The temporaries a preparation left beside its --out (`.NAME.tmp-XXXX`)."""
    return sorted(path.name for path in parent.iterdir() if ".tmp-" in path.name)


def chinese_files(root: Path) -> dict[str, tuple[str, str]]:
    """Parallel files of 120 distinct characters: --vocab-size 300 is refused by sentencepiece."""
    chinese = [chr(0x4E00 + i) for i in range(120)]
    lines = ["".join(chinese[(7 * i + j) % 120] for j in range(10)) for i in range(400)]
    root.mkdir(parents=True)
    src, tgt = write_lines(root / "zh.txt", lines), write_lines(root / "en.txt", lines[::-1])
    return {name: (str(src), str(tgt)) for name in ("train", "valid")}


def test_a_refused_run_leaves_out_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--vocab-size too small, found by sentencepiece half-way, deleted the earlier preparation's
    meta.json (nothing could load it after), and into a new --out left an empty directory."""
    good = tmp_path / "good"
    splits = text_files(tmp_path / "text", ("train", "valid", "test"))
    data.prepare("text", good, text_files=splits, vocab_size=300, echo=quiet)
    before = files_in(good)
    files = chinese_files(tmp_path / "zh")
    argv = ["data", "prepare", "text", "--vocab-size", "300", "--train", *files["train"], "--valid", *files["valid"]]
    assert "--vocab-size 300 is too small for this corpus" in refused(capsys, [*argv, "--out", str(good)])
    assert files_in(good) == before and len(data.ParallelData(good, "test")) == 20
    assert "--vocab-size 300 is too small" in refused(capsys, [*argv, "--out", str(tmp_path / "new" / "out")])
    assert not (tmp_path / "new").exists() and leftovers(tmp_path) == []


def test_an_interrupted_run_leaves_out_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C left a new --out holding spm.model alone, or an earlier one without meta.json and with
    train files of the new vocabulary beside valid files of the old; during the tokenizer's
    training it said "sentencepiece training failed: INTERNAL: KeyboardInterrupt"."""
    files = text_files(tmp_path / "text")
    good = tmp_path / "good"
    data.prepare("text", good, text_files=files, vocab_size=300, echo=quiet)
    before = files_in(good)
    write_split, replace, swap = prepared.write_split, staging.os.replace, publish.exchanged
    interrupted: list[str] = []

    def train_only(sp: Any, split: Split, *args: Any) -> dict[str, int]:
        if split.name != "train":  # train written with the new vocabulary, valid not yet
            raise KeyboardInterrupt
        return write_split(sp, split, *args)

    def sentences(lines: tokenizer.TrainingLines, pairs: Any) -> Iterator[str]:  # while sentencepiece reads
        yield "a few words"
        raise KeyboardInterrupt

    def first_publish(source: Path, target: Path) -> None:  # the old --out set aside, the new one not yet in
        if ".tmp-" in Path(source).name and Path(target).parent == tmp_path and not interrupted:
            interrupted.append(str(target))
            raise KeyboardInterrupt
        replace(source, target)

    def first_swap(first: Path, second: Path) -> bool:  # the one-step swap asked for, not yet made
        if not interrupted:
            interrupted.append(str(second))
            raise KeyboardInterrupt
        return swap(first, second)

    argv = ["data", "prepare", "text", "--vocab-size", "400", "--train", *files["train"], "--valid", *files["valid"]]
    steps = {
        "write_split": [(prepared, train_only)],
        "sentences": [(tokenizer.TrainingLines, sentences)],
        "replace": [(staging.os, first_publish), (publish, first_swap)],  # (a new --out, an earlier one)
    }
    for name, patches in steps.items():
        with monkeypatch.context() as patch:
            for owner, step in patches:
                patch.setattr(owner, "exchanged" if owner is publish else name, step)
            for out in (good, tmp_path / "new"):
                interrupted.clear()
                assert cli.main([*argv, "--out", str(out)]) == 130, name
                assert capsys.readouterr().err == "attnlab data prepare: interrupted\n", name
                assert files_in(good) == before and not (tmp_path / "new").exists(), name
                assert leftovers(tmp_path) == [], name
    assert cli.main([*argv, "--out", str(good)]) == 0
    assert data.ParallelData(good, "train").meta["vocab_size"] == 400
    after = files_in(good)

    def full_disk(sp: Any, split: Split, where: Path, *args: Any) -> dict[str, int]:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where / f"{split.name}.src.bin"))

    with monkeypatch.context() as patch:  # a full disk was a traceback
        patch.setattr(prepared, "write_split", full_disk)
        assert cli.main([*argv[:3], "--vocab-size", "300", *argv[5:], "--out", str(good)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("attnlab data prepare: error: stopped: No space left on device (") and "\n" not in error
    assert error.endswith(f"train.src.bin); --out {good} is as it was") and files_in(good) == after
    assert leftovers(tmp_path) == []


def test_an_out_that_is_not_a_preparation_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out CHECKPOINT wrote its own spm.model over the checkpoint's and exited 0: the model then
    decoded with another vocabulary. A run directory, or any directory with other files in it, is
    refused as well; an empty one is prepared into."""
    checkpoint = tmp_path / "model"
    shutil.copytree(Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de", checkpoint)
    run = tmp_path / "run"
    (run / "checkpoints" / "step_10").mkdir(parents=True)
    (run / "train.jsonl").write_text("{}\n")
    other = tmp_path / "other"
    other.mkdir()
    write_lines(other / "notes.txt", ["mine"])
    files = text_files(tmp_path / "text")
    argv = ["data", "prepare", "text", "--vocab-size", "300", "--train", *files["train"], "--valid", *files["valid"]]
    for out, what in ((checkpoint, "an attnlab checkpoint"), (run, "a training run's directory"), (other, "not a")):
        before = files_in(out)
        assert f"--out {out} is {what}" in refused(capsys, [*argv, "--out", str(out)])
        assert files_in(out) == before
    assert leftovers(tmp_path) == []
    (tmp_path / "empty").mkdir()
    assert cli.main([*argv, "--out", str(tmp_path / "empty")]) == 0
    assert (tmp_path / "empty" / "meta.json").is_file()


def test_what_a_killed_run_left_beside_out_is_removed_by_the_next(tmp_path: Path) -> None:
    """SIGKILL (or a power cut) runs no handler: the temporary, up to a whole preparation, stayed
    beside --out forever. The next run removes it once it is STALE_AFTER_S old, and only it: not a
    temporary a live run holds, nor a fresh one (made a moment ago by a run not yet holding it)."""
    files = text_files(tmp_path / "text")
    good = tmp_path / "good"
    argv = ["data", "prepare", "text", "--vocab-size", "300", "--train", *files["train"], "--valid", *files["valid"]]
    assert cli.main([*argv, "--out", str(good)]) == 0
    killed = "import os, signal, sys\nfrom attnlab.data.staging import staged\nfrom pathlib import Path\n"
    killed += "with staged(Path(sys.argv[1])) as tmp:\n    (tmp / 'spm.model').write_bytes(b'half')\n"
    killed += "    os.kill(os.getpid(), signal.SIGKILL)\n"
    assert subprocess.run([sys.executable, "-c", killed, str(good)], check=False).returncode == -signal.SIGKILL
    (left,) = leftovers(tmp_path)
    assert cli.main([*argv, "--out", str(good)]) == 0
    assert leftovers(tmp_path) == [left]  # fresh: perhaps a run about to take it
    old = time.time() - 2 * staging.STALE_AFTER_S
    with staging.staged(good) as live:  # a run preparing now, as old
        for name in (left, live.name):
            os.utime(tmp_path / name, (old, old))
        assert cli.main([*argv, "--out", str(good)]) == 0
        assert leftovers(tmp_path) == [live.name]
    assert data.ParallelData(good, "train").meta["vocab_size"] == 300
    # without --out, a temporary may be the earlier preparation, set aside by a run killed between
    # its two renames: kept
    shutil.rmtree(tmp_path / live.name)
    aside = tmp_path / ".fresh.tmp-aside"
    aside.mkdir()
    os.utime(aside, (old, old))
    assert cli.main([*argv, "--out", str(tmp_path / "fresh")]) == 0
    assert leftovers(tmp_path) == [aside.name]


def test_ctrl_c_once_the_new_preparation_is_in_place_lets_it_finish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT while the earlier --out, set aside, was being removed said "interrupted" (exit
    130) with --out already replaced by the new preparation: the publishing is not interrupted."""
    files = text_files(tmp_path / "text")
    good = tmp_path / "good"
    data.prepare("text", good, text_files=files, vocab_size=300, echo=quiet)
    remove, signalled = staging.shutil.rmtree, []

    def ctrl_c_then_remove(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).name.startswith(".good.tmp-") and not signalled:  # the earlier one, set aside
            signalled.append(path)
            os.kill(os.getpid(), signal.SIGINT)  # Python runs its handler at the next bytecode
        remove(path, *args, **kwargs)

    monkeypatch.setattr(staging.shutil, "rmtree", ctrl_c_then_remove)
    argv = ["data", "prepare", "text", "--vocab-size", "400", "--train", *files["train"], "--valid", *files["valid"]]
    # Python's own handler, as in a terminal: pytest started in the background (`&`) begins with SIGINT
    # ignored, the signal then did nothing, and the handler "back" at the end was SIG_IGN (a flaky failure)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert cli.main([*argv, "--out", str(good)]) == 0 and signalled
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (the handler is back)
    finally:
        signal.signal(signal.SIGINT, before)
    assert "interrupted" not in capsys.readouterr().err
    assert data.ParallelData(good, "train").meta["vocab_size"] == 400 and leftovers(tmp_path) == []
