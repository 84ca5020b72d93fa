"""Treebank reading, cleaning, linearisation round trips, repair of bad output, and EVALB-style F1."""

from __future__ import annotations

import random

import pytest

from attnlab import data
from attnlab.data import treebank
from attnlab.data.treebank import (
    Tree,
    bracket_f1,
    clean,
    delinearize,
    is_spelled,
    leaves,
    linearize,
    mask_pos,
    parse,
    read_trees,
    to_string,
    treebank_words,
)
from attnlab.errors import DataError


def _data_dir():
    try:
        return data.find_data_dir()
    except DataError:
        return None


DATA = _data_dir()
WSJ = DATA / "ptb_wsj_sample" / "mrg" if DATA else None
needs_wsj = pytest.mark.skipif(
    WSJ is None or not WSJ.is_dir(),
    reason="the WSJ sample is not there: set ATTNLAB_DATA or put the corpora in ../shared/data",
)


def tree(text: str) -> Tree:
    (only,) = parse(text)
    return only


# --- reading and cleaning ---------------------------------------------------------------------


def test_parse_removes_the_unlabelled_wrapper_and_reads_multiline_trees():
    text = "( (S\n    (NP-SBJ (NNP Ann) )\n    (VP (VBZ runs) )))\n( (NP (NN x) ))\n"
    first, second = parse(text)
    assert to_string(first) == "(S (NP-SBJ (NNP Ann)) (VP (VBZ runs)))"
    assert to_string(second) == "(NP (NN x))"


@pytest.mark.parametrize("bad", ["((S (NN x))", "(S (NN x)))", "word (S (NN x))"])
def test_unbalanced_treebank_text_is_a_data_error(bad):
    with pytest.raises(DataError, match="test.mrg"):
        parse(bad, "test.mrg")


def _depth(node: Tree) -> int:
    return 1 + max((_depth(c) for c in node.children if isinstance(c, Tree)), default=0)


def test_a_tree_past_the_depth_limit_is_one_line_naming_file_and_line():
    """500 levels were a RecursionError of ~3000 lines in `clean` (`evaluate --task parse`, `data
    prepare ptb`); a tree at the limit still goes through every recursive walk."""
    deep = "(S " * (treebank.MAX_DEPTH + 1) + "a" + ")" * (treebank.MAX_DEPTH + 1)
    with pytest.raises(DataError, match=r"^hyp\.txt:4: a tree nested deeper than 200 levels") as error:
        parse(deep, "hyp.txt:4")  # one line: the caller names it
    assert "\n" not in str(error.value)
    with pytest.raises(DataError, match=r"^wsj_0002\.mrg:3: a tree nested deeper than 200 levels"):
        parse("( (S (NN x) )\n)\n" + deep + "\n", "wsj_0002.mrg")  # a .mrg file: by line
    (limit,) = parse("(S " * (treebank.MAX_DEPTH - 1) + "(NN a)" + ")" * (treebank.MAX_DEPTH - 1))
    assert _depth(limit) == treebank.MAX_DEPTH and leaves(clean(limit)) == ["a"]
    assert bracket_f1([limit], [limit])["f1"] == 100 and parse(to_string(mask_pos(limit))) and linearize(limit)


def test_delinearize_skips_brackets_past_the_depth_limit():
    """A model's (or a linearised reference's) 500 open brackets rebuilt a tree that no walk could
    take; the brackets past the limit are skipped, with as many closing ones."""
    tokens = ["(S"] * 500 + ["(NP", "XX", ")NP"] + [")S"] * 500 + ["(VP", "XX", ")VP"]
    rebuilt = delinearize(tokens, ["a", "b"])
    assert leaves(rebuilt) == ["a", "b"] and _depth(rebuilt) == treebank.MAX_DEPTH
    assert parse(to_string(rebuilt)) and bracket_f1([rebuilt], [rebuilt])["f1"] == 100


def test_clean_strips_function_tags_and_empty_elements_but_keeps_brackets_tags():
    raw = tree(
        "( (S (NP-SBJ-1 (-NONE- *)) (VP (VBD said) (SBAR (-NONE- 0) (S (NP-SBJ=2 (PRP it)) "
        "(VP (VBZ works) (PRN (-LRB- -LRB-) (ADVP|PRT (RB so)) (-RRB- -RRB-)))))) (. .)) )"
    )
    assert to_string(clean(raw)) == (
        "(S (VP (VBD said) (SBAR (S (NP (PRP it)) (VP (VBZ works) (PRN (-LRB- -LRB-) (ADVP (RB so)) (-RRB- -RRB-)))))) (. .))"
    )


