"""Attention as word alignment: AER against hand-computed cases, Pharaoh files, pieces mapped to
words (Latin, Chinese without spaces, byte-fallback pieces, punctuation), attention aggregated to
word links, and `attnlab align` / `attnlab evaluate --task align` end to end on the bundled model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from attnlab.cli import main
from attnlab.data.tokenizer import join_words
from attnlab.decode.aer import aer, corpus_aer
from attnlab.decode.alignment import (
    align_lines,
    attention_rows,
    piece_words,
    score_words,
    trace_links,
    word_links,
    word_matrix,
)
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import read_pharaoh
from attnlab.decode.readings import best_method, candidates
from attnlab.errors import AttnlabError, DataError
from attnlab.record.trace import AttentionTrace

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "checkpoints" / "multi30k-en-de"
# made-up sentences (not from a corpus): English ||| German, words separated by spaces
PAIRS = [
    "a small dog runs across the green grass . ||| ein kleiner Hund rennt über das grüne Gras .",
    "two women drink coffee in a quiet café , laughing . ||| zwei Frauen trinken Kaffee in einem ruhigen Café , lachend .",
    "the boy throws a red ball ||| der Junge wirft einen roten Ball",
]


# -- AER ----------------------------------------------------------------------------------------
def test_aer_sure_only() -> None:
    r = aer({(0, 0), (1, 2)}, sure={(0, 0), (1, 1)}, possible=set())  # sure links count as possible
    assert (r["aer"], r["precision"], r["recall"]) == (0.5, 0.5, 0.5)  # 1 - (1 + 1) / (2 + 2)


def test_aer_possible_only() -> None:
    r = aer({(0, 0), (1, 2)}, sure=set(), possible={(0, 0), (1, 1)})
    assert (r["aer"], r["precision"], r["recall"]) == (0.5, 0.5, 1.0)  # 1 - (0 + 1) / (2 + 0)


def test_aer_sure_and_possible() -> None:
    r = aer({(0, 0), (1, 1), (2, 2)}, sure={(0, 0)}, possible={(1, 1), (1, 2)})
    assert r["aer"] == pytest.approx(0.25)  # 1 - (1 + 2) / (3 + 1)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == 1.0


def test_aer_empty_hypothesis_and_empty_gold() -> None:
    """Precision of no links is 0/0: None, not the 1.0 that `evaluate` printed as "precision 100.00"."""
    empty_hyp = aer(set(), sure={(0, 0)}, possible={(0, 0)})
    assert (empty_hyp["aer"], empty_hyp["precision"], empty_hyp["recall"]) == (1.0, None, 0.0)
    assert corpus_aer([set(), set()], [{(0, 0)}, set()], [set(), set()])["precision"] is None
    empty_gold = aer({(0, 0)}, sure=set(), possible=set())
    assert (empty_gold["aer"], empty_gold["precision"], empty_gold["recall"]) == (1.0, 0.0, 1.0)
    assert aer(set(), set(), set())["aer"] == 0.0
    assert aer({(0, 0)}, sure={(0, 0)}, possible=set())["aer"] == 0.0  # S ⊆ P enforced


def test_corpus_aer_sums_counts() -> None:
    r = corpus_aer(
        [{(0, 0), (1, 2)}, {(0, 0), (1, 1), (2, 2)}],
        [{(0, 0), (1, 1)}, {(0, 0)}],
        [set(), {(1, 1), (1, 2)}],
    )
    # |A| = 5, |S| = 3, |A∩S| = 2, |A∩P| = 3 -> 1 - 5/8 (not the mean of 0.5 and 0.25)
    assert r["aer"] == pytest.approx(0.375) and r["sentences"] == 2
    with pytest.raises(AttnlabError):
        corpus_aer([set()], [], [])


# -- Pharaoh -----------------------------------------------------------------------------------------
def test_read_pharaoh_one_indexed_and_reversed(tmp_path: Path) -> None:
    path = tmp_path / "gold"
    path.write_text("1-1 2p3 3?2\n\n3-2\n", encoding="utf-8")
    assert read_pharaoh(path, one_indexed=True) == [
        ({(0, 0)}, {(0, 0), (1, 2), (2, 1)}),
        (set(), set()),
        ({(2, 1)}, {(2, 1)}),
    ]
    assert read_pharaoh(["0-1 2p0"], reverse=True) == [({(1, 0)}, {(1, 0), (0, 2)})]
    with pytest.raises(AttnlabError, match="links:1: '0-x' is not a link"):
        read_pharaoh(["0-x"])
    for hansards in ("0001 1 1 S", "1 2 3 P", "12 4 5", "3 1 1 S 0.9"):  # one link a line: named as such
        with pytest.raises(AttnlabError, match=f"links:1: '{hansards}' is a link of the NAACL 2003 format"):
            read_pharaoh([hansards])
    with pytest.raises(AttnlabError, match="index 0"):
        read_pharaoh(["0-1"], one_indexed=True)


def test_links_are_checked_against_the_sentences_words(tmp_path: Path) -> None:
    """`99-99` on a short sentence, or 1-indexed gold read from 0, went unnoticed (a wrong AER)."""
    assert read_pharaoh(["0-0 2-1", "9-9"], lengths=[(3, 2), None]) == [
        ({(0, 0), (2, 1)}, {(0, 0), (2, 1)}),
        ({(9, 9)}, {(9, 9)}),  # a line whose pair could not be read is not checked
    ]
    with pytest.raises(AttnlabError, match=r"^gold:2: '99-99' points past the sentence pair's 3 and 2 words$"):
        read_pharaoh(["0-0", "1-1 99-99"], lengths=[(3, 2), (3, 2)], name="gold")
    asked = r"1-indexed, or are its sides swapped\? pass --gold-one-indexed; pass --reverse-gold$"  # (both fit)
    with pytest.raises(AttnlabError, match=r"links:1: '1-2' points past .* " + asked):
        read_pharaoh(["1-2"], lengths=[(3, 2)])
    assert read_pharaoh(["1-2"], one_indexed=True, lengths=[(3, 2)]) == [({(0, 1)}, {(0, 1)})]
    assert read_pharaoh(["1-2"], reverse=True, lengths=[(3, 2)]) == [({(2, 1)}, {(2, 1)})]  # checked after the swap
    with pytest.raises(AttnlabError, match="has 1 lines but there are 2 sentence pairs"):
        read_pharaoh(["0-0"], lengths=[(3, 2), (3, 2)])


# -- attention -> word links ---------------------------------------------------------------------------
def test_word_links_on_a_synthetic_map() -> None:
    # target pieces ▁ein ▁Hund chen </s> (rows) × source pieces ▁a ▁dog gy </s> (columns)
    weights = np.array([[0.6, 0.2, 0.1, 0.1], [0.1, 0.3, 0.4, 0.2], [0.3, 0.1, 0.5, 0.1], [0.0, 0.0, 0.0, 1.0]])
    src, tgt = [(0,), (1,), (1,), ()], [(0,), (1,), (1,), ()]
    # source pieces of a word summed, target pieces of a word averaged, </s> dropped
    np.testing.assert_allclose(word_matrix(weights, src, tgt), [[0.6, 0.3], [0.2, 0.65]])
    assert word_links(weights, src, tgt) == {(0, 0), (1, 1)}
    assert word_links(weights, src, tgt, "threshold", 0.25) == {(0, 0), (1, 0), (1, 1)}
    with pytest.raises(AttnlabError, match="shape"):
        word_links(weights[:3], src, tgt)


def test_methods_pick_the_right_rows() -> None:
    """Row t outputs target piece t; Shift-Att reads piece t at row t+1, where it is the input."""
    a, b = [0.9, 0.05, 0.05], [0.05, 0.9, 0.05]
    head0 = np.array([a, b, a])  # rows: step outputting x, y, </s>
    head1 = np.array([b, a, b])
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"cross": [np.stack([head0, head1])] * 2})
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "head", layer=0, head=0) == {(0, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "head", layer=1, head=1) == {(1, 0), (0, 1)}
    assert trace_links(trace, src, tgt, "shift", layer=0, head=0) == {(1, 0), (0, 1)}  # x at row 1, y at row 2
    assert trace_links(trace, src, tgt, "shift", layer=0, head=1) == {(0, 0), (1, 1)}


def test_rollout_reads_cross_attention_through_what_the_encoder_mixed() -> None:
    """Encoder position 0 attends to token b (and position 1 to itself), so half of what encoder
    output 0 holds is b. Target x attends 0.6 / 0.3 to outputs 0 and 1: raw, it aligns to a; read
    through the encoder's rollout ([0.6, 0.3, 0.1] · Ã = [0.3, 0.6, 0.1]), to b."""
    encoder = np.array([[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    cross = np.array([[[0.6, 0.3, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]])
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"encoder": [encoder], "cross": [cross]})
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "layer", layer=0) == {(0, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "rollout") == {(1, 0), (1, 1)}
    np.testing.assert_allclose(attention_rows(trace, "rollout", layer=0)[0][0], [0.3, 0.6, 0.1], rtol=1e-6)
    with pytest.raises(AttnlabError, match="no encoder attention"):  # the encoder's maps are needed
        trace_links(AttentionTrace(trace.src_tokens, trace.tgt_tokens, {"cross": [cross]}), src, tgt, "rollout")


def test_direct_reads_what_the_heads_wrote_not_where_they_looked() -> None:
    """Target x attends most to a, but what a's value wrote pushes against x and b's pushes for it:
    attention links x to a, the direct shares to b. Shares below 0 are dropped and each row sums
    to 1; `--layer` reads one layer's heads."""
    cross = np.array([[[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]])
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"cross": [cross, cross]})
    shares = np.zeros((2, 2, 3, 3))  # (layers, heads, target, source)
    shares[1, 0, 0] = [-2.0, 1.0, 0.5]  # x: a against it, b for it
    shares[1, 1, 0] = [0.0, 2.0, 0.5]
    shares[0, 0, 0] = [3.0, 0.0, 0.0]  # layer 0 alone would say a
    shares[:, :, 1] = [0.0, 1.0, 0.0]
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "layer", layer=1) == {(0, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "direct", shares=shares) == {(1, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "direct", layer=0, shares=shares) == {(0, 0), (1, 1)}
    rows, offset = attention_rows(trace, "direct", layer=-1, shares=shares)
    np.testing.assert_allclose(rows[0], [0.0, 3.0 / 4.0, 1.0 / 4.0])
    assert offset == 0
    assert (attention_rows(trace, "direct", layer=0, shares=shares)[0][2] == 0).all()  # none above 0: a row of 0
    with pytest.raises(AttnlabError, match="^--method direct reads the model as well as the trace"):
        trace_links(trace, src, tgt, "direct")


def test_norm_reads_what_the_heads_move_not_how_much_they_look() -> None:
    """Target x attends most to a, but a's value vector is short and b's long: the weights link x
    to a, ‖Σ_h α f(x)‖ (Kobayashi et al. 2020) to b; each row sums to 1; `--layer` reads one layer."""
    cross = np.array([[[0.6, 0.3, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]])
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"cross": [cross, cross]})
    moved = cross[0] * np.array([0.1, 1.0, 1.0])  # (what the layer moves from each key: a's is short)
    norms = {0: cross[0], 1: moved}
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "layer", layer=1) == {(0, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "norm", norms=norms) == {(1, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "norm", layer=0, norms=norms) == {(0, 0), (1, 1)}
    rows, offset = attention_rows(trace, "norm", norms=norms)
    np.testing.assert_allclose(rows.sum(1), 1.0) and np.testing.assert_allclose(rows[0], moved[0] / moved[0].sum())
    assert offset == 0
    with pytest.raises(AttnlabError, match="^--method norm reads the model as well as the trace"):
        trace_links(trace, src, tgt, "norm")


def test_a_layers_norms_are_what_its_heads_move_together() -> None:
    """`layer_norms` is ‖Σ_h α_ij f_h(x_j)‖ from the model's own vectors, and `align --method norm`
    reads it."""
    from attnlab.record.norms import layer_norms, written

    model = load(CKPT)
    trace = model.score("A dog runs in the park .", "Ein Hund rennt im Park .", record=True).trace
    found, vectors = layer_norms(model, trace), written(model, trace)
    assert sorted(found) == trace.layers["cross"]
    for layer, moved in found.items():
        alpha = trace.attention("cross", layer)  # (heads, queries, keys)
        expected = np.linalg.norm(np.einsum("hqk,hkd->qkd", alpha, vectors[("cross", layer)].numpy()), axis=-1)
        np.testing.assert_allclose(moved, expected, rtol=1e-4, atol=1e-5)
    assert not np.allclose(found[0] / found[0].sum(1, keepdims=True), trace.attention("cross", 0).mean(0), atol=0.01)


# -- pieces -> words ----------------------------------------------------------------------------------------
def _pieces(sp: spm.SentencePieceProcessor, text: str) -> list[str]:
    return [sp.id_to_piece(i) for i in sp.encode(text)] + ["</s>"]


def test_piece_words_latin_and_punctuation() -> None:
    sp = spm.SentencePieceProcessor(model_file=str(CKPT / "spm.model"))
    words = ["a", "man", ",", "in", "a", "red", "hat", ",", "sells", "ice-cream", "."]
    pieces = _pieces(sp, " ".join(words))
    assert pieces[:4] == ["▁a", "▁man", "▁", ","]  # a lone "▁" before the comma
    got = dict(enumerate(piece_words(pieces, words)))
    assert [got[i] for i in range(len(pieces))] == [(w,) for w in (0, 1, 2, 2, 3, 4, 5, 6, 7, 7, 8, 9, 9, 9, 9, 10)] + [
        ()
    ]
    # the same words glued to the punctuation in the text the model read
    pieces = _pieces(sp, "a man, in a red hat, sells ice-cream.")
    assert piece_words(pieces, words)[pieces.index(",")] == (2,)


def test_piece_words_byte_fallback() -> None:
    sp = spm.SentencePieceProcessor(model_file=str(CKPT / "spm.model"))  # English/German: no CJK pieces
    words = ["Der", "Mann", "食べ", "🦜", "."]
    pieces = _pieces(sp, " ".join(words))
    assert sum(p.startswith("<0x") for p in pieces) == 10  # 食, べ: 3 bytes each; 🦜: 4
    mapped = piece_words(pieces, words)
    for piece, word in zip(pieces, mapped, strict=True):
        if piece.startswith("<0x"):
            assert word in ((2,), (3,))
    assert mapped == [(w,) for w in (0, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4)] + [()]


@pytest.fixture(scope="module")
def chinese_spm(tmp_path_factory: pytest.TempPathFactory) -> spm.SentencePieceProcessor:
    """A tiny Chinese BPE with byte fallback and no dummy prefix, as attnlab trains them."""
    lines = [
        "我喜欢喝绿茶。",
        "他们在公园里散步。",
        "我的朋友喜欢读书。",
        "今天天气很好，我们去公园吧。",
        "她喝了一杯热茶。",
    ] * 20
    prefix = tmp_path_factory.mktemp("spm") / "zh"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=320,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        add_dummy_prefix=False,
        normalization_rule_name="identity",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=f"{prefix}.model")


def test_piece_words_chinese_without_spaces(chinese_spm: spm.SentencePieceProcessor) -> None:
    words = ["我们", "喜欢", "在", "公园", "里", "喝", "绿茶", "，", "鳄鱼", "也", "喜欢", "。"]  # 鳄鱼也: never seen
    text = "".join(words)  # the model reads Chinese without spaces; the words' bounds come from the gold
    ids = chinese_spm.encode(text)
    pieces = [chinese_spm.id_to_piece(i) for i in ids] + ["</s>"]
    mapped = piece_words(pieces, words)
    starts = np.cumsum([0] + [len(w) for w in words])
    offset = 0
    for k, piece in enumerate(pieces[:-1]):
        if not piece.startswith("<0x") or int(piece[3:5], 16) >= 0xC0:  # a whole piece, or a character's first byte
            offset = len(chinese_spm.decode(ids[:k]))  # characters before this piece
        last = offset if piece.startswith("<0x") else len(chinese_spm.decode(ids[: k + 1])) - 1
        # a piece spells the words from its first character's to its last's ("公园里": 公园 and 里)
        first_word, last_word = (int(np.searchsorted(starts, char, side="right") - 1) for char in (offset, last))
        assert mapped[k] == tuple(range(first_word, last_word + 1)), (k, piece)
    assert any(len(spelled) > 1 for spelled in mapped)  # the case above is met
    assert sum(p.startswith("<0x") for p in pieces) == 9 and mapped[-1] == ()
    assert mapped[pieces.index("<0xE9>")] == (words.index("鳄鱼"),)


def test_chinese_words_are_read_as_running_text() -> None:
    """The gold's words are joined as a Chinese writer spells them before the model reads them:
    no space beside a Chinese character or punctuation, one between two Latin words or numbers
    (joined with no space at all, the index "cac 40" was read as one word "cac40")."""
    words = ["道琼斯", "指数", "和", "cac", "40", "上涨", "7.7%", ",", "好", "。"]
    assert join_words(words, "zh") == "道琼斯指数和cac 40上涨7.7%,好。"
    assert join_words(["the", "cac", "40", "."], "en") == "the cac 40 ."
    checkpoint = ROOT / "checkpoints" / "tatoeba-en-zh"
    if (checkpoint / "manifest.json").is_file():
        result, _, tgt_words = score_words(load(checkpoint), ["the", "cac", "40"], words)
        assert result.text == "道琼斯指数和cac 40上涨7.7%,好。" and tgt_words[-2:] == [(9,), ()]  # 。, </s>


def test_a_word_inside_another_words_piece_shares_its_attention() -> None:
    """ "我 爱 你 。" read unspaced is the pieces 我爱 你 。: 爱 has no piece of its own, and was
    linked to source word 0 (the argmax of an all-zero row) whatever the attention said. The
    piece's row is the model's only reading of 爱, so it counts for both words; a word that no
    piece spells at all (cut off with the input) gets no link."""
    words = ["我", "爱", "你", "。"]
    tgt = piece_words(["我爱", "你", "。", "</s>"], words)
    assert tgt == [(0, 1), (2,), (3,), ()]
    src = [(0,), (1,), (2,), (3,), ()]  # I love you . </s>
    weights = np.full((4, 5), 0.05)  # rows 我爱 你 。 </s>, most attention on one source word each
    weights[[0, 1, 2, 3], [1, 2, 3, 4]] = 0.8
    np.testing.assert_allclose(word_matrix(weights, src, tgt)[1], word_matrix(weights, src, tgt)[0])
    assert word_links(weights, src, tgt) == {(1, 0), (1, 1), (2, 2), (3, 3)}
    assert word_links(weights, src, tgt, "threshold", 0.5) == {(1, 0), (1, 1), (2, 2), (3, 3)}
    unread = [(0,), (2,), (3,), ()]  # 爱 spelled by no piece
    assert word_links(weights, src, unread) == {(1, 0), (2, 2), (3, 3)}
    assert word_links(weights, src, unread, "threshold", 0.0) == {(s, t) for s in range(4) for t in (0, 2, 3)}


@pytest.mark.parametrize("bad", [float("nan"), 2.0, -0.1, "0.1", None])
def test_word_links_refuses_a_threshold_outside_zero_to_one(bad: object) -> None:
    """A word's attention lies in [0, 1]: `word_links(..., "threshold", nan)` (or 2.0) returned
    no links without a word; only `align_lines` checked. Argmax reads no threshold."""
    weights, src, tgt = np.full((2, 2), 0.5), [(0,), (1,)], [(0,), (1,)]
    with pytest.raises(AttnlabError, match=r"is a share of a word's attention, in \[0, 1\]; got "):
        word_links(weights, src, tgt, "threshold", bad)
    assert (
        word_links(weights, src, tgt, "threshold", 1) == set()
        and len(word_links(weights, src, tgt, "argmax", bad)) == 2
    )


# -- commands -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("align") / "pairs.txt"
    path.write_text("".join(p + "\n" for p in PAIRS), encoding="utf-8")
    return path


def _align(capsys: pytest.CaptureFixture, *args: str) -> list[set[tuple[int, int]]]:
    assert main(["align", "--checkpoint", str(CKPT), *args]) == 0
    return [p for _, p in read_pharaoh(capsys.readouterr().out.splitlines())]


@pytest.mark.parametrize(
    "options",
    [
        ["--method", "head", "--layer", "1", "--head", "2"],
        ["--method", "layer"],
        ["--method", "all"],
        ["--method", "shift"],
        ["--method", "rollout"],
        ["--method", "rollout", "--layer", "0"],
        ["--method", "direct"],
        ["--method", "direct", "--layer", "-1"],
        [],
    ],
)
def test_align_every_method(capsys: pytest.CaptureFixture, pairs_file: Path, options: list[str]) -> None:
    found = _align(capsys, "--input", str(pairs_file), *options)
    assert len(found) == len(PAIRS)
    for links, pair in zip(found, PAIRS, strict=True):
        src, tgt = (side.split() for side in pair.split("|||"))
        assert sorted({j for _, j in links}) == list(range(len(tgt)))  # argmax: each target word once
        assert len(links) == len(tgt) and all(0 <= i < len(src) for i, _ in links)
    if options == []:  # no method named and no meta.alignment in the bundled card: the all-layer average
        assert found == _align(capsys, "--input", str(pairs_file), "--method", "all")


def test_align_names_a_head_counted_from_the_last_as_the_model_counts_it(
    capsys: pytest.CaptureFixture, pairs_file: Path
) -> None:
    """`--layer -1 --head -1` reads L2 H3 of the bundled model and says so (it said "L-1 H-1")."""
    said = {}
    for layer, head in (("-1", "-1"), ("2", "3")):
        assert (
            main(["align", "--checkpoint", str(CKPT), "--input", str(pairs_file), "--layer", layer, "--head", head])
            == 0
        )
        out, err = capsys.readouterr()
        said[layer] = (out, re.search(r"\((.*), argmax\)", err).group(1))
    assert said["-1"] == said["2"] and said["2"][1] == "head L2 H3"


def test_align_reversed_input_keeps_the_files_order(
    capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path
) -> None:
    swapped = tmp_path / "de-en.txt"
    swapped.write_text("".join(" ||| ".join(reversed(p.split(" ||| "))) + "\n" for p in PAIRS), encoding="utf-8")
    forward = _align(capsys, "--input", str(pairs_file))
    backward = _align(capsys, "--input", str(swapped), "--reverse-input")
    assert backward == [{(j, i) for i, j in links} for links in forward]


def test_align_threshold_and_errors(capsys: pytest.CaptureFixture, pairs_file: Path) -> None:
    loose = _align(capsys, "--input", str(pairs_file), "--links", "threshold", "--threshold", "0.0")
    assert all(
        len(links) == len(p.split("|||")[0].split()) * len(p.split("|||")[1].split())
        for links, p in zip(loose, PAIRS, strict=True)
    )
    assert main(["align", "--checkpoint", str(CKPT), "--input", str(pairs_file), "--method", "head"]) == 2
    assert "needs --layer and --head" in capsys.readouterr().err
    for bad in ("1.5", "nan", "-0.1"):  # 1.5 and nan once wrote no link at all, -0.1 every link, silently
        args = ["align", "--checkpoint", str(CKPT), "--input", str(pairs_file), "--links", "threshold"]
        assert main([*args, "--threshold", bad]) == 2
        assert "--threshold is a share of a word's attention" in capsys.readouterr().err
    # a --threshold alone means --links threshold (it was ignored: argmax links came out)
    assert _align(capsys, "--input", str(pairs_file), "--threshold", "0.0") == loose
    assert (
        main(
            ["align", "--checkpoint", str(CKPT), "--input", str(pairs_file), "--links", "argmax", "--threshold", "0.2"]
        )
        == 2
    )
    assert "--threshold is for --links threshold" in capsys.readouterr().err


def test_align_lines_takes_a_list_of_lines_only() -> None:
    """A string was read a character a line, and a None line was an AttributeError."""
    model = load(CKPT)
    with pytest.raises(DataError, match=r"^expected a list of `source \|\|\| target` lines, got str$"):
        align_lines(model, PAIRS[0])
    with pytest.raises(DataError, match=r"^`source \|\|\| target` line 2 is not text \(got NoneType\)$"):
        align_lines(model, [PAIRS[0], None])


def test_best_method_from_the_model_card() -> None:
    assert best_method({"alignment": {"method": "head", "layer": 2, "head": 1}}) == {
        "method": "head",
        "layer": 2,
        "head": 1,
    }
    assert best_method({"alignment": {"method": "layer", "layer": 1, "head": 3}})["head"] is None
    assert best_method({}) == {"method": "all", "layer": None, "head": None}
    with pytest.raises(AttnlabError, match=r"^the card's meta.alignment reads a head but names no layer and head"):
        best_method({"alignment": {"method": "head", "layer": 2}})  # was "--method head needs --layer and --head"
    for saved in ("head", ["head", 2, 1], {"method": "bogus"}, {"layer": 2}):  # each was read as no card: `all`
        with pytest.raises(AttnlabError, match=r"^the card's meta.alignment (is|method) "):
            best_method({"alignment": saved})
    config = load(CKPT).config  # 3 layers of 4 heads
    saved = {"method": "layer", "layer": 1, "links": "threshold", "threshold": 0.3}
    assert best_method({"alignment": saved}) == {"method": "layer", "layer": 1, "head": None, **saved}
    for bad, said in (({"links": "bogus"}, "links 'bogus' is not"), ({"links": "threshold"}, "threshold None is not")):
        with pytest.raises(AttnlabError, match=rf"^the card's meta.alignment {said}"):
            best_method({"alignment": {"method": "all", **bad}})
    counted = best_method({"alignment": {"method": "head", "layer": -3, "head": -1}}, config)
    assert (counted["layer"], counted["head"]) == (0, 3)  # counted from 0, as views and reports name them
    with pytest.raises(AttnlabError, match=r"^the card's meta.alignment head -5: the model has 4 heads a layer"):
        best_method({"alignment": {"method": "head", "layer": 0, "head": -5}}, config)
    assert (
        len(candidates(3, 4)) == 3 * 4 + 3 + 1 + 3 + 1 + 3 + 3 + 1 + 3 + 1
    )  # heads, layers, all, shift per layer and all, rollouts, direct per layer and all, norms, saliency


def test_a_bad_meta_alignment_is_one_line_naming_the_card(
    capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A card's reading that is none of the model's was misreported or ignored: layer 9 was "layer 9
    of cross attention was not recorded" once the model had run, `"head"` or `{"method": "bogus"}`
    read as no card (the all-layer links came out, exit 0), and SmoothGrad's -5 copies "samples is
    ..." naming no source. Each is now one line naming CKPT/config.json before any line is decoded."""
    import shutil

    from attnlab.model.checkpoint import update_meta

    checkpoint = tmp_path / "model"
    shutil.copytree(CKPT, checkpoint, ignore=shutil.ignore_patterns("probes"))

    def decoded(*_: object) -> None:
        raise AssertionError("a line was decoded before the card's reading was checked")

    monkeypatch.setattr("attnlab.decode.alignment.score_words", decoded)
    card = f"{checkpoint}/config.json: meta.alignment"
    for saved, said in (
        ({"method": "head", "layer": 9, "head": 0}, "layer 9: the model has 3 decoder layers (0 to 2, or -3 to -1"),
        ({"method": "head", "layer": 0, "head": 4}, "head 4: the model has 4 heads a layer (0 to 3, or -4 to -1"),
        ({"method": "layer", "layer": "2"}, "layer '2': the model has 3 decoder layers"),
        ({"method": "bogus"}, "method 'bogus' is not one of head, layer, all, shift, rollout, direct, norm, saliency"),
        ("head", 'is \'head\', not a mapping such as {"method": "head", "layer": 2, "head": 3}'),
        ({"method": "head", "layer": 1}, "reads a head but names no layer and head: give --method"),
        ({"method": "saliency", "samples": -5}, "samples is a whole number of noisy copies in [0, 1000], got -5"),
    ):
        update_meta(checkpoint, alignment=saved)
        assert main(["align", "--checkpoint", str(checkpoint), "--input", str(pairs_file)]) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"attnlab align: error: {card} {said}") and "\n" not in error, error
    update_meta(checkpoint, alignment={"method": "head", "layer": 9, "head": 0})
    with pytest.raises(AttnlabError, match=rf"^{checkpoint}/config.json: meta.alignment layer 9: the model has 3"):
        align_lines(load(checkpoint), PAIRS[:1])  # the API reads the card as `align` does


def test_evaluate_align_hand_computed(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    gold, hyp, rgold = tmp_path / "gold", tmp_path / "hyp", tmp_path / "rgold"
    gold.write_text("1-1 2p2 3-3\n1-2\n", encoding="utf-8")  # 1-indexed; S = {00, 22}, {01}; P adds 11
    rgold.write_text("1-1 2p2 3-3\n2-1\n", encoding="utf-8")  # the same, written target-source
    hyp.write_text("0-0 1-1 2-1\n\n", encoding="utf-8")
    # |A| = 3, |S| = 3, |A∩S| = 1 (00), |A∩P| = 2 (00, 11): AER = 1 - 3/6, P = 2/3, R = 1/3
    base = ["evaluate", "--task", "align", "--hyp", str(hyp), "--gold-one-indexed"]
    assert main([*base, "--gold", str(gold), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["aer"] == pytest.approx(0.5) and report["precision"] == pytest.approx(2 / 3)
    assert report["recall"] == pytest.approx(1 / 3)
    assert main([*base, "--gold", str(rgold), "--reverse-gold", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["aer"] == pytest.approx(0.5)
    assert main([*base, "--gold", str(gold)]) == 0
    assert "AER = 50.00" in capsys.readouterr().out


def test_evaluate_align_checks_the_gold_against_input(
    capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path
) -> None:
    """With --input the gold's links must fit its sentences: 1-indexed gold read as 0-indexed is
    one line naming FILE:LINE and the flag it lacks (the real shared sets pass: `test_bundled_...`)."""
    gold, hyp = tmp_path / "gold", tmp_path / "hyp"
    lengths = [len(side.split()) for p in PAIRS for side in p.split("|||")][1::2]  # target words
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(1, n + 1)) + "\n" for n in lengths))  # 1-indexed
    hyp.write_text("0-0\n" * len(PAIRS))
    base = ["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(hyp)]
    assert main([*base, "--input", str(pairs_file)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"attnlab evaluate: error: {gold}:1: '9-9' points past") and "\n" not in error
    assert error.endswith("pass --gold-one-indexed")
    assert main([*base, "--input", str(pairs_file), "--gold-one-indexed", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == len(PAIRS)


def test_align_out_is_checked_before_the_model_is_read(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """--out in a missing directory was a FileNotFoundError after aligning every line."""
    args = ["align", "--checkpoint", str(tmp_path / "no-checkpoint"), "--input", str(tmp_path / "pairs")]
    assert main([*args, "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a directory" in capsys.readouterr().err


def test_evaluate_all_heads_table(capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path) -> None:
    hyp, gold = tmp_path / "hyp", tmp_path / "gold"
    assert main(["align", "--checkpoint", str(CKPT), "--input", str(pairs_file), "--out", str(hyp)]) == 0
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(len(p.split("|||")[1].split()))) + "\n" for p in PAIRS))
    assert main(["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(hyp), "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)["aer"]
    args = ["evaluate", "--task", "align", "--gold", str(gold), "--all-heads", "--checkpoint", str(CKPT)]
    assert main([*args, "--input", str(pairs_file)]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| ") and "reading" not in line]
    assert out.rstrip().endswith("same relative position: AER 0.0")  # this gold is the diagonal
    assert len(table) == 3 * 4 + 3 + 1 + 3 + 1 + 3 + 3 + 1 + 3 + 1  # the bundled model: 3 layers × 4 heads
    aers = [float(line.split("|")[2]) for line in table]
    assert aers == sorted(aers)
    assert next(float(line.split("|")[2]) for line in table if line.startswith("| all |")) == pytest.approx(
        100 * direct, abs=0.05
    )


def test_all_heads_table_says_precision_of_no_links_is_undefined(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """A reading that links nothing (no word holds all of a word's attention at --threshold 1) has
    precision 0/0: its table row says n/a, not 100.0 (and not a TypeError from None)."""
    pairs, gold = tmp_path / "pairs", tmp_path / "gold"
    pairs.write_text(PAIRS[2] + "\n", encoding="utf-8")
    gold.write_text("0-0 1-1 2-2\n", encoding="utf-8")
    args = ["evaluate", "--task", "align", "--gold", str(gold), "--all-heads", "--checkpoint", str(CKPT)]
    assert main([*args, "--input", str(pairs), "--links", "threshold", "--threshold", "1.0"]) == 0
    assert "| head L0 H0 | 100.0 | n/a (no links) | 0.0 |" in capsys.readouterr().out.splitlines()


def test_save_best_names_the_default_reading(capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path) -> None:
    """`--save-best` writes the best reading into the checkpoint's meta (its manifest still
    verifies), and `attnlab align` without --method then reads alignment that way."""
    import shutil

    from attnlab.model.checkpoint import read_config, verify

    checkpoint, gold = tmp_path / "model", tmp_path / "gold"
    shutil.copytree(CKPT, checkpoint, ignore=shutil.ignore_patterns("probes"))
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(len(p.split("|||")[1].split()))) + "\n" for p in PAIRS))
    args = ["evaluate", "--task", "align", "--gold", str(gold), "--all-heads", "--checkpoint", str(checkpoint)]
    assert main([*args, "--input", str(pairs_file), "--save-best", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)[0]
    verify(checkpoint)  # config.json changed, and the manifest with it
    saved = read_config(checkpoint)[1]["alignment"]
    assert {k: saved[k] for k in ("method", "layer", "head", "aer")} == {
        k: best[k] for k in ("method", "layer", "head", "aer")
    }
    assert saved["gold"] == "gold" and saved["pairs"] == len(PAIRS)
    by_default = _align_with(capsys, checkpoint, "--input", str(pairs_file))
    named = [f"--layer={best['layer']}"] if best["layer"] is not None else []
    named += [f"--head={best['head']}"] if best["head"] is not None else []
    assert by_default == _align_with(capsys, checkpoint, "--input", str(pairs_file), "--method", best["method"], *named)

    # The best reading under threshold links is read with them (it was read with argmax, another AER).
    assert main([*args, "--input", str(pairs_file), "--save-best", "--json", "--threshold", "0.3"]) == 0
    best = json.loads(capsys.readouterr().out)[0]
    saved = read_config(checkpoint)[1]["alignment"]
    assert (saved["links"], saved["threshold"], saved["aer"]) == ("threshold", 0.3, best["aer"])
    named = [f"--layer={best['layer']}"] if best["layer"] is not None else []
    named += [f"--head={best['head']}"] if best["head"] is not None else []
    rule = ["--links", "threshold", "--threshold", "0.3"]
    by_default = _align_with(capsys, checkpoint, "--input", str(pairs_file))
    explicit = _align_with(capsys, checkpoint, "--input", str(pairs_file), "--method", best["method"], *named, *rule)
    argmax = _align_with(capsys, checkpoint, "--input", str(pairs_file), "--links", "argmax")
    assert by_default == explicit != argmax
    hyp = tmp_path / "hyp"
    hyp.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(links)) + "\n" for links in by_default))
    assert main(["evaluate", "--task", "align", "--gold", str(gold), "--hyp", str(hyp), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["aer"] == pytest.approx(saved["aer"], abs=1e-12)


def test_lines_the_model_cannot_read_are_not_a_table_nor_a_saved_reading(
    capsys: pytest.CaptureFixture, tmp_path: Path, pairs_file: Path
) -> None:
    """Tab-separated pairs were every line "scored as no links", a table of AER 100 and exit 0,
    and --save-best then replaced the card's reading with head L0 H0 at AER 100."""
    import shutil

    from attnlab.model.checkpoint import read_config

    checkpoint, gold, tabbed = tmp_path / "model", tmp_path / "gold", tmp_path / "tabbed"
    shutil.copytree(CKPT, checkpoint, ignore=shutil.ignore_patterns("probes"))
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(len(p.split("|||")[1].split()))) + "\n" for p in PAIRS))
    tabbed.write_text("".join(p.replace(" ||| ", "\t") + "\n" for p in PAIRS), encoding="utf-8")
    args = ["evaluate", "--task", "align", "--gold", str(gold), "--all-heads", "--checkpoint", str(checkpoint)]
    assert main([*args, "--input", str(tabbed), "--save-best"]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith(
        f"attnlab evaluate: error: {tabbed}: no line is a pair the model can read (line 1: "
    )
    assert "alignment" not in read_config(checkpoint)[1]
    lines = pairs_file.read_text(encoding="utf-8").splitlines()
    partly = tmp_path / "partly"
    partly.write_text("\n".join([lines[0].replace(" ||| ", "\t"), *lines[1:]]) + "\n", encoding="utf-8")
    assert main([*args, "--input", str(partly), "--save-best"]) == 1  # a table, as `align` does: status 1
    said = capsys.readouterr()
    assert "line 1: " in said.err and f"--save-best: 1 of {len(lines)} lines not read; nothing written" in said.err
    assert said.out.startswith("| reading | AER |") and "alignment" not in read_config(checkpoint)[1]


def _align_with(capsys: pytest.CaptureFixture, checkpoint: Path, *args: str) -> list[set[tuple[int, int]]]:
    assert main(["align", "--checkpoint", str(checkpoint), *args]) == 0
    return [p for _, p in read_pharaoh(capsys.readouterr().out.splitlines())]


@pytest.mark.slow
def test_bundled_chinese_translator_reproduces_its_cards_aer(
    capsys: pytest.CaptureFixture, tmp_path: Path, data_dir: Path
) -> None:
    """`attnlab align` on the bundled EN→ZH model over the Zh-En gold, with no method given
    (so the reading its card names), scores the AER the card and its README state."""
    from attnlab.decode.readings import reading_name
    from attnlab.model.checkpoint import read_config

    checkpoint = ROOT / "checkpoints" / "tatoeba-en-zh"
    pairs, gold = data_dir / "alignment" / "zhen_dev.src-tgt", data_dir / "alignment" / "zhen_dev.gold"
    if not (checkpoint / "manifest.json").is_file() or not gold.is_file():
        pytest.skip("needs the bundled tatoeba-en-zh and ../shared/data/alignment")
    card = read_config(checkpoint)[1]["alignment"]
    assert card["gold"] == "zhen_dev.gold" and card["pairs"] == 225
    hyp = tmp_path / "zhen.links"
    assert (
        main(["align", "--checkpoint", str(checkpoint), "--input", str(pairs), "--reverse-input", "--out", str(hyp)])
        == 0
    )
    assert reading_name(best_method(read_config(checkpoint)[1])) in capsys.readouterr().err
    assert (
        main(["evaluate", "--task", "align", "--hyp", str(hyp), "--gold", str(gold), "--gold-one-indexed", "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["aer"] == pytest.approx(card["aer"], abs=1e-9) and report["sentences"] == 225
    readme = (checkpoint / "README.md").read_text(encoding="utf-8")
    assert f"| {reading_name(best_method(read_config(checkpoint)[1]))} | {100 * card['aer']:.1f} |" in readme


def test_head_readings_name_the_models_heads() -> None:
    """With a trace of heads 2 and 3, head=0 silently read head 2 and head=2 was refused; a
    float head was numpy's IndexError."""
    a, b = [0.9, 0.05, 0.05], [0.05, 0.9, 0.05]
    head2, head3 = np.array([a, b, a]), np.array([b, a, b])
    maps = {"cross": [np.stack([head2, head3])] * 2}
    trace = AttentionTrace(
        ["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], maps, heads=[2, 3], model={"config": {"n_heads": 4}}
    )
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "head", layer=0, head=2) == {(0, 0), (1, 1)}
    assert trace_links(trace, src, tgt, "head", layer=1, head=np.int64(3)) == {(1, 0), (0, 1)}
    assert trace_links(trace, src, tgt, "shift", layer=0, head=-1) == {(0, 0), (1, 1)}  # -1: the model's head 3
    for layer, head, match in (
        (0, 0, "head 0 does not exist in this trace: it holds heads 2, 3"),
        (1, 1.0, "head 1.0 does not exist"),
        (1.0, 2, "a layer is a whole number, got 1.0"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            trace_links(trace, src, tgt, "head", layer=layer, head=head)
        assert "\n" not in str(info.value)


def test_aer_refuses_what_is_not_links() -> None:
    """`aer(None, [], [])` was a TypeError from inside `set`; `corpus_aer(None, ...)` one from len()."""
    for args, match in (
        ((None, [], []), "the hypothesis links are .* got NoneType"),
        (([(0, 1)], "0-1", []), "the sure links are .* got str"),
        (([(0, 1)], [], [(0, 1, 2)]), r"a possible link is a \(source_word, target_word\) pair .* got \(0, 1, 2\)"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            aer(*args)
        assert "\n" not in str(info.value)
    with pytest.raises(AttnlabError, match="the sure links"):
        corpus_aer([[(0, 0)]], [None], [[]])
    for args, match in (  # `corpus_aer(None, [[]], [[]])` was a TypeError from len()
        ((None, [[]], [[]]), "^hypotheses is a list of each sentence's links, got NoneType$"),
        (([[]], "0-0", [[]]), "^sures is a list of each sentence's links, got str$"),
        (([[]], [[]], 3), "^possibles is a list of each sentence's links, got int$"),
        (([[]], [[]], []), "^1 hypothesis, 1 sure and 0 possible lines$"),
    ):
        with pytest.raises(AttnlabError, match=match):
            corpus_aer(*args)
    assert aer([[0, 1]], {(0, 1)}, ())["aer"] == 0.0  # a pair written as a list is still a link


def test_a_layer_or_head_the_method_does_not_read_is_refused() -> None:
    """`trace_links(..., "layer", layer=0, head=1)` gave layer 0's head average, `"all"` with a
    layer the all-layer links and `"shift"` with a head but no layer the all-layer Shift-Att,
    without a word, as `align --method` once did; `align_lines` takes such readings too."""
    a, b = [0.9, 0.05, 0.05], [0.05, 0.9, 0.05]
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"cross": [np.array([[a, b, a], [b, a, b]])]})
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    for method, layer, head, match in (
        ("layer", 0, 1, "--method layer takes no --head 1"),
        ("all", 0, None, "--method all takes no --layer 0"),
        ("all", None, 1, "--method all takes no --head 1"),
        ("shift", None, 1, "--method shift takes no --head 1 without --layer"),
        ("rollout", 0, 1, "--method rollout takes no --head 1"),
    ):
        with pytest.raises(AttnlabError, match=f"^{match}$"):
            trace_links(trace, src, tgt, method, layer=layer, head=head)
    assert trace_links(trace, src, tgt, "layer", layer=0) == trace_links(trace, src, tgt, "all")  # one layer
    with pytest.raises(AttnlabError, match="^--method layer takes no --head 3$"):
        align_lines(load(CKPT), PAIRS[:1], readings=[{"method": "layer", "layer": 0, "head": 3}])


def test_piece_words_refuses_what_is_not_a_list_of_strings() -> None:
    """`piece_words(None, ["a"])` was a TypeError from deep inside; `piece_words(["▁a"], None)`
    mapped the piece to no word without a word, and a string of words was read a character a word."""
    for args, match in (
        ((None, ["a"]), "^piece_words takes pieces as a list of strings, got None$"),
        ((["▁a"], None), "^piece_words takes words as a list of strings, got None$"),
        ((["▁a"], "a"), "^piece_words takes words as a list of strings, got 'a'$"),
        ((["▁a", 1], ["a"]), r"^piece_words takes pieces as a list of strings, got \['▁a', 1\]$"),
    ):
        with pytest.raises(AttnlabError, match=match):
            piece_words(*args)
    assert piece_words(("▁a", "</s>"), ("a",)) == [(0,), ()]  # any sequence of strings


def test_a_layer_or_head_the_trace_lacks_is_one_line_for_every_method() -> None:
    """`--method direct --layer 3` of a three-layer model was numpy's IndexError (its shares are
    indexed directly); every method now gives the other methods' line, which names the layers held
    from the top too (`--layer -4` listed only [0, 1, 2]), and a head past the last says as much."""
    cross = np.array([[[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]] * 2)  # 2 heads
    maps = {"encoder": [np.stack([np.eye(3)] * 2)] * 2, "cross": [cross, cross]}
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], maps)
    src, tgt, shares = [(0,), (1,), ()], [(0,), (1,), ()], np.ones((2, 2, 3, 3))
    for method, head in (
        ("layer", None),
        ("head", 0),
        ("shift", None),
        ("shift", 1),
        ("rollout", None),
        ("direct", None),
    ):
        for layer in (2, -3):
            said = rf"^layer {layer} of cross attention was not recorded \(recorded: \[0, 1\], or from the top: \[-2, -1\]\)$"
            with pytest.raises(AttnlabError, match=said):
                trace_links(trace, src, tgt, method, layer=layer, head=head, shares=shares)
        assert trace_links(trace, src, tgt, method, layer=-2, head=head, shares=shares)  # from the top: layer 0
    with pytest.raises(
        AttnlabError, match=r"^head -3 does not exist in this trace: it holds heads 0, 1 \(from the last: -2, -1\)$"
    ):
        trace_links(trace, src, tgt, "head", layer=0, head=-3)


def test_align_refuses_a_layer_past_the_model_in_one_line(
    capsys: pytest.CaptureFixture, pairs_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`align --method direct --layer 3` printed a traceback; its --help says negatives count from the top.
    A --layer, --head or --samples the model cannot take is refused before any line is decoded (it was
    refused only once the model had run): here decoding a line fails the test."""

    def decoded(*_: object) -> None:
        raise AssertionError("a line was decoded before the flags were checked")

    monkeypatch.setattr("attnlab.decode.alignment.score_words", decoded)
    align = ["align", "--checkpoint", str(CKPT), "--input", str(pairs_file)]
    layers = "the model has 3 decoder layers (0 to 2, or -3 to -1 from the last)"
    heads = "the model has 4 heads a layer (0 to 3, or -4 to -1 from the last)"
    for flags, said in (
        (["--method", "direct", "--layer", "3"], f"--layer 3: {layers}"),
        (["--method", "direct", "--layer", "-4"], f"--layer -4: {layers}"),
        (["--layer", "9"], f"--layer 9: {layers}"),
        (["--layer", "0", "--head", "4"], f"--head 4: {heads}"),
        (["--method", "shift", "--layer", "0", "--head", "-5"], f"--head -5: {heads}"),
    ):
        assert main([*align, *flags]) == 2
        assert capsys.readouterr().err.strip() == f"attnlab align: error: {said}"
    assert main([*align, "--method", "saliency", "--samples", "-5"]) == 2
    said = "attnlab align: error: --samples is a whole number of noisy copies in [0, 1000], got -5"
    assert capsys.readouterr().err.strip() == said
    with pytest.raises(SystemExit):
        main(["align", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "from 0 (negative: from the top, -1 the last;" in said and "from 0 (negative: from the last, -1;" in said


def test_pairs_whose_sides_look_swapped_for_the_model_are_said(
    capsys: pytest.CaptureFixture, tmp_path: Path, data_dir: Path
) -> None:
    """The Zh-En gold is `Chinese ||| English`; read by the EN→ZH model without --reverse-input it
    fed Chinese to the English encoder and printed AERs as plausible as any, without a word."""
    chinese = ROOT / "checkpoints" / "tatoeba-en-zh"
    pairs = tmp_path / "pairs"
    pairs.write_text("".join((data_dir / "alignment" / "zhen_dev.src-tgt").read_text().splitlines(True)[:3]))
    said = {}
    for flags in ([], ["--reverse-input"]):
        assert main(["align", "--checkpoint", str(chinese), "--input", str(pairs), *flags]) == 0
        said[bool(flags)] = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert said[True] == [] and said[False] == [
        "attnlab align: warning: the pairs' left side, read as the source, is Chinese, and this model reads en: "
        "run it with --reverse-input (for `target ||| source` lines)"
    ]
    swapped = [" ||| ".join(reversed(line.split(" ||| "))) for line in pairs.read_text().splitlines()]
    with pytest.warns(UserWarning, match="right side, read as the source, is Chinese.*without --reverse-input"):
        align_lines(load(chinese), swapped, reverse=True)
    assert main(["align", "--checkpoint", str(CKPT), "--input", str(pairs)]) in (0, 1)  # en-de: nothing to say
    assert "warning" not in capsys.readouterr().err
