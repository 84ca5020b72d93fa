"""The decoding commands (`translate`, `parse`, `align`, `evaluate`, `heads profile`) decode with
the model's own task's search settings, never write over their own inputs, read the shared zh-en
gold with an en→zh model, check where `--save-best` writes before scoring, and refuse options
that would be silently ignored: each refusal one line, before any decoding."""

from __future__ import annotations

import argparse
import json
import logging
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnlab.cli import COMMANDS, main
from attnlab.decode import evaluate, search
from attnlab.decode.aer import aer
from attnlab.decode.alignment import align_lines
from attnlab.decode.api import DEFAULTS
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import read_pharaoh
from attnlab.decode.profile import read_profile
from attnlab.decode.readings import reading
from attnlab.errors import ArgumentParser, CheckpointError
from attnlab.model.checkpoint import read_config, verify

ROOT = Path(__file__).resolve().parents[1]
TRANSLATOR, PARSER, CHINESE = (
    ROOT / "checkpoints" / name for name in ("multi30k-en-de", "wsj-parser", "tatoeba-en-zh")
)
SOURCES = ["A dog runs in the park .", "Two men are working on a roof ."]  # made up, tokenized as the parser reads
REFERENCES = ["Ein Hund rennt im Park .", "Zwei Männer arbeiten auf einem Dach ."]


def bundled(path: Path) -> Path:
    if not (path / "manifest.json").is_file():
        pytest.skip(f"the bundled {path.relative_to(ROOT)} is not here")
    return path


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one-line refusal of `attnlab ARGV` (status 2, no traceback)."""
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    named = (f"attnlab {argv[0]}", f"attnlab {' '.join(argv[:2])}")  # a nested command whole: `attnlab heads patch`
    assert error.split(": error: ")[0] in named and "\n" not in error, error
    return error.split(": error: ", 1)[1]


# -- 1. the model's task's search settings ------------------------------------------------------------
def test_translate_refuses_a_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`translate` decoded a parser with translation's beam 4, α 0.6, input + 50: F1 65.4 instead
    of 73.1 on 30 WSJ sentences, without a word. `parse` already refused a translator."""
    source = write(tmp_path / "words.txt", SOURCES[:1])
    argv = ["--checkpoint", str(bundled(PARSER)), "--input", str(source)]
    assert refused(capsys, ["translate", *argv]) == f"{PARSER} is a parse model: use attnlab parse"
    assert main(["parse", *argv, "--beam", "2"]) == 0  # the command it names takes it
    assert capsys.readouterr().out.startswith("(")


