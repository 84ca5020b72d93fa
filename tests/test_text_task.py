"""Another task than translation, end to end: `attnlab data prepare text` on any parallel files
(here a synthetic "headline" task: the headline is the article's first three words), training,
`attnlab evaluate --metric rouge`, and the explorer on the result."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import attnlab
from attnlab.app.explorer import app
from attnlab.cli import main
from attnlab.decode.evaluate import rouge
from attnlab.errors import DataError

WORDS = "storm city council river bridge school team vote fire market train road park music festival".split()


def write_task(directory: Path, name: str, count: int, seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    articles = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) for _ in range(count)]
    src, tgt = directory / f"{name}.article", directory / f"{name}.headline"
    src.write_text("".join(a + "\n" for a in articles))
    tgt.write_text("".join(" ".join(a.split()[:3]) + "\n" for a in articles))
    return str(src), str(tgt)


def test_rouge_against_hand_computed_scores() -> None:
    # 1: 5 of 6 unigrams shared both ways, bigrams 3 of 5, LCS 5 -> R1 .833, R2 .6, RL .833
    # 2: stemmed "runs"/"running" -> run: P 3/3, R 3/4 -> F 6/7; bigrams "a dog" of 2 and 3 -> F .4
    scores = rouge(["the cat sat on the mat", "a dog runs"], ["the cat is on the mat", "a dog is running"])
    assert scores["rouge1"] == pytest.approx(100 * (5 / 6 + 6 / 7) / 2)
    assert scores["rouge2"] == pytest.approx(100 * (0.6 + 0.4) / 2)
    assert scores["rougeL"] == pytest.approx(100 * (5 / 6 + 6 / 7) / 2)
    assert rouge(["x"], ["y"]) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}


def test_rouge_reads_every_script(data_dir: Path) -> None:
    """rouge-score's default tokenizer keeps [a-z0-9] only: three German words that differ in an
    umlaut scored 100, and equal Russian lines 0. English tokens stay its own (stemmed)."""
    from rouge_score.tokenizers import DefaultTokenizer

    from attnlab.decode.evaluate import _Tokens

    german = rouge(["Ein Mädchen läuft über die Straße."], ["Ein Mödchen lüuft öber die Straße."])
    assert german["rouge1"] == pytest.approx(50.0)  # ein, die, straße of six words
    assert rouge(["Привет мир"], ["Привет мир"])["rouge1"] == 100.0
    assert rouge(["Привет мир"], ["Пока мир"])["rouge1"] == pytest.approx(50.0)
    assert rouge(["我们是学生"], ["我们是老师"])["rouge1"] == pytest.approx(60.0)  # by character
    english = [line for line in (data_dir / "multi30k" / "test2016.en").read_text().splitlines() if line.isascii()]
    assert len(english) > 900
    assert [_Tokens().tokenize(line) for line in english] == [DefaultTokenizer(True).tokenize(line) for line in english]


def test_prepare_train_evaluate_explore_a_headline_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {
        name: write_task(tmp_path, name, count, seed)
        for name, count, seed in [("train", 3000, 0), ("valid", 50, 1), ("test", 60, 2)]
    }
    prepared = tmp_path / "prepared"
    argv = ["data", "prepare", "text", "--out", str(prepared), "--vocab-size", "300"]
    for name, (src, tgt) in files.items():
        argv += [f"--{name}", src, tgt]
    assert main(argv) == 0
    meta = json.loads((prepared / "meta.json").read_text())
    assert meta["corpus"] == "text" and meta["splits"]["test"]["pairs"] == 60 and meta["task"] == "translate"
    run = tmp_path / "run"
    train = ["train", "--preset", "tiny", "--data", str(prepared), "--out", str(run), "--max-steps", "300"]
    train += ["--max-tokens", "1500", "--warmup", "100", "--lr-scale", "1", "--save-every", "300"]
    train += ["--eval-sentences", "0", "--probes", "1", "p_drop=0.0"]
    assert main(train) == 0
    capsys.readouterr()
    checkpoint = run / "checkpoints" / "step_300"
    src, ref = files["test"]
    assert (
        main(["evaluate", "--checkpoint", str(checkpoint), "--src", src, "--ref", ref, "--metric", "rouge", "--json"])
        == 0
    )
    learned = json.loads(capsys.readouterr().out)
    copied = rouge(
        Path(src).read_text().splitlines(), Path(ref).read_text().splitlines()
    )  # the article as its headline
    # 300 tiny updates learn to write a short headline from the article's words (ROUGE-1 ~66)
    assert learned["rouge1"] > 60 and learned["rouge1"] > copied["rouge1"] + 10, (learned, copied)
    explorer = app(["--checkpoint", str(checkpoint)])
    explorer.text_input.value = explorer.text_input.value_input = "river bridge storm city vote fire"
    explorer.translate()
    assert explorer.store.trace.kinds == ["encoder", "decoder", "cross"] and not explorer.error.visible
    headline = attnlab.load(checkpoint).translate("river bridge storm city vote fire").text
    assert 0 < len(headline.split()) <= 4 and set(headline.split()) <= set(WORDS)


def test_a_text_corpus_needs_train_and_valid(tmp_path: Path) -> None:
    from attnlab.data.prepared import prepare

    src, tgt = write_task(tmp_path, "train", 10, 0)
    with pytest.raises(DataError, match="needs --valid SRC TGT"):
        prepare("text", tmp_path / "out", text_files={"train": (src, tgt)}, echo=lambda _: None)
    with pytest.raises(DataError, match="is not a file"):
        prepare("text", tmp_path / "out", text_files={"train": (src, tgt), "valid": (src, "nope")}, echo=lambda _: None)


def test_preparing_into_the_directory_of_its_own_inputs_is_refused(tmp_path: Path) -> None:
    """Re-preparing from a prepared directory's own .txt files truncated them to nothing (and
    reported "train 0 pairs", exit 0): refused before anything is written."""
    from attnlab.data.prepared import prepare

    out = tmp_path / "prepared"
    files = {
        name: write_task(tmp_path, name, count, seed) for name, count, seed in [("train", 300, 0), ("valid", 20, 1)]
    }
    prepare("text", out, text_files=files, vocab_size=300, echo=lambda _: None)
    own = {name: (str(out / f"{name}.src.txt"), str(out / f"{name}.tgt.txt")) for name in ("train", "valid")}
    before = {path: Path(path).read_bytes() for pair in own.values() for path in pair}
    argv = ["data", "prepare", "text", "--out", str(out), "--vocab-size", "300"]
    argv += ["--train", *own["train"], "--valid", *own["valid"]]
    assert main(argv) == 2
    assert {path: Path(path).read_bytes() for path in before} == before
    assert (out / "meta.json").is_file()  # the earlier preparation is still whole
    link = tmp_path / "linked.src"  # another name for an output is caught as well
    link.symlink_to(out / "valid.src.txt")
    with pytest.raises(DataError, match=r"writing valid\.src\.txt would overwrite the input .*linked\.src"):
        prepare("text", out, text_files={**files, "valid": (str(link), own["valid"][1])}, echo=lambda _: None)


def test_an_empty_train_or_valid_split_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Empty or whitespace-only files gave a split of 0 pairs and exit 0; now one line naming them."""
    train = write_task(tmp_path, "train", 300, 0)
    blank_src, blank_tgt = tmp_path / "blank.src", tmp_path / "blank.tgt"
    blank_src.write_text(" \n\n")
    blank_tgt.write_text("\n\t\n")
    for split in ("train", "valid"):
        argv = ["data", "prepare", "text", "--out", str(tmp_path / split), "--vocab-size", "300"]
        argv += ["--train", *train, "--valid", *train, f"--{split}", str(blank_src), str(blank_tgt)]
        assert main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert f"the {split} split has no sentence pair" in error and str(blank_src) in error and "\n" not in error
    from attnlab.data.prepared import prepare

    with pytest.raises(DataError, match="no training pair has both sides within --max-len 1"):
        prepare(
            "text",
            tmp_path / "long",
            text_files={"train": train, "valid": train},
            vocab_size=300,
            max_len=1,
            echo=lambda _: None,
        )
