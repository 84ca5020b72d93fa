"""Tatoeba en-es and en-zh on the real shared corpora: the hashed held-out split, the Chinese side
in one script, a vocabulary that cuts Chinese into whole characters and words and decodes it back
without spaces, and BLEU tokenized for the target language (`tok:zh`)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import attnlab
from attnlab import cli, data
from attnlab.data import download
from attnlab.data.tatoeba import FOLDERS, HELDOUT, chinese_share, english_key, tatoeba_splits
from attnlab.decode import evaluate
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer
from attnlab.train import dev

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
SPACE_IN_CHINESE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]\s+[\u3400-\u4dbf\u4e00-\u9fff]")
# Characters written differently in traditional script, and their simplified forms
TRADITIONAL, SIMPLIFIED = "們這說湯還個問題點來會", "们这说汤还个问题点来会"
ACCENTED = set("áéíóúñü¿¡ÁÉÍÓÚÑ")


def quiet(_: str) -> None:
    """`echo` for prepare that prints nothing."""


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def zh(data_dir, tmp_path_factory) -> Path:
    """en-zh prepared as the recipe does (the whole corpus: 32k pairs, a few seconds)."""
    out = tmp_path_factory.mktemp("tatoeba-en-zh")
    data.prepare("tatoeba", out, data_dir=data_dir, pair="en-zh", vocab_size=6000, echo=quiet)
    return out


@pytest.fixture(scope="module")
def es(data_dir, tmp_path_factory) -> Path:
    """en-es on the first 20,000 pairs of each split (train: the shortest; valid/test: all)."""
    out = tmp_path_factory.mktemp("tatoeba-en-es")
    data.prepare("tatoeba", out, data_dir=data_dir, pair="en-es", vocab_size=3000, limit=20000, echo=quiet)
    return out


# --- the split ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", ["en-es", "en-zh"])
def test_the_split_is_a_seeded_hash_of_the_english_sentence_and_never_shares_one(data_dir, pair):
    lang = pair[3:]
    splits, info = tatoeba_splits(data_dir, pair, seed=0)
    again, _ = tatoeba_splits(data_dir, pair, seed=0)
    parts = {s.name: list(s.pairs()) for s in splits}
    assert parts == {s.name: list(s.pairs()) for s in again}  # deterministic
    keys = {name: {english_key(en) for en, _ in pairs} for name, pairs in parts.items()}
    assert not keys["train"] & keys["valid"] and not keys["train"] & keys["test"] and not keys["valid"] & keys["test"]
    target = {"es": 2000, "zh": 1000}[lang]
    for name in ("valid", "test"):
        assert abs(len(parts[name]) - target) < 0.1 * target, (name, len(parts[name]))
        assert info["split"]["pairs"][name] == len(parts[name])
    assert sum(map(len, parts.values())) + info["duplicate_pairs_dropped"] == info["source_pairs"]
    # a function of the sentence, not of its place: the files are sorted by English length, and
    # the held-out pairs come from all over them (not the first or last lines)
    english = lines(data_dir / FOLDERS[lang] / "train.en")
    where = [i for i, en in enumerate(english) if data.tatoeba_side(en, 0, HELDOUT[lang]) == "valid"]
    assert {english_key(english[i]) for i in where} == keys["valid"]
    assert where[0] < 0.05 * len(english) and where[-1] > 0.95 * len(english)
    assert data.tatoeba_side("Go.", 0, 0.5) == data.tatoeba_side("  GO! ", 0, 0.5)  # one key for both


def test_the_split_does_not_depend_on_pythons_string_hash(data_dir):
    """The same sides in a process with another PYTHONHASHSEED (`hash()` would differ)."""
    english = lines(data_dir / "tatoeba_cmn_eng" / "train.en")[::997]
    here = [data.tatoeba_side(en, 3, 0.3) for en in english]
    code = (
        "import sys; from attnlab.data.tatoeba import tatoeba_side; "
        "print(' '.join(tatoeba_side(l, 3, 0.3) for l in sys.stdin.read().splitlines()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], input="\n".join(english), capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.split() == here and len(set(here)) == 3


def test_meta_records_the_rule_the_counts_and_the_script(zh, es):
    meta = data.ParallelData(zh, "train").meta
    rule = meta["tatoeba"]["split"]
    assert "blake2b" in rule["rule"] and rule["heldout_fraction"] == HELDOUT["zh"] and rule["seed"] == 0
    assert rule["pairs"] == {name: s["pairs"] for name, s in meta["splits"].items()}  # nothing dropped
    assert set(rule["distinct_english"]) == {"train", "valid", "test"}
    assert meta["tatoeba"]["script"]["conversion"].startswith("OpenCC t2s")
    assert meta["tatoeba"]["script"]["lines_changed"] > 10000
    assert meta["spm"]["character_coverage"] == 1.0 and meta["spm"]["add_dummy_prefix"] is False
    es_meta = data.ParallelData(es, "train").meta
    assert es_meta["limit"] == 20000 and es_meta["splits"]["train"]["pairs"] == 20000
    assert es_meta["tatoeba"]["split"]["pairs"]["train"] > 100000  # before the limit
    assert "script" not in es_meta["tatoeba"] and es_meta["spm"]["add_dummy_prefix"] is True


# --- Chinese in one script --------------------------------------------------------------------------


def test_the_chinese_side_is_converted_to_simplified_for_training_and_references(zh, data_dir):
    raw = (data_dir / "tatoeba_cmn_eng" / "train.zh").read_text(encoding="utf-8")
    assert sum(raw.count(c) for c in TRADITIONAL) > 5000  # the corpus mixes both scripts
    assert data.to_simplified([TRADITIONAL + "\u200b", SIMPLIFIED]) == [SIMPLIFIED, SIMPLIFIED]
    for split in ("train", "valid", "test"):
        text = (zh / f"{split}.tgt.txt").read_text(encoding="utf-8")
        assert not set(TRADITIONAL) & set(text), split
        assert "\u200b" not in text


def test_pairs_that_conversion_makes_identical_are_kept_once(zh):
    train = data.ParallelData(zh, "train")
    pairs = [(train.src_text(i), train.tgt_text(i)) for i in range(len(train))]
    assert len(set(pairs)) == len(pairs)
    assert train.meta["tatoeba"]["duplicate_pairs_dropped"] > 0


# --- the vocabulary -----------------------------------------------------------------------------------


def test_sentencepiece_round_trips_chinese_and_spanish(zh, es):
    sp = data.load_tokenizer(zh)
    for split in ("train", "valid", "test"):
        for line in lines(zh / f"{split}.tgt.txt") + lines(zh / f"{split}.src.txt"):
            assert sp.decode(sp.encode(line)) == line
    sp = data.load_tokenizer(es)
    accented = 0
    for split in ("valid", "test"):
        for line in lines(es / f"{split}.tgt.txt"):
            assert sp.decode(sp.encode(line)) == line
            accented += bool(ACCENTED & set(line))
    assert accented > 1000


def test_chinese_pieces_are_whole_characters_or_words(zh):
    sp = data.load_tokenizer(zh)
    train = lines(zh / "train.tgt.txt")
    seen = set("".join(train))
    for line in train:
        ids = sp.encode(line)
        assert not any(sp.is_byte(i) or i == sp.unk_id() for i in ids), line  # character_coverage 1.0
    for line in lines(zh / "test.tgt.txt"):  # bytes only for characters training never saw
        spelled = [sp.id_to_piece(i) for i in sp.encode(line) if sp.is_byte(i)]
        assert not spelled or set(line) - seen
    inventory = chinese_share([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    assert inventory == data.ParallelData(zh, "train").meta["chinese_pieces"]
    assert 2500 < inventory["pieces"] * inventory["single_characters"] < 3000  # every character of train
    assert inventory["single_characters"] > 0.6  # and the rest are words, e.g. 什么


def test_decoding_puts_no_space_between_chinese_characters(zh):
    """Not only for a round trip: no Chinese piece carries the word-boundary mark, so no sequence
    a model writes can come out with a space between two characters."""
    sp = data.load_tokenizer(zh)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert not [p for p in pieces if p.startswith("\u2581") and HAN.search(p)]
    checked = 0
    for line in lines(zh / "valid.tgt.txt"):
        ids = sp.encode(line)
        assert sp.id_to_piece(ids[0])[0] != "\u2581" or not HAN.match(line)  # no dummy prefix
        if not SPACE_IN_CHINESE.search(line):
            for text in (sp.decode(ids), sp.decode(ids[::-1]), sp.decode(ids[1:] + ids[:1])):
                assert not SPACE_IN_CHINESE.search(text), text
            checked += 1
    assert checked > 900


# --- BLEU for a Chinese target --------------------------------------------------------------------------


def test_bleu_on_a_chinese_target_uses_the_zh_tokenizer():
    assert evaluate.bleu_tokenize("zh") == "zh" and evaluate.bleu_tokenize("es") == "13a"
    assert evaluate.bleu_tokenize(None) == "13a"
    refs, hyps = ["我们明天去公园散步。"], ["我们明天去公园跑步。"]  # one character differs
    zh_score = evaluate.bleu_chrf(hyps, refs, "zh")
    assert "tok:zh" in zh_score["bleu_signature"] and zh_score["bleu"] > 40
    assert evaluate.bleu_chrf(hyps, refs, "13a")["bleu"] == 0  # 13a sees one word per sentence
    assert evaluate.bleu_chrf(hyps, refs)["bleu"] == zh_score["bleu"]  # (told nothing: the references are Chinese)


@pytest.fixture(scope="module")
def zh_checkpoint(zh, tmp_path_factory) -> Path:
    """An untrained tiny model on the en-zh vocabulary, saved as a checkpoint with its data meta."""
    torch.manual_seed(0)
    model = Transformer(preset("tiny", vocab_size=6000, max_len=128))
    meta = data.ParallelData(zh, "train").meta
    out = tmp_path_factory.mktemp("zh-checkpoint") / "ckpt"
    return save_checkpoint(out, model, zh / "spm.model", meta={"task": "translate", "data": meta})


def test_output_has_no_space_between_chinese_characters_even_from_the_lone_boundary_piece(zh, zh_checkpoint):
    """The vocabulary keeps a lone "▁" (a few training lines hold spaces); a model that writes it
    between two characters must still print them together. Spaces beside Latin words stay."""
    assert data.join_unspaced("我 喜欢 Tom 。 你 呢 ？") == "我喜欢 Tom 。你呢？"
    model = attnlab.load(zh_checkpoint)
    ids = [model.target_tokenizer.piece_to_id(p) for p in ("我", "\u2581", "喜欢", "\u2581", "猫")]
    assert model.target_tokenizer.decode(ids) == "我 喜欢 猫"  # what sentencepiece alone gives
    assert model.detokenize([*ids, model.config.eos_id], "I like cats.") == "我喜欢猫"


def test_evaluate_picks_tok_zh_from_the_checkpoint_and_tokenize_overrides(zh, zh_checkpoint, tmp_path, capsys):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(line + "\n" for line in lines(zh / "valid.src.txt")[:3]), encoding="utf-8")
    ref.write_text("".join(line + "\n" for line in lines(zh / "valid.tgt.txt")[:3]), encoding="utf-8")
    base = ["evaluate", "--checkpoint", str(zh_checkpoint), "--ref", str(ref)]
    assert cli.main([*base, "--src", str(src), "--beam", "1"]) == 0  # decodes with the model
    assert "|tok:zh|" in capsys.readouterr().out
    assert cli.main([*base, "--hyp", str(ref)]) == 0  # scores given outputs, reading only the meta
    out = capsys.readouterr().out
    assert "BLEU = 100.00" in out and "|tok:zh|" in out and "chrF2 = 100.00" in out
    assert cli.main([*base, "--hyp", str(ref), "--tokenize", "13a"]) == 0
    assert "|tok:13a|" in capsys.readouterr().out


def test_dev_bleu_during_training_uses_tok_zh(zh, zh_checkpoint, monkeypatch, tmp_path):
    used = []

    def spy(hypotheses, references, tokenize="13a"):
        used.append(tokenize)
        return {"bleu": 0.0}

    monkeypatch.setattr(dev, "bleu_chrf", spy)
    model = Transformer(preset("tiny", vocab_size=6000, max_len=128))
    report = dev.dev_report(
        model, str(zh), zh_checkpoint, tmp_path, 1, SimpleNamespace(eval_sentences=3, probes=0, align_gold="")
    )
    assert used == ["zh"] and "dev_bleu" in report


# --- the command and the download ------------------------------------------------------------------------


def test_the_command_prepares_a_pair_and_refuses_an_unknown_one(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["data", "prepare", "tatoeba", "--pair", "en-zh", "--vocab-size", "3500", "--limit", "3000"]
    assert cli.main([*argv, "--out", str(out), "--data-dir", str(data_dir)]) == 0
    printed = capsys.readouterr().out
    assert "prepared tatoeba en-zh" in printed and "OpenCC t2s" in printed and "pieces hold Chinese" in printed
    assert "seeded hash of the normalised English side" in printed
    bad = ["data", "prepare", "tatoeba", "--pair", "en-fr", "--out", str(out), "--data-dir", str(data_dir)]
    assert cli.main(bad) == 2
    assert "choose one of: en-de, de-en, en-es, es-en, en-zh, zh-en" in capsys.readouterr().err


def test_download_unpacks_the_three_column_chinese_file(data_dir, tmp_path, monkeypatch):
    """cmn.txt is English<TAB>Chinese<TAB>attribution: the third column is dropped. (The zip is
    rebuilt here from the shared copy, so its own checksum is not the pinned one.)"""
    (fetch,) = [f for f in download.CORPORA["tatoeba"] if "cmn" in f.path]
    folder = data_dir / "tatoeba_cmn_eng"
    rows = zip(lines(folder / "train.en"), lines(folder / "train.zh"), strict=True)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("cmn.txt", "".join(f"{en}\t{zh}\tCC-BY 2.0 (France)\n" for en, zh in rows))
        z.writestr("_about.txt", (folder / "MANYTHINGS_ABOUT.txt").read_bytes())
    mirror = tmp_path / "mirror" / fetch.path
    mirror.parent.mkdir(parents=True)
    mirror.write_bytes(archive.getvalue())
    monkeypatch.setitem(download.CORPORA, "tatoeba", [dataclasses.replace(fetch, sha256=None)])
    written = download.download("tatoeba", tmp_path / "data", url_base=(tmp_path / "mirror").as_uri(), echo=quiet)
    assert [p.read_bytes() == (folder / p.name).read_bytes() for p in written] == [True] * 3
