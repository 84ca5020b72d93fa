"""`attnlab data prepare/download` on the real shared corpora, and its errors on small made-up files."""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from attnlab import cli, data
from attnlab.data import download
from attnlab.errors import CheckpointError, DataError


def _data_dir() -> Path | None:
    try:
        return data.find_data_dir()
    except DataError:
        return None


DATA = _data_dir()
needs_data = pytest.mark.skipif(
    DATA is None, reason="corpora not found: set ATTNLAB_DATA or put them in ../shared/data (see its README)"
)


def quiet(_: str) -> None:
    """`echo` for prepare and download that prints nothing."""


def raw_lines(path: Path) -> list[str]:
    return list(data.read_lines(path))


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory) -> Path:
    if DATA is None:
        pytest.skip("corpora not found: set ATTNLAB_DATA or put them in ../shared/data")
    out = tmp_path_factory.mktemp("multi30k")
    data.prepare("multi30k", out, data_dir=DATA, echo=quiet)  # the default 8000-piece vocabulary
    return out


# --- real corpora --------------------------------------------------------------------------------


@needs_data
def test_multi30k_has_the_official_split_sizes(multi30k):
    splits = data.ParallelData(multi30k, "train").meta["splits"]
    assert [splits[s]["pairs"] for s in ("train", "valid", "test2016", "test2017")] == [29000, 1014, 1000, 1000]
    assert all(s["dropped_empty"] == s["dropped_long"] == 0 for s in splits.values())
    assert len(data.ParallelData(multi30k, "test2016")) == 1000


@needs_data
def test_prepared_ids_and_text_match_the_corpus(multi30k):
    sp = data.load_tokenizer(multi30k)
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.get_piece_size()) == (0, 1, 2, 3, 8000)
    valid = data.ParallelData(multi30k, "valid")
    english, german = raw_lines(DATA / "multi30k/valid.en"), raw_lines(DATA / "multi30k/valid.de")
    assert valid.src_lens.sum() == valid.meta["splits"]["valid"]["src_tokens"]
    for i in (0, 1, 500, 1013):
        assert valid.src_text(i) == english[i].strip() and valid.tgt_text(i) == german[i].strip()
        assert sp.decode(valid.src(i).tolist()) == valid.src_text(i)
        assert valid.tgt(i).tolist() == sp.encode(german[i].strip())
        assert len(valid.src(i)) == valid.src_lens[i] and valid.src(i).dtype == np.uint16


@needs_data
def test_sentencepiece_round_trips_the_raw_dev_sets(multi30k, tmp_path):
    data.prepare("wmt14", tmp_path, data_dir=DATA, vocab_size=4000, echo=quiet)
    checks = [(multi30k, "multi30k/valid"), (tmp_path, "wmt14_en_de/newstest2013")]
    for prepared, stem in checks:
        sp = data.load_tokenizer(prepared / "spm.model")
        for lang in ("en", "de"):
            for line in raw_lines(DATA / f"{stem}.{lang}"):
                assert sp.decode(sp.encode(line.strip())) == line.strip()


@needs_data
def test_wmt14_uses_newstest2013_for_validation_and_the_full_newstest2014(tmp_path):
    meta = data.prepare("wmt14", tmp_path, data_dir=DATA, vocab_size=1000, echo=quiet)
    assert {name: s["pairs"] for name, s in meta["splits"].items()} == {
        "train": 10000,
        "valid": 3000,
        "newstest2014": 3003,
    }


@needs_data
def test_tatoeba_split_never_puts_an_english_sentence_in_two_splits(tmp_path):
    meta = data.prepare("tatoeba", tmp_path, data_dir=DATA, vocab_size=2000, echo=quiet)
    assert (meta["src_lang"], meta["tgt_lang"]) == ("de", "en")
    english = {
        split: set((tmp_path / f"{split}.tgt.txt").read_text(encoding="utf-8").splitlines())
        for split in ("train", "valid", "test")
    }
    assert not english["train"] & english["valid"]
    assert not english["train"] & english["test"]
    assert not english["valid"] & english["test"]
    assert sum(s["pairs"] for s in meta["splits"].values()) == 169813
    for heldout in ("valid", "test"):
        assert 1000 < meta["splits"][heldout]["pairs"] < 2500  # ~1% of the distinct English sentences each
    held_out = sorted(english["valid"])[:200]
    assert {data.tatoeba_side(sentence, seed=0) for sentence in held_out} == {"valid"}  # a function of the seed
    assert {data.tatoeba_side(sentence, seed=1) for sentence in held_out} >= {"train"}  # and another seed differs


