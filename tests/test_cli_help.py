"""What `attnlab --help`, `attnlab --version` and each command's `--help` say, and the name a
nested command's one-line error goes by: each claim checked against what the command does."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

import attnlab
from attnlab.cli import COMMANDS, main
from attnlab.errors import ArgumentParser
from attnlab.train.recipes import RECIPES


class Parsed(Exception):
    """Raised in place of parsing: the parser is all these tests need."""


def every_parser(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser and every subcommand's, by prog, caught as each command parses."""
    caught: dict[str, argparse.ArgumentParser] = {}

    def catch(parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        caught[parser.prog] = parser
        raise Parsed

    with monkeypatch.context() as patched:
        patched.setattr(ArgumentParser, "parse_args", catch)
        patched.setattr(ArgumentParser, "parse_known_args", catch)
        for command in COMMANDS:
            with pytest.raises(Parsed):
                main([command])
    found, waiting = {}, dict(caught)
    while waiting:
        prog, parser = waiting.popitem()
        found[prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                waiting.update((sub.prog, sub) for sub in action.choices.values())
    return found


def help_of(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    """`attnlab ARGV --help` on one line per option (no wrapping to cut a phrase in two)."""
    monkeypatch.setenv("COLUMNS", "2000")
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`attnlab --version` was "unknown command '--version'", status 2."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"attnlab {attnlab.__version__}\n"


def test_the_overview_shows_an_example_and_where_to_read_more(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    said = capsys.readouterr().out
    assert 'e.g.  echo "A dog runs in the park ." | attnlab translate --checkpoint checkpoints/multi30k-en-de' in said
    assert "README.md" in said and "--version" in said


def test_a_nested_command_names_itself_in_its_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """`attnlab heads patch` without --corrupted said `attnlab heads: error: ... (attnlab heads
    patch --help ...)`, and `attnlab data prepare` `attnlab data: error:`: a refused command line
    names the parser that refused it, as its --help hint does."""
    cases = [
        (["heads", "patch", "--checkpoint", "x", "--clean", "a"], "attnlab heads patch: error: the following "
         "arguments are required: --corrupted (attnlab heads patch --help lists the options)"),
        (["heads", "profile", "--checkpoint", "x", "--src", "s", "--out", "p.parquet", "--batch", "many"],
         "attnlab heads profile: error: argument --batch: invalid int value: 'many' (attnlab heads profile --help "
         "lists the options)"),
        (["heads", "dance"], "attnlab heads: error: argument action: invalid choice: 'dance' (choose from 'profile', "
         "'query', 'importance', 'patch') (attnlab heads --help lists the options)"),
        (["data", "prepare", "multi30k"], "attnlab data prepare: error: the following arguments are required: "
         "--out (attnlab data prepare --help lists the options)"),
        (["data", "download"], "attnlab data download: error: the following arguments are required: corpus "
         "(attnlab data download --help lists the options)"),
        (["data", "unpack"], "attnlab data: error: argument command: invalid choice: 'unpack' (choose from "
         "'prepare', 'download') (attnlab data --help lists the options)"),
    ]  # fmt: skip
    for argv, line in cases:
        assert main(argv) == 2
        assert capsys.readouterr().err == line + "\n"


def test_a_negative_number_with_an_exponent_is_a_value(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--alpha -1e308` and `--alpha -inf` said "argument --alpha: expected one argument"
    (argparse read the value as an option, `-inf` as `-i nf`): the line says what is wrong with
    the number, as it does for `-1`."""
    bundled = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
    (tmp_path / "in.en").write_text("A dog .\n")
    for value in ("-1e308", "-1.5E-3", "-1", "-.5", "-inf", "-NaN", "-Infinity"):
        assert main(["translate", "--checkpoint", str(bundled), "--alpha", value, "-i", str(tmp_path / "in.en")]) == 2
        assert "alpha (the length penalty's exponent) must be a number from 0 to 10" in capsys.readouterr().err
    parser = ArgumentParser(prog="x")
    parser.add_argument("--a", type=float)
    assert parser.parse_args(["--a", "-2e-5"]).a == -2e-5


def test_every_parser_says_what_it_does_and_every_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """`heads profile --help` had no description, and --last (5), record's --out (traces),
    --direction, --method, --order-by, --max-len, --seed, --vocab-size and more kept their
    defaults to themselves."""
    undescribed, unstated = [], []
    for prog, parser in every_parser(monkeypatch).items():
        if not parser.description:
            undescribed.append(prog)
        for action in parser._actions:
            default = action.default
            if default is None or default is False or default == [] or default == argparse.SUPPRESS:
                continue
            if "default" not in (action.help or ""):
                unstated.append(f"{prog} {'/'.join(action.option_strings) or action.dest} ({default!r})")
    assert undescribed == [] and unstated == []


def test_help_says_what_the_flags_do(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line a docs audit found saying less than the command does, or something else."""
    assert "bf16: about 1.5× faster decoding" in help_of(capsys, monkeypatch, "translate")  # said 2x, as README not
    export = help_of(capsys, monkeypatch, "export")  # said "replace --out if it exists"
    assert "replace --out if it is a CTranslate2 model or an empty directory (any other directory is refused)" in export
    train = help_of(capsys, monkeypatch, "train")
    assert ", ".join(RECIPES) in train and "a bare --compile means model" in train
    assert train.count("required") == 2  # --data and --out, without a recipe
    patch = help_of(capsys, monkeypatch, "heads", "patch")
    assert "ffn:SIDE:LAYER (e.g. ffn:decoder:1)" in patch
    evaluate = help_of(capsys, monkeypatch, "evaluate")
    assert "rollout" in evaluate and "direct shares" in evaluate  # --all-heads' rows
    assert "[KEY=VALUE ...]" in help_of(capsys, monkeypatch, "flops").split("\n\n")[0]  # the usage line
    assert "./data, where `prepare` looks by itself" in help_of(capsys, monkeypatch, "data", "download")
    assert "else ./data where `data download` saves" in help_of(capsys, monkeypatch, "data", "prepare")


def test_flops_takes_the_overrides_its_usage_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """KEY=VALUE before, after and between flags, as `attnlab train` takes them."""
    assert main(["flops", "--preset", "tiny", "d_ff=64", "--json", "d_model=32"]) == 0
    assert json.loads(capsys.readouterr().out)["overrides"] == {"d_ff": 64, "d_model": 32}
    assert main(["flops", "--preset", "tiny", "n_layers=x"]) == 2
    assert "n_layers" in capsys.readouterr().err


def test_a_nested_commands_own_errors_and_warnings_name_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `heads profile` or `data prepare` refuse once running (not argparse) said `attnlab
    heads:` / `attnlab data:`, where argparse's refusals of the same command said it whole; and
    each module's SUBCOMMANDS are its parser's."""
    from attnlab.data import commands as data_commands
    from attnlab.decode import heads

    assert (
        main(["heads", "profile", "--checkpoint", str(tmp_path), "--src", str(tmp_path / "x"), "--out", "p.csv"]) == 2
    )
    assert capsys.readouterr().err.startswith("attnlab heads profile: error: ")
    assert main(["data", "prepare", "multi30k", "--out", str(tmp_path), "--data-dir", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("attnlab data prepare: error: ")
    for module, command in ((heads, "heads"), (data_commands, "data")):
        assert main([command, "bogus"]) == 2
        offered = re.search(r"\(choose from ([^)]*)\)", capsys.readouterr().err).group(1)
        assert offered.replace("'", "").split(", ") == list(module.SUBCOMMANDS)
