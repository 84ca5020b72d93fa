"""Parsing (§6.3): constrained decoding always yields a tree over exactly the input's words."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import load_tokenizer
from attnlab.data.treebank import leaves, linearize, parse_tree
from attnlab.decode.constrain import TreeConstraint
from attnlab.decode.search import greedy_search
from attnlab.errors import ModelInputError
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer

PY = sys.executable


@pytest.fixture(scope="module", params=["words", "XX"])
def parser(request: pytest.FixtureRequest, data_dir: Path, tmp_path_factory) -> Path:
    """A random-weight parser, trees spelled out or with XX leaves: the constraint alone must
    make every output well formed."""
    from attnlab.cli import main

    prep = tmp_path_factory.mktemp("parse") / "prep"
    assert main(["data", "prepare", "ptb", "--out", str(prep), "--leaves", request.param]) == 0
    torch.manual_seed(5)
    model = Transformer(preset("tiny", vocab_size=load_tokenizer(prep).get_piece_size(), max_len=512))
    meta = {"task": "parse", "data": json.loads((prep / "meta.json").read_text())}
    return save_checkpoint(prep.parent / "ckpt", model, prep / "spm.model", meta=meta)


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
            produced = model.tokenizer.decode(model.tokenizer.piece_to_id(result.tokens[:-1])).split()
            spelled = [t for t in produced if not (len(t) > 1 and t[0] in "()")]
            assert spelled == (words if model.spelled else ["XX"] * len(words))  # the words, in order
    scored = model.score(result.source, result.text, record=False)  # a reference tree reads back as a tree
    assert scored.text == result.text and scored.tokens == result.tokens  # not the linearised (S (NP XX )NP ...)S


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


class Fixed:
    """A toy decoder that gives the same next-token distribution at every step."""

    def __init__(self, probs: dict[int, float], vocab: int) -> None:
        self.lprobs = torch.full((vocab,), float("-inf"))
        for token, p in probs.items():
            self.lprobs[token] = math.log(p)

    def start(self, rows: torch.Tensor) -> None:
        self.rows = len(rows)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lprobs.expand(tokens.size(0), -1).clone()

    def reorder(self, index: torch.Tensor) -> None:
        pass


def test_spelled_leaf_is_scored_by_the_mass_of_any_word() -> None:
    """Which word comes next is known; the model only decides whether a word comes. A model
    that expects some word (0.6 on "c") but gives the forced one ("a") little weight must still
    write it rather than open a bracket (0.3), and the forced pieces after the first cost nothing."""
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁XX", "▁(S", "▁)S", "▁(NP", "▁)NP", "▁a", "x", "▁c"]
    probs = {5: 0.04, 6: 0.005, 7: 0.3, 8: 0.005, 9: 0.03, 10: 0.01, 11: 0.6, 3: 0.01}
    words = [[[9, 10]]]  # one word, "ax", in two pieces
    stepper = TreeConstraint(Fixed(probs, len(pieces)), pieces, [1], [12], eos=3, words=words)
    (best,) = greedy_search(stepper, [12], bos=2, eos=3)
    assert [pieces[t] for t in best.tokens] == ["▁(NP", "▁a", "x", "▁)NP", "</s>"]
    any_word = math.log(0.03 + 0.01 + 0.6)
    assert best.step_logprobs[1:3] == pytest.approx([any_word, 0.0])


def test_parse_scores_are_the_models(parser: Path) -> None:
    """The constraint steers the search with scores of its own (a spelled word: any word's mass);
    a parse reports the model's log-probabilities, what `score` gives its tree, best first."""
    model = attnlab.load(parser)
    for sentence in ("The cat sat on the mat .", "Prices rose sharply ( again ) ."):
        result = model.parse(sentence, beam=3, max_len_b=30)
        assert [h.score for h in result.hypotheses] == sorted((h.score for h in result.hypotheses), reverse=True)
        for hyp in result.hypotheses:
            scored = model.score(sentence, hyp, record=False)
            assert scored.text == hyp.text
            assert hyp.score == pytest.approx(scored.score, abs=1e-5)
            assert hyp.logprob == pytest.approx(scored.logprob, abs=1e-5)
            assert hyp.token_logprobs == pytest.approx(scored.token_logprobs, abs=1e-5)
        assert result.score == result.hypotheses[0].score


def test_score_refuses_a_tree_over_other_words(parser: Path) -> None:
    """The words of another tree came back replaced by the source's: a tree never scored."""
    model = attnlab.load(parser)
    other = "(S (NP (DT A) (NN cat)) (VP (VBZ sleeps)))"
    same = "(S (NP (DT The) (NN dog)) (VP (VBZ runs)) (. .))"
    for tree, linear in ((other, False), (" ".join(linearize(parse_tree(other), model.spelled)), True)):
        with pytest.raises(ModelInputError, match="not a tree over the source's words"):
            model.score("The dog runs .", tree, record=False, target_is_linear=linear)
    with pytest.raises(ModelInputError, match="not a tree over the source's words"):
        model.score("The dog runs .", "(S (NP (DT The) (NN cat)) (VP (VBZ runs)) (. .))", record=False)
    assert model.score("The dog runs .", same, record=False).text == "(S (NP (XX The) (XX dog)) (VP (XX runs)) (XX .))"


def test_a_parse_without_room_for_its_tree_is_an_error(parser: Path) -> None:
    """The model could only end at once; `delinearize` then made up a tree over all the words."""
    model = attnlab.load(parser)
    with pytest.raises(ModelInputError, match="no tree over the input's 10 words fits"):
        model.parse("The old man saw the dog with a telescope .", max_len_a=0.0, max_len_b=3)
    with pytest.raises(ModelInputError, match="no tree over the input's 600 words fits"):
        model.parse(" ".join(["dog"] * 600), truncate=True)


def test_plain_parse_searches_as_the_paper(parser: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """§6.3 decodes by plain beam search; attnlab's constraint and reranking are its own, and
    `constrained=False` (`parse --plain`) lifts both: the plain search's best, read back as any
    output is. A translation has no constraint to lift."""
    from attnlab.cli import main
    from attnlab.decode.search import generate
    from attnlab.errors import ConfigError

    model = attnlab.load(parser)
    sentence = "Prices rose sharply and the market fell ."
    plain = model.parse(sentence, beam=3, max_len_b=30, constrained=False)
    src = torch.tensor([model.encode_source(sentence)[0]])
    best = generate(model.model, src, beam=3, alpha=0.3, max_len_b=30)[0][0]
    assert plain.tokens == [model.target_tokenizer.id_to_piece(i) for i in best.tokens]
    assert plain.tokens != model.parse(sentence, beam=3, max_len_b=30).tokens  # (random weights: it matters)
    (tmp_path / "in.txt").write_text(sentence + "\n")
    args = [
        "parse",
        "--checkpoint",
        str(parser),
        "--input",
        str(tmp_path / "in.txt"),
        "--beam",
        "3",
        "--max-len-b",
        "30",
    ]
    assert main([*args, "--plain"]) == 0 and capsys.readouterr().out == plain.text + "\n"
    with pytest.raises(ConfigError, match="^constrained=False is a parser's"):
        attnlab.load(Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de").translate(
            "x", constrained=False
        )