@needs_data
def test_a_missing_corpus_says_how_to_get_it(tmp_path):
    with pytest.raises(DataError, match=r"multi30k/train\.en is missing; run `attnlab data download multi30k"):
        data.prepare("multi30k", tmp_path / "out", data_dir=tmp_path, echo=quiet)


# --- data directory -------------------------------------------------------------------------------


def test_data_dir_resolution_order(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path))
    assert data.find_data_dir() == tmp_path
    assert data.find_data_dir(tmp_path / "..") == tmp_path / ".."
    with pytest.raises(DataError, match=r"nope \(from --data-dir\) does not exist"):
        data.find_data_dir(tmp_path / "nope")
    (tmp_path / "a-file").write_text("x")  # said "does not exist" too
    with pytest.raises(DataError, match=r"a-file \(from --data-dir\) is a file, not a directory"):
        data.find_data_dir(tmp_path / "a-file")
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "nope"))
    with pytest.raises(DataError, match=r"from \$ATTNLAB_DATA"):
        data.find_data_dir()


def test_prepare_finds_what_download_saved_by_default(tmp_path, monkeypatch, capsys):
    """`data download` saves into ./data without --out or $ATTNLAB_DATA, and `data prepare` looked
    only in --data-dir, $ATTNLAB_DATA and ../shared/data: download, then prepare, read another
    copy or none. ./data comes after $ATTNLAB_DATA and before ../shared/data."""
    monkeypatch.delenv("ATTNLAB_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    fetched = []
    monkeypatch.setattr(download, "download", lambda corpus, out, url_base: fetched.append(fake_multi30k(Path(out))))
    assert cli.main(["data", "download", "multi30k"]) == 0 and fetched == [Path("data")]
    assert cli.main(["data", "prepare", "multi30k", "--out", "prepared", "--vocab-size", "300"]) == 0
    assert json.loads((tmp_path / "prepared" / "meta.json").read_text())["splits"]["train"]["pairs"] == 300
    assert "prepared multi30k en-de" in capsys.readouterr().out
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "elsewhere"))
    assert data.find_data_dir() == tmp_path / "elsewhere"


# --- bad input, on small files made here ------------------------------------------------------------


def fake_multi30k(root: Path, lines: dict[str, list[str]] | None = None) -> Path:
    """A tiny multi30k/ with made-up sentences; `lines` replaces the named files."""
    made_up = [f"sentence {i} has {i % 7} small words and {i % 5} more" for i in range(300)]
    files = {f"{split}.{lang}": made_up for split in ("train", "valid", "test2016") for lang in ("en", "de")}
    files.update(lines or {})
    (root / "multi30k").mkdir(parents=True)
    for name, content in files.items():
        (root / "multi30k" / name).write_text("".join(line + "\n" for line in content), encoding="utf-8")
    return root


def test_mismatched_line_counts_name_both_files(tmp_path):
    root = fake_multi30k(tmp_path / "data", {"valid.de": ["only", "two"]})
    with pytest.raises(DataError) as error:
        data.prepare("multi30k", tmp_path / "out", data_dir=root, vocab_size=300, echo=quiet)
    message = str(error.value)
    assert f"{root}/multi30k/valid.en has 300 lines" in message and f"{root}/multi30k/valid.de has 2" in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    root = fake_multi30k(tmp_path / "data")
    bad = root / "multi30k" / "train.de"
    lines = bad.read_bytes().split(b"\n")
    lines[41] = b"caf\xe9 au lait"  # Latin-1, not UTF-8
    bad.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=rf"{bad}:42: invalid UTF-8"):
        data.prepare("multi30k", tmp_path / "out", data_dir=root, vocab_size=300, echo=quiet)