def test_spelled_trees_write_the_words():
    gold = clean(parse("(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))")[0])
    assert " ".join(linearize(gold, spelled=True)) == "(S (NP The dog )NP (VP barks )VP . )S"
    assert is_spelled("(S (NP The dog )NP )S") and not is_spelled("(S (NP XX XX )NP )S")
    # the leaves are the input's words, whatever the sequence says; extra leaves are dropped
    rebuilt = delinearize("(S (NP foo bar )NP baz qux )S", ["a", "b", "c"], spelled=True)
    assert to_string(rebuilt) == "(S (NP (XX a) (XX b)) (XX c))"


def test_linearize_follows_vinyals_and_kaiser():
    gold = tree("(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))")
    assert " ".join(linearize(gold)) == "(S (NP XX XX )NP (VP XX )VP XX )S"
    assert leaves(gold) == ["The", "dog", "barks", "."]
    assert to_string(mask_pos(gold)) == "(S (NP (XX The) (XX dog)) (VP (XX barks)) (XX .))"


@pytest.fixture(scope="module")
def wsj() -> list[Tree]:
    return list(treebank.read_trees(WSJ))


@needs_wsj
def test_every_wsj_tree_linearises_and_rebuilds_exactly(wsj):
    trees = wsj
    assert len(trees) == 3796
    for raw in trees:
        cleaned = clean(raw)
        assert delinearize(linearize(cleaned), leaves(cleaned)) == mask_pos(cleaned), to_string(cleaned)
    assert list(treebank.read_trees(WSJ.parent / "wsj_sample.trees")) == trees  # the one-per-line copy


# --- repairing model output ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "tokens, words, expected",
    [
        ("(S (NP XX XX )NP (VP XX", "a b c", "(S (NP (XX a) (XX b)) (VP (XX c)))"),  # brackets left open
        ("(S XX XX XX XX )S", "a b", "(S (XX a) (XX b))"),  # more XX than words
        ("(S (NP XX )NP )S", "a b c", "(S (NP (XX a)) (XX b) (XX c))"),  # fewer XX than words
        (")NP foo (S XX )VP )S", "a", "(S (XX a))"),  # stray close, unknown token, wrong label
        ("(NP XX )NP (VP XX )VP", "a b", "( (NP (XX a)) (VP (XX b)))"),  # several roots
        ("(S (NP )NP XX )S", "a", "(S (XX a))"),  # an empty constituent
        ("", "a b", "( (XX a) (XX b))"),  # nothing predicted
        ("(S XX )S", "", "( )"),  # no words
    ],
)
def test_delinearize_repairs_malformed_sequences(tokens, words, expected):
    assert to_string(delinearize(tokens, words.split())) == expected


def test_delinearize_never_crashes_and_always_covers_the_words():
    rng = random.Random(0)
    vocabulary = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX", "(", ")", "junk", ")XX"]
    for _ in range(2000):
        tokens = [rng.choice(vocabulary) for _ in range(rng.randrange(0, 30))]
        words = [f"w{i}" for i in range(rng.randrange(0, 12))]
        rebuilt = delinearize(tokens, words)
        assert leaves(rebuilt) == words
        assert parse(to_string(rebuilt)) or not words  # its string form reads back


# --- bracket F1 -----------------------------------------------------------------------------------

GOLD = "(S (NP (DT The) (NN dog)) (VP (VBZ barks) (PP (IN at) (NP (NNS cats)))) (. .))"  # S NP VP PP NP


def f1(gold: str, pred: str) -> dict[str, float]:
    return bracket_f1([tree(gold)], [tree(pred)])


def test_identical_trees_score_100():
    scores = f1(GOLD, "(S (NP (XX The) (XX dog)) (VP (XX barks) (PP (XX at) (NP (XX cats)))) (XX .))")
    assert (scores["precision"], scores["recall"], scores["f1"], scores["exact_match"]) == (100, 100, 100, 100)