@pytest.mark.parametrize("task", ["translate", "parse"])
def test_bad_search_settings_are_refused_whatever_the_input(
    task: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They were checked with the first sentence decoded: an empty input took `--alpha -1` and
    said "0 of 0 lines", exit 0."""
    checkpoint = bundled(PARSER if task == "parse" else TRANSLATOR)
    for lines in ([], [""]):
        argv = [task, "--checkpoint", str(checkpoint), "-i", str(write(tmp_path / "in.txt", lines)), "--alpha=-1"]
        assert refused(capsys, argv).startswith("alpha (the length penalty's exponent) must be a number from 0 to 10")


def test_profile_of_a_parser_searches_as_the_parser_does(tmp_path: Path) -> None:
    """`heads profile` hard-wired translation's beam 4 and α 0.6, decoded a parser with them and
    wrote them into the profile's metadata; explicit flags still win."""
    source = write(tmp_path / "words.txt", SOURCES[:1])
    run = ["heads", "profile", "--checkpoint", str(bundled(PARSER)), "--src", str(source), "--quiet"]
    assert main([*run, "--out", str(tmp_path / "parse.parquet")]) == 0
    found = read_profile(tmp_path / "parse.parquet")
    assert (
        (found.meta["beam"], found.meta["alpha"])
        == (DEFAULTS["parse"]["beam"], DEFAULTS["parse"]["alpha"])
        == (21, 0.3)
    )
    parsed = load(PARSER).translate(SOURCES[0])  # §6.3's settings, the API's default for a parser
    assert found.table.column("output")[0].as_py() == parsed.text
    assert main([*run, "--out", str(tmp_path / "beam2.parquet"), "--beam", "2"]) == 0
    explicit = read_profile(tmp_path / "beam2.parquet").meta
    assert (explicit["beam"], explicit["alpha"]) == (2, 0.3)


@pytest.mark.parametrize("command", [["translate"], ["parse"], ["evaluate"], ["heads", "profile"]])
def test_help_says_the_defaults_are_the_models_tasks(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "beam size (default: the model's task's: 4 for translation, §6.1; 21 for parsing, §6.3)" in text
    assert "(default: the model's task's: 0.6 for translation, §6.1; 0.3 for parsing, §6.3)" in text
    assert "default fp32" in text
    if command[0] in ("translate", "parse"):
        assert "b = 50 for translation, §6.1; 300 for parsing, §6.3" in text and "default a = 1" in text
    if command[0] == "heads":
        assert "(default 64)" in text and "--reverse-gold" in text


def test_the_overview_names_every_heads_action(capsys: pytest.CaptureFixture[str]) -> None:
    """`attnlab --help` lists what `attnlab heads` does; an action added there and not here (as
    `patch` once was) is one a user reading the overview never finds."""
    with pytest.raises(SystemExit):
        main(["heads", "--help"])
    actions = capsys.readouterr().out.split("{", 1)[1].split("}", 1)[0].split(",")
    main(["--help"])
    overview = next(line for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["heads"])
    assert actions and overview.endswith(f"(heads {'|'.join(actions)})")


def test_every_option_of_every_command_says_what_it_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """`attnlab COMMAND --help` describes every option and argument: `train --help` listed
    --warmup, --dtype, --compile and 13 more with no word on what they do or their defaults, and
    every decoding command's --checkpoint, `flops`' four options, `heads query`'s two arguments
    were bare too. Each command's parser is caught as the command parses (subcommands with it)."""

    class Parsed(Exception):
        """Raised in place of parsing: the parser is all this test needs."""

    parsers: dict[str, argparse.ArgumentParser] = {}

    def catch(parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        parsers[parser.prog] = parser
        raise Parsed

    monkeypatch.setattr(ArgumentParser, "parse_args", catch)
    monkeypatch.setattr(ArgumentParser, "parse_known_args", catch)
    for command in COMMANDS:
        with pytest.raises(Parsed):
            main([command])
    bare, seen = [], 0
    while parsers:
        prog, parser = parsers.popitem()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.update((sub.prog, sub) for sub in action.choices.values())
            elif not isinstance(action, argparse._HelpAction):
                seen += 1
                if not action.help or action.help == argparse.SUPPRESS:
                    bare.append(f"{prog} {'/'.join(action.option_strings) or action.dest}")
    assert seen > 150, seen  # every command's options, the subcommands' among them
    assert bare == []


# -- 2. --out is never one of the inputs --------------------------------------------------------------
def test_out_that_is_an_input_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaluate --src s.en --out s.en` replaced the sources with the translations and exited 0;
    so did `align --input p --out p` and `heads profile --src s --out s`. The checkpoint here does
    not exist: the refusal comes before it is read."""
    src, ref = write(tmp_path / "s.en", SOURCES), write(tmp_path / "s.de", REFERENCES)
    pairs = write(tmp_path / "p.txt", [f"{s} ||| {r}" for s, r in zip(SOURCES, REFERENCES, strict=True)])
    (tmp_path / "link.en").symlink_to(src)
    (tmp_path / "hard.de").hardlink_to(ref)
    (tmp_path / "sub").mkdir()
    none = str(tmp_path / "no-checkpoint")
    evaluate = ["evaluate", "--checkpoint", none, "--src", str(src), "--ref", str(ref)]
    cases = [
        ([*evaluate, "--out", str(src)], f"--out {src} is the --src file"),
        ([*evaluate, "--out", str(tmp_path / "link.en")], f"--out {tmp_path / 'link.en'} is the --src file"),
        ([*evaluate, "--out", str(tmp_path / "hard.de")], f"--out {tmp_path / 'hard.de'} is the --ref file"),
        ([*evaluate, "--out", str(tmp_path / "sub" / ".." / "s.de")], "is the --ref file"),
        (["align", "--checkpoint", none, "--input", str(pairs), "--out", str(pairs)], f"--out {pairs} is the --input file"),
        (["heads", "profile", "--checkpoint", none, "--src", str(src), "--out", str(src)], f"--out {src} is the --src file"),
    ]  # fmt: skip
    for argv, start in cases:
        assert refused(capsys, argv).endswith(f"{start}; writing there would replace it (name another file)")
    assert src.read_text() == "".join(s + "\n" for s in SOURCES) and ref.read_text().startswith("Ein Hund")
    assert pairs.read_text().startswith("A dog runs")
    new = [*evaluate, "--out", str(tmp_path / "out.de")]  # a new file: on to the (missing) checkpoint
    assert refused(capsys, new) == f"{none}: does not exist"


def test_out_inside_a_model_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evaluate --checkpoint CK --out CK/model.safetensors` wrote BLEU lines over the weights and
    exited 0; `align` and `heads profile` did the same to config.json and spm.model."""
    src, ref = write(tmp_path / "s.en", SOURCES), write(tmp_path / "s.de", REFERENCES)
    pairs = write(tmp_path / "p.txt", [f"{s} ||| {r}" for s, r in zip(SOURCES, REFERENCES, strict=True)])
    model = tmp_path / "ck"
    model.mkdir()
    for name, text in (("manifest.json", "{}"), ("model.safetensors", "weights"), ("spm.model", "pieces")):
        (model / name).write_text(text)
    marian = tmp_path / "opus"
    marian.mkdir()
    (marian / "pytorch_model.bin").write_text("weights")
    cases = [
        ["evaluate", "--checkpoint", str(model), "--src", str(src), "--ref", str(ref), "--out", str(model / "model.safetensors")],
        ["align", "--checkpoint", str(model), "--input", str(pairs), "--out", str(model / "config.json")],
        ["heads", "profile", "--checkpoint", str(model), "--src", str(src), "--out", str(model / "sub" / "spm.model")],
        ["evaluate", "--checkpoint", str(marian), "--src", str(src), "--ref", str(ref), "--out", str(marian / "vocab.json")],
    ]  # fmt: skip
    for argv in cases:
        owner = marian if str(marian) in argv[-1] else model
        assert refused(capsys, argv) == f"--out {argv[-1]} is inside the model directory {owner}; name a file elsewhere"
    assert {p.name: p.read_text() for p in model.iterdir()} == {
        "manifest.json": "{}",
        "model.safetensors": "weights",
        "spm.model": "pieces",
    }


def test_record_refuses_a_beam_with_a_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Recorded teacher-forced on --reference, nothing is decoded: --beam was read by nothing."""
    reference = write(tmp_path / "ref.de", ["Ein Hund rennt ."])
    argv = ["record", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "traces"), "--reference", str(reference)]
    assert refused(capsys, [*argv, "--beam", "2", "A dog runs ."]) == (
        "--beam is a decoding option, and --reference records teacher-forced: nothing is decoded"
    )


def test_record_out_inside_a_model_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`record --checkpoint CK --out CK` (or `--out CK/probes`) wrote `00000.trace` among the
    weights and the training probes, exit 0, as `evaluate --out CK/...` once did; refused before
    the model is read, with or without --force."""
    model = tmp_path / "ck"
    (model / "probes").mkdir(parents=True)
    for name, text in (("manifest.json", "{}"), ("model.safetensors", "weights"), ("probes/probe_0.trace", "p")):
        (model / name).write_text(text)
    for out, force in ((model, []), (model / "probes" / "step_300", ["--force"]), (model / "traces", [])):
        argv = ["record", "--checkpoint", str(model), "--out", str(out), *force, "A dog runs ."]
        where = "the" if out == model else "inside the"
        assert refused(capsys, argv) == f"--out {out} is {where} model directory {model}; name a directory elsewhere"
    assert sorted(str(p.relative_to(model)) for p in model.rglob("*")) == [
        "manifest.json",
        "model.safetensors",
        "probes",
        "probes/probe_0.trace",
    ]


def test_inputs_with_nothing_to_work_on_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`heads profile` of an empty --src wrote a profile of no sentences and exited 0; `evaluate`
    against references that are all blank printed BLEU 0.00 (ref_len 0) and exited 0; `record
    --input EMPTY` said to give --input."""
    empty, blank, hyp = (
        tmp_path / "empty.txt",
        write(tmp_path / "blank.txt", [" ", ""]),
        write(tmp_path / "h.de", ["a", "b"]),
    )
    empty.write_text("")
    none = str(tmp_path / "no-checkpoint")  # refused before it is read
    cases = [
        (["heads", "profile", "--checkpoint", none, "--src", str(empty), "--out", str(tmp_path / "p.parquet")], f"{empty}: no lines to profile"),
        (["evaluate", "--hyp", str(hyp), "--ref", str(blank)], f"{blank}: no lines to score (every line is empty)"),
        (["record", "--checkpoint", none, "--input", str(empty), "--out", str(tmp_path / "traces")], f"{empty}: no lines to record"),
    ]  # fmt: skip
    for argv, said in cases:
        assert refused(capsys, argv) == said
    assert not (tmp_path / "p.parquet").exists()


# -- 3. `heads profile --reverse-gold` ----------------------------------------------------------------------
def test_profile_reads_the_shared_zh_en_gold_with_an_en_zh_model(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared gold links Chinese word i to English word j; profiling the en→zh model (--src
    English, --tgt Chinese) read them as English i, Chinese j and failed ("points past") or scored
    the wrong links. With --reverse-gold each cross head's AER is `align --reverse-input`'s."""
    model = load(bundled(CHINESE))
    count = 4
    lines = (data_dir / "alignment" / "zhen_dev.src-tgt").read_text(encoding="utf-8").splitlines()[:count]
    gold = (data_dir / "alignment" / "zhen_dev.gold").read_text(encoding="utf-8").splitlines()[:count]
    zh, en = zip(*(line.split(" ||| ") for line in lines), strict=True)
    files = [write(tmp_path / "s.en", list(en)), write(tmp_path / "r.zh", list(zh)), write(tmp_path / "g", gold)]
    out = tmp_path / "zh.parquet"
    run = ["heads", "profile", "--checkpoint", str(CHINESE), "--quiet", "--gold-one-indexed", "--out", str(out)]
    run += [arg for flag, path in zip(("--src", "--tgt", "--gold"), files, strict=True) for arg in (flag, str(path))]
    assert "points past" in refused(capsys, run)  # read the wrong way round
    assert main([*run, "--reverse-gold"]) == 0
    capsys.readouterr()
    profiled = read_profile(out)
    assert profiled.meta["reverse_gold"] is True
    heads = [
        reading("head", layer, head) for layer in range(model.config.n_layers) for head in range(model.config.n_heads)
    ]
    found, failed = align_lines(model, lines, heads, reverse=True)  # links in the file's order: zh-en
    links = read_pharaoh(gold, one_indexed=True)
    assert not failed
    rows = {
        (r["sentence"], r["layer"], r["head"]): r["aer"] for r in profiled.table.to_pylist() if r["kind"] == "cross"
    }
    for sentence in range(count):
        for head, links_of_head in zip(heads, found, strict=True):
            expected = aer(links_of_head[sentence], *links[sentence])["aer"]
            assert rows[(sentence, head["layer"], head["head"])] == pytest.approx(expected, abs=1e-6), (sentence, head)
    for flag in ("--reverse-gold", "--gold-one-indexed"):  # (--gold-one-indexed alone was read by nothing)
        alone = ["heads", "profile", "--checkpoint", str(CHINESE), "--src", str(files[0]), flag]
        assert (
            refused(capsys, [*alone, "--out", str(tmp_path / "x.parquet")])
            == f"{flag} reads --gold: give the gold links too"
        )


# -- 4. --save-best with a run directory ----------------------------------------------------------------------
def test_save_best_in_a_run_directory_saves_in_its_newest_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a run directory, --save-best scored every head (minutes) and only then failed "not
    an attnlab checkpoint (no manifest.json)". The run's newest valid checkpoint is the one
    `load` opens and the heads are read in: the reading is saved there, and stderr says so."""
    run = tmp_path / "run"
    for step in (100, 200):
        shutil.copytree(
            bundled(TRANSLATOR), run / "checkpoints" / f"step_{step}", ignore=shutil.ignore_patterns("probes")
        )
    pairs = write(tmp_path / "p.txt", [f"{s} ||| {r}" for s, r in zip(SOURCES, REFERENCES, strict=True)])
    gold = write(tmp_path / "gold", ["0-0 1-1 2-2 3-3 5-4 6-5", "0-0 1-1 3-2 4-3 6-5 7-6"])
    argv = ["evaluate", "--task", "align", "--all-heads", "--checkpoint", str(run), "--input", str(pairs)]
    assert main([*argv, "--gold", str(gold), "--save-best", "--json"]) == 0
    newest = run / "checkpoints" / "step_200"
    said = capsys.readouterr()
    best = json.loads(said.out)[0]
    assert f"{run} is a run directory: saving in its newest valid checkpoint, {newest}" in said.err
    verify(newest)
    assert {k: read_config(newest)[1]["alignment"][k] for k in ("method", "layer", "head")} == {
        k: best[k] for k in ("method", "layer", "head")
    }
    assert "alignment" not in read_config(run / "checkpoints" / "step_100")[1]


def test_save_best_says_what_it_wrote_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--save-best rewrites the checkpoint's config.json and manifest.json, the one command told
    to write into a model (docs/RELIABILITY.md): stderr names both files and the reading saved,
    and nothing else in the directory changes."""
    model = tmp_path / "model"
    shutil.copytree(bundled(TRANSLATOR), model, ignore=shutil.ignore_patterns("probes"))
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    pairs = write(tmp_path / "p.txt", [f"{s} ||| {r}" for s, r in zip(SOURCES, REFERENCES, strict=True)])
    gold = write(tmp_path / "gold", ["0-0 1-1 2-2 3-3 5-4 6-5", "0-0 1-1 3-2 4-3 6-5 7-6"])
    argv = ["evaluate", "--task", "align", "--all-heads", "--checkpoint", str(model), "--input", str(pairs)]
    assert main([*argv, "--gold", str(gold), "--save-best", "--json"]) == 0
    said = capsys.readouterr()
    best = json.loads(said.out)[0]["reading"]
    assert said.err.strip().splitlines()[-1] == (
        f"attnlab evaluate: --save-best: wrote {best}, argmax links as the default alignment reading into "
        f"{model / 'config.json'} (meta.alignment) and {model / 'manifest.json'}; `attnlab align` now uses it"
    )
    changed = {p.name for p in model.iterdir() if p.is_file() and before.get(p.name) != p.read_bytes()}
    assert changed == {"config.json", "manifest.json"}


def test_save_best_checks_where_it_writes_before_scoring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What --save-best cannot write into (here a model opened from a directory with no
    manifest, as a Marian directory is) is refused before a single head is scored."""
    opened = SimpleNamespace(path=str(tmp_path / "plain"), meta={})
    (tmp_path / "plain").mkdir()
    monkeypatch.setattr(evaluate, "load", lambda *args, **kwargs: opened)
    monkeypatch.setattr(evaluate, "aer_grid", lambda *args, **kwargs: pytest.fail("scored before the check"))
    pairs, gold = write(tmp_path / "p.txt", ["a ||| b"]), write(tmp_path / "gold", ["0-0"])
    argv = ["evaluate", "--task", "align", "--all-heads", "--checkpoint", str(tmp_path / "plain")]
    error = refused(capsys, [*argv, "--input", str(pairs), "--gold", str(gold), "--save-best"])
    assert error.startswith(f"--save-best: {tmp_path / 'plain'}: not an attnlab checkpoint (no manifest.json)")


# -- 5. --tokenized is tokenized on purpose ----------------------------------------------------------------
def test_tokenized_bleu_does_not_warn_about_tokenization(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The paper-style BLEU tokenizes deliberately, yet sacreBLEU printed "That's 100 lines that
    end in a tokenized period ... you forgot to detokenize" on every test set."""
    lines = [f"A dog number {n} runs in the park." for n in range(120)]
    ref = write(tmp_path / "ref.de", lines)
    with caplog.at_level(logging.WARNING):
        assert main(["evaluate", "--ref", str(ref), "--hyp", str(ref), "--tokenized"]) == 0
    err = capsys.readouterr().err + caplog.text
    assert "tokenized period" not in err and "detokenize" not in err


def test_tokenized_bleu_whatever_the_tokenizer_or_metric(tmp_path: Path) -> None:
    """`evaluate --tokenized` with `--tokenize zh` (a Chinese target's default), `intl`, `char`,
    `none` or `--metric rouge` ended in an AttributeError traceback: the paper-style BLEU reached
    sacreBLEU's 13a tokenizer as an attribute, there only once a 13a BLEU had imported it. A
    fresh process each, as a user's: in this one an earlier test may have imported it."""
    ref = write(tmp_path / "ref.de", REFERENCES)
    for extra in (["--tokenize", "zh"], ["--tokenize", "none"], ["--metric", "rouge"]):
        argv = [sys.executable, "-m", "attnlab", "evaluate", "--ref", str(ref), "--hyp", str(ref), "--tokenized"]
        done = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "tokenized BLEU (paper-style, 13a tokens + compound splitting; NOT sacreBLEU) = 100.00" in done.stdout


def test_tokenized_bleu_of_chinese_splits_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """13a saw each Chinese sentence as one word: `--tokenized` printed 0.00 where sacreBLEU's
    zh BLEU was 39; Chinese references are split into characters there too."""
    ref = write(tmp_path / "ref.zh", ["我们是学生。", "他喜欢读书。"])
    hyp = write(tmp_path / "hyp.zh", ["我们是老师。", "他喜欢读书。"])
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(hyp), "--tokenized"]) == 0
    said = re.search(r"tokenized BLEU \(paper-style, (\w+) tokens .*\) = ([\d.]+)", capsys.readouterr().out)
    assert said is not None and said.group(1) == "zh" and 40 < float(said.group(2)) < 100


# -- 6. decoding options where nothing is decoded ------------------------------------------------------------
def test_decoding_options_with_hyp_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evaluate --hyp out.de --beam 8 --dtype bf16` scored the outputs and ignored both flags;
    `heads profile --tgt` reads references teacher-forced and ignored --beam the same way."""
    ref = write(tmp_path / "ref.de", REFERENCES)
    score = ["evaluate", "--ref", str(ref), "--hyp", str(ref)]
    for flag, value in (("--beam", "8"), ("--alpha", "1.0"), ("--patience", "1"), ("--dtype", "bf16")):
        assert refused(capsys, [*score, flag, value]) == (
            f"{flag} is a decoding option, and --hyp scores given outputs: nothing is decoded"
        )
    gold = write(tmp_path / "gold", ["0-0", "0-0"])
    align = ["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(gold)]
    assert "--task align decodes nothing" in refused(capsys, [*align, "--beam", "4"])
    assert refused(capsys, [*align, "--save-best"]) == (
        "--save-best saves the best of --all-heads' readings: give it with --all-heads"
    )
    for flag in (["--gold", str(gold)], ["--all-heads"], ["--reverse-gold"], ["--input", str(ref)]):
        assert refused(capsys, [*score, *flag]) == f"{flag[0]} is an alignment option: give it with --task align"
    for flag in (["--links", "threshold"], ["--threshold", "0.5"]):  # a BLEU was printed, they read by nothing
        assert refused(capsys, [*score, *flag]) == f"{flag[0]} is an alignment option: give it with --task align"
    for flag in (["--ref", str(ref)], ["--tokenize", "zh"], ["--metric", "rouge"], ["--tokenized"], ["--out", "o"]):
        assert refused(capsys, [*align, *flag]) == (  # (--out wrote nothing)
            f"{flag[0]} scores translations or parses: --task align reads --hyp and --gold"
        )
    assert main(score) == 0 and main(align) == 0  # without them, scored as before
    capsys.readouterr()
    src = write(tmp_path / "s.en", SOURCES)
    profile = ["heads", "profile", "--checkpoint", str(tmp_path), "--src", str(src), "--tgt", str(ref), "--beam", "8"]
    assert refused(capsys, [*profile, "--out", str(tmp_path / "p.parquet")]).startswith(
        "--beam and --alpha set the search"
    )


def test_src_is_refused_where_nothing_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evaluate --hyp H --ref R --src S` read S, counted its lines (and refused a count that
    differed) and scored H without it; only a parse's linearised references take their words from
    --src, and --task align reads none (its pairs are --input)."""
    ref, src = write(tmp_path / "ref.de", REFERENCES), write(tmp_path / "s.en", SOURCES)
    score = ["evaluate", "--ref", str(ref), "--hyp", str(ref)]
    said = (
        "--src is read with --hyp only to score parses (the words of linearised trees); "
        "translate outputs are scored against --ref alone: drop --src"
    )
    assert refused(capsys, [*score, "--src", str(src)]) == said
    assert refused(capsys, [*score, "--src", str(write(tmp_path / "one.en", SOURCES[:1]))]) == said  # not "1 lines"
    assert refused(capsys, [*score, "--src", str(src), "--checkpoint", str(bundled(TRANSLATOR))]) == said
    gold = write(tmp_path / "gold", ["0-0", "0-0"])
    align = ["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(gold), "--src", str(src)]
    assert refused(capsys, align) == "--src is a decoding option, and --task align decodes nothing (teacher-forced)"
    assert main(score) == 0  # without it, scored as before


def test_how_the_model_is_read_is_refused_where_links_are_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaluate --task align --hyp` scores its links as given: --reverse-input, --links and
    --threshold (how --all-heads reads the model) gave the same AER with exit 0."""
    gold = write(tmp_path / "gold", ["0-0", "0-0"])
    score = ["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(gold)]
    blank_last = write(tmp_path / "gold3", ["0-0", "0-0", ""])  # (it said "2 hypothesis, 3 sure and 3 possible lines")
    said = f"--hyp {gold} has 2 lines and --gold {blank_last} 3"
    assert refused(capsys, ["evaluate", "--task", "align", "--gold", str(blank_last), "--hyp", str(gold)]) == said
    for extra in (["--reverse-input"], ["--links", "argmax"], ["--threshold", "0.5"], ["--threshold", "0"]):
        assert refused(capsys, [*score, *extra]) == (
            f"{extra[0]} is how --all-heads reads the model's links; --hyp's are scored as given"
        )
    assert main(score) == 0


def test_align_refuses_a_layer_or_head_its_method_does_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`align --method all --layer 0` printed the all-layer links (the status line said "all"),
    `--method layer --head 1` the layer's head average, `--method shift --head 2` the all-layer
    Shift-Att: the setting asked for was dropped without a word."""
    pairs = write(tmp_path / "p.txt", [f"{s} ||| {r}" for s, r in zip(SOURCES, REFERENCES, strict=True)])
    argv = ["align", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(pairs)]
    for given, said in (
        (["--method", "all", "--layer", "0"], "--method all takes no --layer 0"),
        (["--method", "all", "--layer", "0", "--head", "1"], "--method all takes no --layer 0 or --head 1"),
        (["--method", "layer", "--head", "1"], "--method layer takes no --head 1"),
        (["--method", "shift", "--head", "2"], "--method shift takes no --head 2 without --layer"),
    ):
        assert refused(capsys, [*argv, *given]) == said
    for given in (["--method", "shift", "--layer", "0", "--head", "2"], ["--method", "layer", "--layer", "0"]):
        assert main([*argv, *given]) == 0  # what each method reads is taken
    assert reading("shift", 0, 2) == {"method": "shift", "layer": 0, "head": 2}


# -- 7. checkpoints found as decoding finds them; blank lines ------------------------------------------
def test_scoring_outputs_reads_a_run_or_marian_checkpoint_as_decoding_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaluate --hyp OUT --checkpoint RUN` failed ("run/config.json: not a usable attnlab
    config") where decoding takes a run directory (its newest checkpoint), or a Marian one."""
    from marian_models import make_marian

    run = tmp_path / "run"
    shutil.copytree(bundled(CHINESE), run / "checkpoints" / "step_100", ignore=shutil.ignore_patterns("probes"))
    hyp, ref = write(tmp_path / "out.zh", ["我喜欢茶。"]), write(tmp_path / "ref.zh", ["我喜欢喝茶。"])
    assert main(["evaluate", "--checkpoint", str(run), "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bleu_signature"].count("tok:zh") == 1  # the run's target language
    marian = make_marian(tmp_path / "marian", "gelu")
    assert main(["evaluate", "--checkpoint", str(marian), "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    capsys.readouterr()
    parses = write(tmp_path / "trees", ["(S (NP (DT A) (NN dog)) (VP (VBZ runs)))"])
    assert main(["evaluate", "--checkpoint", str(bundled(PARSER)), "--hyp", str(parses), "--ref", str(parses)]) == 0
    assert capsys.readouterr().out.startswith("labelled brackets")  # the checkpoint's task: a parser's F1


def test_patience_reaches_the_search(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """`translate --patience` and `evaluate --patience` decode with it (the search's own tests
    check what it does); without it, the paper's stop (None); a bad one is one line."""
    seen: list[float | None] = []
    real = search.beam_search
    monkeypatch.setattr(search, "beam_search", lambda *a, **k: seen.append(a[7]) or real(*a, **k))
    source, ref = write(tmp_path / "in.en", SOURCES), write(tmp_path / "ref.de", REFERENCES)
    translate = ["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(source)]
    assert main([*translate, "--patience", "1"]) == 0 and main(translate) == 0
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(bundled(TRANSLATOR)),
                "--src",
                str(source),
                "--ref",
                str(ref),
                "--patience",
                "2",
            ]
        )
        == 0
    )
    assert seen == [1.0, None, 2.0]
    capsys.readouterr()
    assert refused(capsys, [*translate, "--patience", "0"]).startswith("patience must be a number > 0")


def test_a_line_of_invisible_characters_is_an_empty_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It passed `str.strip()`: the batch failed and every line was decoded again one at a time."""
    source = write(tmp_path / "in.en", [SOURCES[0], "\u200b\ufeff", SOURCES[1]])
    assert main(["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(source)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1] == "" and all(captured.out.splitlines()[::2])
    assert "line 2 is empty; writing an empty line" in captured.err and "the input is empty" not in captured.err
    many = write(tmp_path / "many.en", [SOURCES[0], *[""] * 5000, "\u200b"])  # one line for them all (one each)
    assert main(["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(many)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 5002 and len(captured.err.splitlines()) == 2, captured.err[:300]
    assert (
        "attnlab translate: 5001 of 5002 lines are empty (the first: line 2); writing an empty line for each"
        in captured.err
    )


def test_characters_the_vocabulary_lacks_are_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Chinese given to the EN→DE model came back as German-looking nonsense without a word (the
    explorer and the widgets said it): one stderr line names the characters and the first line."""
    source = write(tmp_path / "in.en", [SOURCES[0], "", "我是学生。 我是 👩\u200d👧"])  # (a joiner drew nothing)
    assert main(["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(source), "--beam", "1"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "vocabulary" in line]
    assert said == [
        "attnlab translate: 8 characters are not in this model's vocabulary, "
        "read as UTF-8 byte pieces (first on line 3): 我 是 学 生 。 👩 U+200D 👧"
    ]
    known = write(tmp_path / "ok.en", SOURCES[:1])
    assert main(["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(known), "--beam", "1"]) == 0
    assert "vocabulary" not in capsys.readouterr().err


def test_a_line_that_failed_makes_the_exit_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`translate`, `parse` and `align` exited 0 with every line failed ("0 of 2 lines" on stderr
    only): a line left empty because the model could not take it now makes the status 1, and the
    other lines are still answered, one output line per input line."""
    source = write(tmp_path / "in.en", [SOURCES[0], " ".join(["dog"] * 1500)])
    for task, checkpoint in (("translate", TRANSLATOR), ("parse", PARSER)):
        assert main([task, "--checkpoint", str(bundled(checkpoint)), "--input", str(source), "--beam", "1"]) == 1
        captured = capsys.readouterr()
        assert [bool(line) for line in captured.out.split("\n")] == [True, False, False]  # two lines, the 2nd empty
        assert f"attnlab {task}: line 2: the input has " in captured.err  # (the parser spells words: 3000)
    pairs = write(tmp_path / "pairs", [f"{SOURCES[0]} ||| {REFERENCES[0]}", "no pair here"])
    assert main(["align", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(pairs)]) == 1
    assert capsys.readouterr().out.split("\n")[1:] == ["", ""]
    pairs = write(tmp_path / "pairs", [f"{SOURCES[0]} ||| {REFERENCES[0]}"])
    assert main(["align", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(pairs)]) == 0


def test_a_line_of_invalid_utf8_is_answered_empty_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One bad byte refused the whole input: "stdin: invalid UTF-8 (invalid start byte at byte 14)"
    (which line?), and with --input Python's "'utf-8' codec can't decode byte 0xff in position 14".
    `translate`, `parse` and `align` answer that line alone with an empty line, named as `data
    prepare` names it, exit 1; the commands that read a file whole refuse it naming file and line,
    the same words for stdin and for a file."""
    import io

    def stdin(data: bytes) -> None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))

    said = "line 2: invalid UTF-8 (invalid start byte at byte 2); writing an empty line"
    data = f"{SOURCES[0]}\nA \xff\xfe cat sleeps.\n{SOURCES[1]}\n".encode("latin-1")
    source = tmp_path / "in.en"
    source.write_bytes(data)
    for task, checkpoint in (("translate", TRANSLATOR), ("parse", PARSER)):
        for where in ([], ["--input", str(source)]):
            stdin(data)
            assert main([task, "--checkpoint", str(bundled(checkpoint)), "--beam", "1", *where]) == 1
            captured = capsys.readouterr()
            assert [bool(line) for line in captured.out.split("\n")] == [True, False, True, False], captured.out
            assert f"attnlab {task}: {said}" in captured.err and "2 of 3 lines" in captured.err
    pairs = tmp_path / "pairs"
    pairs.write_bytes(f"{SOURCES[0]} ||| {REFERENCES[0]}\nA \xff ||| B\nA dog ||| Ein Hund\n".encode("latin-1"))
    assert main(["align", "--checkpoint", str(bundled(TRANSLATOR)), "--input", str(pairs)]) == 1
    captured = capsys.readouterr()
    assert [bool(line) for line in captured.out.split("\n")] == [True, False, True, False], captured.out
    assert f"attnlab align: {said}" in captured.err
    for where in ([], ["--input", str(source)]):  # lens too, as its --help says (it refused the whole input)
        stdin(data)
        assert main(["lens", "--checkpoint", str(bundled(TRANSLATOR)), "--beam", "1", *where]) == 1
        captured = capsys.readouterr()
        assert [bool(line) for line in captured.out.split("\n")] == [True, False, True, False], captured.out
        assert f"attnlab lens: {said}" in captured.err and "2 of 3 lines" in captured.err
    references = tmp_path / "ref.de"
    references.write_bytes(f"{REFERENCES[0]}\nEin \xff Hund.\n{REFERENCES[1]}\n".encode("latin-1"))
    lens = [
        "lens",
        "--checkpoint",
        str(bundled(TRANSLATOR)),
        "--input",
        str(write(tmp_path / "s", [SOURCES[0], "A cat sleeps .", SOURCES[1]])),
    ]
    assert main([*lens, "--reference", str(references)]) == 1
    assert "line 2: its reference: invalid UTF-8 (invalid start byte at byte 4)" in capsys.readouterr().err
    hyp = write(tmp_path / "hyp", ["Ein Hund .", "Ein Hund .", "Ein Hund ."])
    stdin(data)
    assert refused(capsys, ["evaluate", "--hyp", str(hyp), "--ref", "-"]) == (
        "stdin:2: invalid UTF-8 (invalid start byte at byte 2)"
    )
    assert refused(capsys, ["evaluate", "--hyp", str(hyp), "--ref", str(source)]) == (
        f"{source}:2: invalid UTF-8 (invalid start byte at byte 2)"
    )


def test_a_binary_input_is_refused_whole_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`translate -i train.en.gz` printed 6,050 stderr lines, one per "line" of invalid UTF-8, and
    translated the fragments that decoded, exit 1 (`-i model.safetensors`: 35,265 lines); a NUL was
    read as a space ("A\\x00dog runs ." translated, exit 0), and a file of NULs was "line 1 is
    empty", exit 0. A file or stdin binary from its start (gzip's magic, a NUL in its first 8000
    bytes, UTF-16) is refused whole in one line by `translate`, `parse` and `align`, as by the
    commands that read a file whole; a NUL further on fails its line alone, as invalid UTF-8 does."""
    import gzip
    import io

    text = "".join(f"{line}\n" for line in SOURCES).encode()
    nul = "not text, a NUL byte at byte {} (a binary file, or UTF-16 without its byte-order mark)"
    given = {
        "packed.gz": (gzip.compress(text), "gzip-compressed, not text; unpack it first"),
        "nul.txt": (b"A\x00dog runs .\n", nul.format(1)),
        "zeros.txt": (bytes(100_000), nul.format(0)),
        "utf16.txt": (text.decode().encode("utf-16-le"), nul.format(1)),  # (no byte-order mark)
    }
    translate = ["translate", "--checkpoint", str(bundled(TRANSLATOR)), "--beam", "1"]
    weights = TRANSLATOR / "model.safetensors"
    assert refused(capsys, [*translate, "-i", str(weights)]).startswith(f"{weights}: not text, a NUL byte at byte ")
    for name, (content, said) in given.items():
        (tmp_path / name).write_bytes(content)
        assert refused(capsys, [*translate, "-i", str(tmp_path / name)]).startswith(f"{tmp_path / name}: {said}")
    for argv in (
        ["parse", "--checkpoint", str(bundled(PARSER)), "--beam", "1"],
        ["align", "--checkpoint", str(bundled(TRANSLATOR))],
        ["evaluate", "--hyp", str(write(tmp_path / "hyp", ["Ein Hund ."]))],
    ):
        flag = "--ref" if argv[0] == "evaluate" else "--input"
        assert refused(capsys, [*argv, flag, str(tmp_path / "nul.txt")]).startswith(f"{tmp_path / 'nul.txt'}: not text")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(text))))
    assert refused(capsys, translate) == f"stdin: {given['packed.gz'][1]} (gunzip it, or pipe zcat's output to stdin)"
    padding = [SOURCES[0]] * 400  # 10,000 bytes: the NULs below lie past the first 8000
    later = tmp_path / "later.txt"
    later.write_bytes("".join(f"{line}\n" for line in [*padding, "A\x00dog runs .", "\x00", SOURCES[1]]).encode())
    assert main([*translate, "-i", str(later)]) == 1
    captured = capsys.readouterr()
    assert [bool(line) for line in captured.out.split("\n")[400:]] == [False, False, True, False]
    assert captured.err.splitlines() == [
        "attnlab translate: line 401: a NUL byte at byte 1, which no text holds; writing an empty line",
        "attnlab translate: line 402: a NUL byte at byte 0, which no text holds; writing an empty line",
        captured.err.splitlines()[-1],  # (the count and the time)
    ]
    assert "401 of 403 lines" in captured.err


def test_a_checkpoint_that_does_not_exist_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """translate, export and `attnlab.load` said "not a directory" of a path that does not exist
    (and `attnlab explore` "no such directory"): a file is not a directory, a typo does not exist."""
    (tmp_path / "a-file").write_text("x")
    for name, said in (("missing", "does not exist"), ("a-file", "not a directory")):
        path = tmp_path / name
        for argv in (["translate", "--checkpoint", str(path)], ["export", "ctranslate2", str(path)]):
            assert refused(capsys, [*argv, "--out", str(tmp_path / "out")] if argv[0] == "export" else argv) == (
                f"{path}: {said}"
            )
        with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: {said}$"):
            load(path)


# -- heads patch: what is given, read as it was meant ------------------------------------------------------
def test_patch_refuses_file_names_given_as_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --files, `--clean cl.txt --corrupted co.txt` patched the two file names as sentences and
    printed a table of them; an empty pair of files said "as many clean lines as clean ones (0)"."""
    clean, corrupted = write(tmp_path / "cl.txt", ["A man sleeps ."]), write(tmp_path / "co.txt", ["A woman sleeps ."])
    patch = ["heads", "patch", "--checkpoint", str(bundled(TRANSLATOR))]
    for given, said in (
        (["--clean", str(clean), "--corrupted", str(corrupted)], f"--clean {clean}"),
        (["--clean", "A man sleeps .", "--corrupted", str(corrupted)], f"--corrupted {corrupted}"),
        (["--clean", "A man .", "--corrupted", "A woman .", "--target", str(clean)], f"--target {clean}"),
    ):
        assert (
            refused(capsys, [*patch, *given]) == f"{said} names a file: give --files to read the sentences from files"
        )
    empty = write(tmp_path / "empty", [])
    assert refused(capsys, [*patch, "--files", "--clean", str(empty), "--corrupted", str(empty)]) == (
        f"{empty} and {empty} have no lines: there is no pair to patch"
    )
    from attnlab.decode.patching import corpus_patching
    from attnlab.errors import AttnlabError

    with pytest.raises(AttnlabError, match=r"^patching a corpus needs a list of clean lines, one or more; got \[\]$"):
        corpus_patching(load(TRANSLATOR), [], [])


def test_patch_circuit_names_its_option(capsys: pytest.CaptureFixture[str]) -> None:
    """`--circuit 1000` said "most is how many nodes a circuit follows at most ... got 16" (a
    parameter the command does not have), and `--circuit N --method attribution` patched
    activations without a word (a circuit is found by patching each path)."""
    patch = ["heads", "patch", "--checkpoint", str(bundled(TRANSLATOR)), "--clean", "A man .", "--corrupted", "A dog ."]
    for n in ("1000", "0"):
        assert refused(capsys, [*patch, "--circuit", n]) == (
            f"--circuit N follows the N heads that move most: N from 1 to 16, got {n}"
        )
    assert refused(capsys, [*patch, "--circuit", "2", "--method", "attribution"]) == (
        "--circuit patches each path (activation patching): --method attribution is not read"
    )
    with pytest.raises(SystemExit):
        main(["heads", "patch", "--help"])
    assert "from 0 (negative: from the end, -1 the </s>)" in " ".join(capsys.readouterr().out.split())


# -- control characters read as spaces ---------------------------------------------------------------------
def test_a_control_character_in_a_line_is_read_as_a_space(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A NUL inside a line was dropped and joined the words around it: "A\\x00man." was translated
    "Ein Wachmann." (as "Aman."). NUL, ESC, DEL and C1 controls now read as a space, by the API,
    and ESC, DEL and C1 by every command (a file holding a NUL is not text:
    `test_a_binary_input_is_refused_whole_in_one_line`); a parser's words are split there too (one
    leaf each)."""
    spaced = ["A man is sleeping .", "Two dogs run ."]
    model = load(bundled(TRANSLATOR))
    nul = ["A\x00man is\x1bsleeping .", "Two\x7fdogs\x85\x9frun ."]
    assert [r.text for r in model.translate(nul, beam=1)] == [r.text for r in model.translate(spaced, beam=1)]
    controlled = ["A\x1bman is\x1bsleeping .", "Two\x7fdogs\x85\x9frun ."]
    argv = ["translate", "--checkpoint", str(TRANSLATOR), "--beam", "1", "--input"]
    assert main([*argv, str(write(tmp_path / "spaced", spaced))]) == 0
    expected = capsys.readouterr().out
    assert main([*argv, str(write(tmp_path / "controlled", controlled))]) == 0
    assert capsys.readouterr().out == expected
    assert (
        main(
            [
                "parse",
                "--checkpoint",
                str(bundled(PARSER)),
                "--beam",
                "1",
                "--input",
                str(write(tmp_path / "p", ["The\x1bcat sat ."])),
            ]
        )
        == 0
    )
    tree = capsys.readouterr().out
    assert "The)" in tree and "cat)" in tree and "\x1b" not in tree  # two leaves, not "The\x1bcat"


def _read_until(fd: int, ending: bytes, seconds: float = 120.0) -> bytes:
    """What `fd` gives until it ends with `ending` (failing after `seconds`)."""
    got, deadline = b"", time.monotonic() + seconds
    while not got.endswith(ending):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"nothing more after {got!r}"
        got += os.read(fd, 4096)
    return got


def test_translate_at_a_terminal_answers_each_line_as_it_is_typed() -> None:
    """At a terminal `translate` read all of stdin before decoding, and said nothing: a sentence typed
    and Enter pressed waited for a Ctrl-D never mentioned. Now it says so and answers line by line,
    numbering a line it cannot take by the count typed; Ctrl-D ends it."""
    want = load(bundled(TRANSLATOR)).translate(SOURCES[0]).text
    controller, terminal = pty.openpty()
    run = subprocess.Popen(
        [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(TRANSLATOR)],
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    try:
        assert b"type a sentence and press Enter for a translation; Ctrl-D ends" in _read_until(
            run.stderr.fileno(), b"\n"
        )
        os.write(controller, SOURCES[0].encode() + b"\n")
        assert _read_until(run.stdout.fileno(), b"\n") == want.encode() + b"\n"  # before any Ctrl-D
        os.write(controller, b"\n")
        assert _read_until(run.stdout.fileno(), b"\n") == b"\n"
        assert b"line 2 is empty; writing an empty line" in _read_until(run.stderr.fileno(), b"\n")
        os.write(controller, b"\x04")
        assert run.wait(timeout=60) == 0
    finally:
        run.kill()
        os.close(controller)


def test_a_command_reading_stdin_at_a_terminal_says_how_to_end_it() -> None:
    """`attnlab align` with no --input waited on the terminal without a word."""
    controller, terminal = pty.openpty()
    run = subprocess.Popen(
        [sys.executable, "-m", "attnlab", "align", "--checkpoint", str(bundled(TRANSLATOR))],
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    try:
        said = _read_until(run.stderr.fileno(), b"\n")
        assert said == b"attnlab: reading the lines from the terminal: end them with Ctrl-D\n", said
        os.write(controller, f"{SOURCES[0]} ||| {REFERENCES[0]}\n".encode() + b"\x04")
        out, _ = run.communicate(timeout=120)
        assert run.returncode == 0 and re.search(rb"\d+-\d+", out), out
    finally:
        run.kill()
        os.close(controller)