def test_a_utf16_file_is_named_as_one(tmp_path: Path) -> None:
    """A file saved as Notepad's "Unicode" (UTF-16 with its byte-order mark) was "invalid UTF-8
    (invalid start byte at byte 0)" at line 1 in `data prepare`, and "'utf-8' codec can't decode
    byte 0xff in position 0" from `translate --input`: neither said what the file is."""
    from attnlab.data.corpora import read_text

    for encoding in ("utf-16", "utf-16-be"):
        path = tmp_path / f"{encoding}.en"
        path.write_bytes(("\ufeff" if encoding.endswith("be") else "").encode(encoding) + "a\nb\n".encode(encoding))
        for read in (raw_lines, read_text):
            with pytest.raises(DataError, match="UTF-16 text .*; save it as UTF-8") as error:
                read(path)
            assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_empty_and_overlong_pairs_are_dropped_and_counted(tmp_path):
    train_en = [f"sentence {i} has {i % 7} small words" for i in range(300)]
    train_de = list(train_en)
    train_en[3] = "   "  # whitespace only counts as empty
    train_de[10] = ""
    train_de[20] = " ".join(["long"] * 400)
    root = fake_multi30k(tmp_path / "data", {"train.en": train_en, "train.de": train_de})
    printed: list[str] = []
    meta = data.prepare("multi30k", tmp_path / "out", data_dir=root, vocab_size=300, max_len=100, echo=printed.append)
    train = meta["splits"]["train"]
    assert (train["pairs"], train["dropped_empty"], train["dropped_long"]) == (297, 2, 1)
    assert "dropped empty" in printed[0] and "297" in printed[0]
    prepared = data.ParallelData(tmp_path / "out", "train")
    assert len(prepared) == len(prepared.src_lens) == 297
    assert prepared.src_text(3) == train_en[4]  # later pairs move up, sides stay aligned
    assert prepared.tgt_text(3) == train_de[4]


def test_cli_prepares_and_reports_errors_in_one_line(tmp_path, capsys):
    root = fake_multi30k(tmp_path / "data")
    out = tmp_path / "out"
    assert (
        cli.main(["data", "prepare", "multi30k", "--out", str(out), "--data-dir", str(root), "--vocab-size", "300"])
        == 0
    )
    assert "prepared multi30k en-de" in capsys.readouterr().out
    assert (out / "spm.model").is_file() and (out / "train.src.bin").is_file()
    assert cli.main(["data", "prepare", "multi30k", "--out", str(out), "--data-dir", str(root), "--pair", "en-xx"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("attnlab data prepare: error: unsupported --pair 'en-xx'") and "\n" not in error
    # --seed -1 was a raw TypeError, --out naming a file a FileExistsError, --vocab-size 0 the default
    (tmp_path / "a-file").write_text("x")
    for bad, match in (
        (["--seed", "-1"], "--seed must be"),
        (["--out", str(tmp_path / "a-file")], "is a file"),
        (["--vocab-size", "0"], "error: --vocab-size must be at least 300 (256 byte pieces + specials), got 0"),
        (["--max-len", "0"], "error: --max-len must be positive, got 0"),  # (each alone: it named both)
    ):
        argv = ["data", "prepare", "multi30k", "--out", str(tmp_path / "new"), "--data-dir", str(root), *bad]
        assert cli.main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert match in error and "\n" not in error


def test_parallel_data_errors(tmp_path):
    with pytest.raises(DataError, match="not a prepared data directory"):
        data.ParallelData(tmp_path, "train")
    root = fake_multi30k(tmp_path / "data")
    data.prepare("multi30k", tmp_path / "out", data_dir=root, vocab_size=300, echo=quiet)
    with pytest.raises(DataError, match="no split 'test'; it has: train, valid, test2016"):
        data.ParallelData(tmp_path / "out", "test")


def test_a_damaged_or_foreign_meta_json_is_one_line(tmp_path: Path) -> None:
    """`attnlab train --data DIR` whose meta.json was cut, hand-edited or another tool's was a
    JSONDecodeError, TypeError, KeyError or numpy's "data type not understood" traceback."""
    root = fake_multi30k(tmp_path / "data")
    out = tmp_path / "out"
    meta = data.prepare("multi30k", out, data_dir=root, vocab_size=300, echo=quiet)
    for text, said in (
        ("{", "cannot read it as JSON"),
        ("[]", "has no pair count for each split"),
        ('{"splits": 3}', "has no pair count for each split"),
        ('{"splits": {"train": {}}}', "has no pair count for each split"),
        ('{"splits": {"train": {"pairs": true}}}', "has no pair count for each split"),
        ('{"splits": {"train": {"pairs": 10}}}', "dtype None is not uint16 or int32"),
        ('{"splits": {"train": {"pairs": 10}}, "dtype": "float99"}', "dtype 'float99' is not uint16 or int32"),
    ):
        (out / "meta.json").write_text(text)
        with pytest.raises(DataError, match=f"meta.json:? {said}") as error:
            data.ParallelData(out, "train")
        assert "\n" not in str(error.value) and "prepare the data again" in str(error.value)
    (out / "meta.json").write_bytes(b"\xff\xfe")
    with pytest.raises(DataError, match="cannot read it as JSON"):
        data.ParallelData(out, "train")
    (out / "meta.json").write_text(json.dumps(meta))
    assert len(data.ParallelData(out, "train")) == meta["splits"]["train"]["pairs"]
    # another preparation's vocabulary copied in: a run trained on its pieces paired with these ids
    data.prepare("multi30k", tmp_path / "other", data_dir=root, vocab_size=320, echo=quiet)
    shutil.copy(tmp_path / "other" / "spm.model", out / "spm.model")
    with pytest.raises(DataError, match=r"spm.model is not the vocabulary .*out's token ids were written with"):
        data.ParallelData(out, "train")
    (out / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "spm_sha256"}))
    assert len(data.ParallelData(out, "train")) == meta["splits"]["train"]["pairs"]  # (prepared before: not checked)