def test_one_wrong_span_of_five():
    # VP(2,3) instead of VP(2,5): 4 of 5 brackets match on each side
    scores = f1(GOLD, "(S (NP (XX The) (XX dog)) (VP (XX barks)) (PP (XX at) (NP (XX cats))) (XX .))")
    assert (scores["matched"], scores["gold"], scores["predicted"]) == (4, 5, 5)
    assert scores["precision"] == pytest.approx(80) and scores["recall"] == pytest.approx(80)
    assert scores["f1"] == pytest.approx(80) and scores["exact_match"] == 0


def test_a_flat_prediction_has_full_precision_and_low_recall():
    scores = f1(GOLD, "(S (XX The) (XX dog) (XX barks) (XX at) (XX cats) (XX .))")
    assert scores["precision"] == pytest.approx(100) and scores["recall"] == pytest.approx(20)
    assert scores["f1"] == pytest.approx(2 * 100 * 20 / 120)


def test_scores_are_summed_over_the_corpus_before_dividing():
    golds = [tree(GOLD), tree(GOLD)]
    preds = [
        tree("(S (NP (XX The) (XX dog)) (VP (XX barks)) (PP (XX at) (NP (XX cats))) (XX .))"),
        tree("(S (XX The) (XX dog) (XX barks) (XX at) (XX cats) (XX .))"),
    ]
    scores = bracket_f1(golds, preds)  # matched 4 + 1, predicted 5 + 1, gold 5 + 5
    assert scores["precision"] == pytest.approx(500 / 6) and scores["recall"] == pytest.approx(50)
    assert scores["f1"] == pytest.approx(62.5)


def test_punctuation_is_left_out_of_spans():
    # the predicted VP also covers the final "."; with punctuation ignored both VPs span word 1 only
    scores = f1("(S (NP (NNP John)) (VP (VBD left)) (. .))", "(S (NP (XX John)) (VP (XX left) (XX .)))")
    assert scores["f1"] == pytest.approx(100)


def test_function_tags_are_stripped_and_prt_equals_advp():
    scores = f1("(S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up))))", "(S (NP (XX He)) (VP (XX gave) (ADVP (XX up))))")
    assert scores["f1"] == pytest.approx(100)


def test_the_root_wrapper_is_not_a_bracket():
    # repaired multi-root output: NP and VP match, the gold S is missed
    scores = f1("(S (NP (PRP He)) (VP (VBD left)))", "( (NP (XX He)) (VP (XX left)))")
    assert (scores["matched"], scores["gold"], scores["predicted"]) == (2, 3, 2)
    assert scores["f1"] == pytest.approx(80)


def test_gold_without_pos_tags_finds_punctuation_by_word():
    # gold rebuilt from prepared data (tags are XX): the "." is still left out of the spans
    gold = delinearize("(S (NP XX )NP (VP XX )VP XX )S", ["John", "left", "."])
    scores = bracket_f1([gold], [tree("(S (NP (XX John)) (VP (XX left) (XX .)))")])
    assert scores["f1"] == pytest.approx(100)


@needs_wsj
def test_punctuation_by_word_agrees_with_the_gold_tags_on_wsj(wsj):
    words = [(pt.label, pt.children[0]) for t in wsj for pt in treebank.preterminals(clean(t))]
    by_tag = [tag in treebank.PUNCTUATION_TAGS for tag, _ in words]
    by_word = [word in treebank.PUNCTUATION_WORDS for _, word in words]
    assert sum(by_tag) > 10000
    assert sum(a != b for a, b in zip(by_tag, by_word, strict=True)) <= 11  # 10 closing "'" and one "Wa"


def test_parse_tree_reads_one_tree_or_wraps_several():
    assert to_string(treebank.parse_tree("(S (NN x))")) == "(S (NN x))"
    assert to_string(treebank.parse_tree("(NP (XX a)) (VP (XX b))")) == "( (NP (XX a)) (VP (XX b)))"
    with pytest.raises(DataError, match="no tree"):
        treebank.parse_tree("  ")


def test_word_count_mismatch_is_skipped_as_evalb_does():
    scores = f1("(S (NP (PRP He)) (VP (VBD left)))", "(S (NP (XX He)))")
    assert scores["skipped"] == 1 and scores["sentences"] == 0 and scores["f1"] == 0
    with pytest.raises(DataError, match="1 gold trees but 0 predicted"):
        bracket_f1([tree(GOLD)], [])


