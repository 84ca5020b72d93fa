"""Parsing (§6.3): constrained decoding always yields a tree over exactly the input's words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.checkpoint import save_checkpoint
from attnlab.config import preset
from attnlab.data import ParallelData, load_tokenizer
from attnlab.model import Transformer
from attnlab.treebank import leaves, parse_tree

PY = sys.executable


@pytest.fixture(scope="module")
def parser(data_dir: Path, tmp_path_factory) -> Path:
    """A random-weight parser: the constraint alone must make every output well formed."""
    from attnlab.cli import main

    prep = tmp_path_factory.mktemp("parse") / "prep"
    assert main(["data", "prepare", "ptb", "--out", str(prep)]) == 0
    torch.manual_seed(5)
    model = Transformer(preset("tiny", vocab_size=load_tokenizer(prep).get_piece_size(), max_len=512))
    return save_checkpoint(prep.parent / "ckpt", model, prep / "spm.model", meta={"task": "parse"})


def test_constrained_parse_keeps_every_word(parser: Path) -> None:
    model = attnlab.load(parser)
    data = ParallelData(Path(parser).parent / "prep", "test")
    sentences = [data.src_text(i) for i in range(3)] + ["Hello ( world ) !", "x"]
    for beam in (1, 3):
        for result in model.parse(sentences, beam=beam, max_len_b=30):
            tree = parse_tree(result.text)
            words = [{"(": "-LRB-", ")": "-RRB-"}.get(w, w) for w in result.source.split()]
            assert leaves(tree) == words, result.text
            assert result.text.count("(") == result.text.count(")")


def test_cli_parse_one_tree_per_line(parser: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("The cat sat .\n\nPrices rose sharply .\n")
    done = subprocess.run(
        [
            PY,
            "-m",
            "attnlab",
            "parse",
            "--checkpoint",
            str(parser),
            "--input",
            str(src),
            "--beam",
            "2",
            "--max-len-b",
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    assert leaves(parse_tree(lines[2])) == ["Prices", "rose", "sharply", "."]
    gold = tmp_path / "gold.txt"
    gold.write_text(
        "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))\n(S (NP (NN x)))\n(S (NP (NNS Prices)) (VP (VBD rose) (ADVP (RB sharply))) (. .))\n"
    )
    hyp = tmp_path / "hyp.txt"
    hyp.write_text(
        "(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX .))\n(S (XX x))\n(S (NP (XX Prices)) (VP (XX rose) (XX sharply)) (XX .))\n"
    )
    scored = subprocess.run(
        [PY, "-m", "attnlab", "evaluate", "--task", "parse", "--hyp", str(hyp), "--ref", str(gold), "--json"],
        capture_output=True,
        text=True,
    )
    assert scored.returncode == 0, scored.stderr
    import json

    report = json.loads(scored.stdout)
    # gold brackets: S, NP, VP | S, NP | S, NP, VP, ADVP = 9; predicted: 3 + 1 + 3 = 7; matched 3 + 1 + 3 = 7
    assert report["precision"] == pytest.approx(100.0) and report["recall"] == pytest.approx(700 / 9)