def test_prepare_is_deterministic_for_a_seed(tmp_path):
    root = fake_multi30k(tmp_path / "data")
    for out in ("a", "b"):
        data.prepare("multi30k", tmp_path / out, data_dir=root, vocab_size=300, seed=7, echo=quiet)
    for name in ("spm.model", "spm.vocab", "train.src.bin", "train.tgt.idx", "valid.tgt.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert b".tmp-" not in (tmp_path / "a" / "spm.model").read_bytes()  # (sentencepiece stored its temporary path)


def test_a_vocabulary_prepared_again_is_the_same_vocabulary(tmp_path, monkeypatch):
    """A model trained before sentencepiece's output went through memory stored the temporary
    directory it was written in, so the same corpus prepared again had other bytes, and a run
    refused to resume on it ("another vocabulary"): vocabularies are compared by their pieces."""
    import sentencepiece as spm

    from attnlab.data.tokenizer import same_vocabulary
    from attnlab.model.config import ModelConfig
    from attnlab.train.resume import check_same_model

    root = fake_multi30k(tmp_path / "data")
    data.prepare("multi30k", tmp_path / "new", data_dir=root, vocab_size=300, seed=7, echo=quiet)
    data.prepare("multi30k", tmp_path / "other", data_dir=root, vocab_size=320, seed=7, echo=quiet)
    train = spm.SentencePieceTrainer.train

    def on_disk(**settings: object) -> None:  # as `prepare` trained it before: to a prefix on the disk
        writer, prefix = settings.pop("model_writer"), tmp_path / "legacy.tmp-x" / "spm"
        prefix.parent.mkdir()
        train(model_prefix=str(prefix), **settings)
        writer.write(Path(f"{prefix}.model").read_bytes())

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", on_disk)
    data.prepare("multi30k", tmp_path / "legacy", data_dir=root, vocab_size=300, seed=7, echo=quiet)
    monkeypatch.undo()
    new, old = tmp_path / "new" / "spm.model", tmp_path / "legacy" / "spm.model"
    assert old.read_bytes() != new.read_bytes() and b"legacy.tmp-x" in old.read_bytes()
    assert same_vocabulary(old, new) and not same_vocabulary(tmp_path / "other" / "spm.model", new)
    checkpoint = tmp_path / "step_4"
    checkpoint.mkdir()
    shutil.copy(old, checkpoint / "spm.model")
    check_same_model(checkpoint, ModelConfig(), ModelConfig(), new)  # resumes
    with pytest.raises(CheckpointError, match="trained with another vocabulary"):
        check_same_model(checkpoint, ModelConfig(), ModelConfig(), tmp_path / "other" / "spm.model")


def test_wmt14_training_directory_pairs_files_by_stem(tmp_path):
    for name in ("europarl.en", "europarl.de", "news.en.gz", "news.de.gz", "orphan.en", "valid.en", "valid.de"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(b"x\n") if name.endswith(".gz") else b"x\n")
    found = data.parallel_files(tmp_path, "en", "de")
    assert [(a.name, b.name) for a, b in found] == [("europarl.en", "europarl.de"), ("news.en.gz", "news.de.gz")]
    assert list(data.read_lines(tmp_path / "news.en.gz")) == ["x"]


# --- download, served from a loopback mirror --------------------------------------------------------


@pytest.fixture
def mirror(tmp_path):
    """Serve a directory over http on 127.0.0.1; yields (directory, url)."""
    root = tmp_path / "mirror"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the signature is http.server's
        pass


@needs_data
def test_download_multi30k_from_a_mirror_verifies_and_lays_out_files(mirror, tmp_path):
    root, url = mirror
    for fetch in download.CORPORA["multi30k"]:  # the mirror holds the originals: gzipped files
        (local,) = fetch.outputs
        remote = root / fetch.path
        remote.parent.mkdir(parents=True, exist_ok=True)
        remote.write_bytes(gzip.compress((DATA / local).read_bytes(), compresslevel=1))
    out = tmp_path / "data"
    written = download.download("multi30k", out, url_base=url, echo=quiet)
    assert len(written) == 18
    for path in written:
        assert path.read_bytes() == (DATA / path.relative_to(out)).read_bytes()
    assert not list(out.rglob("*.part"))
    printed: list[str] = []
    download.download("multi30k", out, url_base=url, echo=printed.append)  # nothing left to fetch
    assert sum(line.startswith("  present") for line in printed) == 18

    os.remove(out / "multi30k/valid.de")
    (fetch,) = [f for f in download.CORPORA["multi30k"] if f.outputs == ("multi30k/valid.de",)]
    (root / fetch.path).write_bytes(gzip.compress(b"tampered\n"))
    with pytest.raises(DataError, match="multi30k/valid.de from .*val.de.gz: sha256 .* is not the expected"):
        download.download("multi30k", out, url_base=url, echo=quiet)
    assert not (out / "multi30k/valid.de").exists()


def test_download_reports_an_unreachable_source(mirror, tmp_path):
    _, url = mirror  # an empty mirror: every file is a 404
    with pytest.raises(DataError, match="could not fetch .*newstest2013.eng.*--url-base"):
        download.download("wmt14", tmp_path / "data", url_base=url, echo=quiet)
    with pytest.raises(DataError, match="could not fetch file:"):
        download.download("wmt14", tmp_path / "data", url_base=(tmp_path / "none").as_uri(), echo=quiet)


def test_download_from_a_file_url(tmp_path):
    root = tmp_path / "mirror"
    if DATA is None:
        pytest.skip("corpora not found")
    for fetch in download.CORPORA["wmt14"]:
        (local,) = fetch.outputs
        (root / fetch.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / local, root / fetch.path)
    written = download.download("wmt14", tmp_path / "data", url_base=root.as_uri(), echo=quiet)
    assert [p.read_bytes() == (DATA / p.relative_to(tmp_path / "data")).read_bytes() for p in written] == [True] * 8


def test_a_mirror_that_is_not_a_url_is_one_line(tmp_path: Path) -> None:
    """`--url-base /srv/mirror` (a path, not file:///srv/mirror) was urllib's ValueError
    traceback, "unknown url type"; now one line, naming the URL of a directory that exists."""
    for given, hint in ((str(tmp_path), tmp_path.as_uri()), ("mirror.example.org", None)):
        with pytest.raises(DataError, match="a mirror is a URL starting http://, https:// or file://") as error:
            download.download("wmt14", tmp_path / "data", url_base=given, echo=quiet)
        assert "\n" not in str(error.value) and (hint is None or hint in str(error.value))
    assert not (tmp_path / "data").exists()


@needs_data
def test_a_data_directory_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """`--out FILE` fetched the first file, then failed in mkdir with a NotADirectoryError
    traceback; now a file where a directory belongs (--out or one below it) is refused before
    fetching, and a file that cannot be written is one line naming it, leaving no .part behind."""
    root = tmp_path / "mirror"
    for fetch in download.CORPORA["wmt14"]:
        (local,) = fetch.outputs
        (root / fetch.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / local, root / fetch.path)
    (tmp_path / "file").touch()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "wmt14_en_de").touch()
    (tmp_path / "dir" / "wmt14_en_de" / "newstest2013.en").mkdir(parents=True)  # a directory where a file belongs
    for out, match in (
        ("file", "file is a file where a directory belongs"),
        ("file/data", "cannot create .*file/data: Not a directory"),
        ("sub", "wmt14_en_de is a file where a directory belongs"),
        ("dir", "cannot write .*newstest2013.en: Is a directory"),
    ):
        with pytest.raises(DataError, match=match) as error:
            download.download("wmt14", tmp_path / out, url_base=root.as_uri(), echo=quiet)
        assert "\n" not in str(error.value)
    assert not list(tmp_path.rglob("*.part"))