# --- prepared parsing data ------------------------------------------------------------------------


@needs_wsj
def test_prepare_ptb_keeps_each_bracket_one_piece_and_the_split_documented(tmp_path):
    meta = data.prepare("ptb", tmp_path, data_dir=DATA, echo=lambda _: None)
    assert meta["task"] == "parse" and meta["split_files"]["test"] == "wsj_0180-wsj_0189"
    splits = meta["splits"]
    assert sum(s["pairs"] + s["dropped_long"] for s in splits.values()) == 3796
    test = data.ParallelData(tmp_path, "test")
    sp = data.load_tokenizer(tmp_path)
    assert meta["leaves"] == "words" and len(test) > 100  # the loop below checks every test pair
    for i in range(len(test)):
        target = test.tgt_text(i)
        pieces = [sp.id_to_piece(t) for t in test.tgt(i).tolist()]
        brackets = [t for t in target.split() if t[0] in "()"]
        assert [p[1:] for p in pieces if p[1:2] in ("(", ")")] == brackets  # one piece per bracket token
        assert sp.decode(test.tgt(i).tolist()) == target
        assert is_spelled(target)
        rebuilt = delinearize(target, test.src_text(i).split(), spelled=True)
        assert " ".join(linearize(rebuilt, spelled=True)) == target
        assert leaves(rebuilt) == test.src_text(i).split()


def test_prepare_ptb_names_the_file_and_line_of_a_tree_too_deep(tmp_path):
    """A .mrg tree 600 levels deep was a RecursionError of ~3000 lines."""
    mrg = tmp_path / "data" / "ptb_wsj_sample" / "mrg" / "wsj_0001.mrg"
    mrg.parent.mkdir(parents=True)
    mrg.write_text("( (S (NN x) )\n)\n( " + "(S " * 600 + "(NN a)" + ")" * 600 + " )\n")
    with pytest.raises(DataError, match=rf"^{mrg}:3: a tree nested deeper than 200 levels"):
        data.prepare("ptb", tmp_path / "out", data_dir=tmp_path / "data", vocab_size=1000, echo=lambda _: None)
    assert not (tmp_path / "out").exists()


@needs_wsj
def test_prepare_ptb_from_a_partial_treebank_names_the_missing_files(tmp_path):
    """Only wsj_0001-0009: the valid split (wsj_0170-0179) had 0 pairs and the run exit 0."""
    partial = tmp_path / "data" / "ptb_wsj_sample" / "mrg"
    partial.mkdir(parents=True)
    for number in range(1, 10):
        (partial / f"wsj_{number:04d}.mrg").write_bytes((WSJ / f"wsj_{number:04d}.mrg").read_bytes())
    with pytest.raises(
        DataError, match=rf"the valid split has no sentence pair .*wsj_0170\.mrg to wsj_0179\.mrg of {partial}"
    ):
        data.prepare("ptb", tmp_path / "out", data_dir=tmp_path / "data", vocab_size=1000, echo=lambda _: None)
    assert not (tmp_path / "out").exists()  # refused before anything was written


# --- a typed sentence as the Treebank's words -------------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("The dog barks loudly.", "The dog barks loudly ."),  # (a student's tree had the leaf "loudly.")
        ('He said "yes," quietly.', "He said `` yes , '' quietly ."),
        ("I didn't see John's (small) dog!", "I did n't see John 's ( small ) dog !"),
        ("Mr. Smith went to the U.S.", "Mr. Smith went to the U.S."),  # abbreviations keep their stop
        ("The old man saw the dog with a telescope .", "The old man saw the dog with a telescope ."),
    ],
)
def test_a_typed_sentence_is_read_as_treebank_words(typed: str, words: str) -> None:
    assert treebank_words(typed) == words.split()


@needs_wsj
def test_treebank_words_are_left_as_they_are() -> None:
    """Every sentence of the WSJ sample, as its leaves are written, is read word for word (the
    tokenizer would turn its '' into `` and cut again what is cut)."""
    sentences = [leaves(clean(t)) for t in read_trees(sorted(WSJ.rglob("*.mrg")))]
    assert len(sentences) > 3000
    changed = [words for words in sentences if treebank_words(" ".join(words)) != words]
    assert changed == [], changed[:3]