def test_a_gzipped_file_without_the_gz_suffix_is_read_as_text(tmp_path: Path) -> None:
    """A `train.en` saved gzipped under its plain name was read as a line or two of binary:
    "train.en has 1 lines but train.de has 300; the files must be aligned", not what was wrong."""
    lines = [f"sentence {i} of the corpus" for i in range(300)]
    (tmp_path / "train.en").write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    (tmp_path / "train.de").write_text("".join(f"Satz {i}\n" for i in range(300)))
    assert data.count_lines(tmp_path / "train.en") == 300 and raw_lines(tmp_path / "train.en") == lines
    assert data.check_parallel(tmp_path / "train.en", tmp_path / "train.de") == 300
    assert next(data.read_pairs(tmp_path / "train.en", tmp_path / "train.de")) == ("sentence 0 of the corpus", "Satz 0")


def test_lines_end_at_newlines_only_and_a_damaged_gzip_is_named(tmp_path: Path) -> None:
    from attnlab.data.corpora import count_lines, read_lines, read_text, text_lines

    text = "\ufeffa\x0cb\r\nc\u2028d\re\x85f\n\n"
    assert text_lines(text) == ["a\x0cb", "c\u2028d\re\x85f", ""]  # splitlines() gives 6 lines
    plain = tmp_path / "lines.txt"
    plain.write_bytes(text.encode())
    assert read_text(plain) == list(read_lines(plain)) == text_lines(text) and count_lines(plain) == 3
    whole = gzip.compress(("one line\n" * 5000).encode())
    for name, content in (("cut.gz", whole[: len(whole) // 2]), ("text.gz", b"not gzip at all\n")):
        (tmp_path / name).write_bytes(content)
        for read in (count_lines, lambda path: list(read_lines(path))):
            with pytest.raises(DataError, match=f"{name}: a damaged or incomplete gzip file") as error:
                read(tmp_path / name)
            assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("served", "said"),
    [
        (b"<html>Not Found</html>", "incorrect header check"),  # an error page served with status 200
        (gzip.compress(b"two dogs\n" * 4000)[:-6], "cut short"),  # (its CRC and length gone)
    ],
)
def test_a_damaged_download_is_one_line(mirror, tmp_path, served, said):
    """A file that does not unpack was gzip's traceback (BadGzipFile, EOFError): Multi30k's files
    have no sha256 of their own to refuse them first."""
    root, url = mirror
    fetch = download.CORPORA["multi30k"][0]
    (root / fetch.path).parent.mkdir(parents=True, exist_ok=True)
    (root / fetch.path).write_bytes(served)
    with pytest.raises(DataError, match=rf"^{url}/{fetch.path}: cannot unpack it \(.*{said}.*\); corrupt") as error:
        download.download("multi30k", tmp_path / "data", url_base=url, echo=quiet)
    assert "\n" not in str(error.value) and not list((tmp_path / "data").rglob("*.*"))


def test_a_gzip_bomb_is_refused_before_it_is_unpacked_whole(monkeypatch):
    monkeypatch.setattr(download, "MAX_UNPACKED", 1000)
    assert download._gunzip(gzip.compress(b"x" * 1000)) == [b"x" * 1000]
    assert download._gunzip(gzip.compress(b"x" * 400) + gzip.compress(b"y" * 600)) == [b"x" * 400 + b"y" * 600]
    with pytest.raises(DataError, match="unpacks to more than"):
        download._gunzip(gzip.compress(b"x" * 1001))
