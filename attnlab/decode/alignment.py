"""Cross-attention read as word alignment, scored against human links by alignment error rate
(`attnlab.decode.aer`).

Links are sets of (source_word, target_word) pairs, 0-indexed. Attention is between pieces; gold
links are between words. `piece_words` (`attnlab.decode.piece_words`) maps each piece to the
words it spells by character offsets, so Chinese fed without spaces, byte-fallback pieces and
punctuation split off a word all land on the right word.
`word_links` then sums a target piece's attention over the pieces of each source word, averages
over the pieces of a target word, and links each target word to its argmax source word (or to
every source word above a threshold).

Which attention row belongs to a target word: row t of a trace's cross map is the decoder step
that *outputs* piece t (its input is piece t−1). Shift-Att (Chen et al. 2020, "Accurate Word
Alignment Induction from Neural Machine Translation") instead aligns piece t at step t+1, where
it is the decoder's *input*; `attention_rows(trace, "shift")` returns those rows.

`direct` reads no attention weight as such: each source piece's direct share in the logit of each
output piece (`attnlab.record.logit_attribution`: a cross head's a · v W^O read through every
LayerNorm above it), summed over the heads, the shares that push against the piece dropped. It
needs the model as well as the trace (`align_lines` passes the shares).

`saliency` reads no attention either: each source piece's |gradient × input| for the probability
of each output piece (`attnlab.record.saliency`, Ding et al. 2019), each row scaled to sum to 1.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab.data.tokenizer import UNSPACED, join_words, mostly_han
from attnlab.decode.aer import corpus_aer
from attnlab.decode.pharaoh import Links
from attnlab.decode.piece_words import piece_words
from attnlab.decode.readings import best_method, candidates, check_reading, check_threshold, reading, reading_name
from attnlab.errors import AttnlabError, DataError, ModelInputError
from attnlab.record.logit_attribution import logit_attribution
from attnlab.record.norms import layer_norms
from attnlab.record.rollout import rollout
from attnlab.record.saliency import saliency
from attnlab.record.trace import AttentionTrace, not_recorded, whole_number

if TYPE_CHECKING:  # for annotations only: decode.api loads torch, which scoring links (evaluate) does not need
    from attnlab.decode.api import Result


# -- attention -> word links ---------------------------------------------------------------------------
def _membership(words_of_piece: Sequence[Sequence[int]]) -> np.ndarray:
    """(pieces, words) 1 where a piece spells a word (a piece over a word boundary: in each)."""
    n_words = 1 + max((w for words in words_of_piece for w in words), default=-1)
    member = np.zeros((len(words_of_piece), n_words))
    for piece, words in enumerate(words_of_piece):
        member[piece, list(words)] = 1.0
    return member


def word_matrix(
    weights: np.ndarray, src_words_of_piece: Sequence[Sequence[int]], tgt_words_of_piece: Sequence[Sequence[int]]
) -> np.ndarray:
    """(target words, source words) attention: a target piece's weights summed over the pieces
    of each source word, then averaged over the pieces of each target word. A piece that spells
    several words counts whole for each (the model read them as one: that piece is all there is
    of each); pieces of no word (</s>, <s>) are left out, and a word with no piece has a row of 0."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (len(tgt_words_of_piece), len(src_words_of_piece)):
        raise AttnlabError(
            f"attention of shape {weights.shape} but {len(tgt_words_of_piece)} target and "
            f"{len(src_words_of_piece)} source pieces"
        )
    from_tgt = _membership(tgt_words_of_piece).T  # (tgt words, tgt pieces), averaging
    from_tgt /= np.maximum(from_tgt.sum(1, keepdims=True), 1.0)
    return from_tgt @ weights @ _membership(src_words_of_piece)


def word_links(
    weights: np.ndarray,
    src_words_of_piece: Sequence[Sequence[int]],
    tgt_words_of_piece: Sequence[Sequence[int]],
    method: str = "argmax",
    threshold: float = 0.1,
) -> Links:
    """(source_word, target_word) links from a (target pieces, source pieces) attention map:
    each target word to its most attended source word (`argmax`), or to every source word it
    gives at least `threshold` of its attention (`threshold`). A target word that no piece
    spells (cut off, or dropped by the tokenizer) has no attention, so no link."""
    check_threshold(method, threshold)
    matrix = word_matrix(weights, src_words_of_piece, tgt_words_of_piece)
    read = {w for words in tgt_words_of_piece for w in words}
    if matrix.size == 0:
        return set()
    if method == "argmax":
        return {(int(s), t) for t, s in enumerate(matrix.argmax(1)) if t in read}
    if method == "threshold":
        return {(int(s), int(t)) for t, s in zip(*np.nonzero(matrix >= threshold), strict=True) if t in read}
    raise AttnlabError(f"unknown link method {method!r}; choose argmax or threshold")


def attention_rows(
    trace: AttentionTrace,
    method: str,
    layer: int | None = None,
    head: int | None = None,
    shares: np.ndarray | None = None,
    norms: dict[int, np.ndarray] | None = None,
    salient: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """(target pieces, source pieces) cross-attention for a method, and the row offset: 0 for
    the row that outputs a piece, 1 for Shift-Att (row t+1, where piece t is the input; the
    last piece, </s>, then has no row). `head` needs `layer` and `head`; `layer` averages one
    layer's heads (default: the last layer); `all` every layer and head; `shift` the all-layer
    average, or one layer's (or head's) with `layer` (and `head`); `rollout` one layer's (default:
    the last) rollout through the encoder (`attnlab.record.rollout`: its head average read through
    what each encoder output holds of each source token); `direct` the source pieces' direct
    shares in each output piece's logit (`shares`: `LogitAttribution.cross_source` of the trace),
    over every layer or one; `norm` one layer's (default: the last) ‖Σ_h α f(x)‖, what its heads
    together move from each source piece (`norms`: `record.norms.layer_norms` of the trace,
    Kobayashi et al. 2020), each row scaled to sum to 1; `saliency` each source piece's share of the
    output's |gradient × input| (`salient`: `Saliency.source_rows` of the trace). Layers and heads are the model's ids
    (negative: from its last), as the views name them: a trace recorded with `heads=[2, 3]` holds
    head 2 in its first row. One it lacks is one line naming those it holds, both ways."""
    check_reading(reading(method, layer, head))  # a layer or head it does not read: refused (it was ignored)
    if method == "direct":
        return direct_rows(shares, layer), 0
    if method == "saliency":
        if salient is None:
            raise AttnlabError("--method saliency reads the model as well as the trace: give the model")
        return salient, 0
    if method == "norm":
        if norms is None:
            raise AttnlabError("--method norm reads the model as well as the trace: give the model")
        moved = norms[trace.layer_index("cross", -1 if layer is None else layer)]
        return moved / np.where(moved.sum(1, keepdims=True) > 0, moved.sum(1, keepdims=True), 1.0), 0
    if method == "all" or (method == "shift" and layer is None):
        maps = [trace.attention("cross", n) for n in trace.layers["cross"]]
        weights = np.mean([m.mean(0) for m in maps], axis=0)
    elif method == "rollout":
        return rollout(trace, "cross")[trace.layer_index("cross", -1 if layer is None else layer)], 0
    else:
        stack = trace.attention("cross", -1 if layer is None else layer)
        row = None if head is None else trace.head_row(head)
        weights = stack[row] if row is not None and method in ("head", "shift") else stack.mean(0)
    if method == "shift":
        return weights[1:], 1
    return weights, 0


def direct_rows(shares: np.ndarray | None, layer: int | None = None) -> np.ndarray:
    """(target pieces, source pieces) from the direct shares (layers, heads, target, source) of one
    trace: one layer's heads (or all layers'), summed, less than 0 dropped, each row scaled to sum
    to 1 (a row of none above 0 stays 0), so that `--links threshold` reads a share as it reads
    attention."""
    if shares is None:
        raise AttnlabError("--method direct reads the model as well as the trace: give the model")
    held = list(range(len(shares)))  # every layer of the model: a layer past them was numpy's IndexError
    if layer is not None and not (whole_number(layer) and -len(held) <= layer < len(held)):
        raise not_recorded("cross", layer, held, len(held))
    summed = (shares if layer is None else shares[[layer]]).sum((0, 1)).clip(min=0.0)
    return summed / np.where(summed.sum(1, keepdims=True) > 0, summed.sum(1, keepdims=True), 1.0)


def trace_links(
    trace: AttentionTrace,
    src_words: Sequence[Sequence[int]],
    tgt_words: Sequence[Sequence[int]],
    method: str = "all",
    layer: int | None = None,
    head: int | None = None,
    links: str = "argmax",
    threshold: float = 0.1,
    shares: np.ndarray | None = None,
    norms: dict[int, np.ndarray] | None = None,
    salient: np.ndarray | None = None,
) -> Links:
    """(source_word, target_word) links of one teacher-forced trace, given each piece's words
    (and, for `direct`, the trace's direct shares; for `norm`, its layers' norms; for `saliency`,
    its saliency rows)."""
    weights, offset = attention_rows(trace, method, layer, head, shares, norms, salient)
    tgt = list(tgt_words)[: len(tgt_words) - offset]
    return word_links(weights, src_words, tgt, links, threshold)


# -- a model reading word pairs --------------------------------------------------------------------------
def check_lines(lines: Any, what: str) -> list[str]:
    """`lines` as a list, refused unless it is a list of texts: a string given instead was read a
    character a line, and a None line failed as an AttributeError deep inside."""
    if isinstance(lines, str) or not isinstance(lines, Iterable):
        raise DataError(f"expected a list of {what} lines, got {type(lines).__name__}")
    lines = list(lines)
    bad = next((n for n, line in enumerate(lines, 1) if not isinstance(line, str)), None)
    if bad is not None:
        raise DataError(f"{what} line {bad} is not text (got {type(lines[bad - 1]).__name__})")
    return lines


def split_pair(line: str, reverse: bool = False) -> tuple[list[str], list[str]]:
    """The words of a `source ||| target` line (`reverse`: the line is `target ||| source`)."""
    if line.count("|||") != 1:
        raise ModelInputError("expected one `source ||| target` pair")
    left, right = (side.split() for side in line.split("|||"))
    if not left or not right:
        raise ModelInputError("a side of the pair is empty")
    return (right, left) if reverse else (left, right)


def orientation_hint(meta: dict[str, Any], lines: Sequence[str], reverse: bool) -> str | None:
    """What to say when the pairs' sides look swapped for a model between a language written
    without spaces and one written with them: the Zh-En gold is `Chinese ||| English`, and read
    without --reverse-input by the EN→ZH model it fed Chinese to the English encoder and printed
    AERs as plausible as any, without a word. None when the sides look right or cannot tell."""
    data = meta.get("data", {}) if isinstance(meta.get("data"), dict) else {}
    src_lang, tgt_lang = data.get("src_lang"), data.get("tgt_lang")
    if (src_lang in UNSPACED) == (tgt_lang in UNSPACED):
        return None
    pairs = [line.split("|||") for line in lines[:500] if isinstance(line, str) and line.count("|||") == 1]
    left, right = [a for a, _ in pairs], [b for _, b in pairs]
    src, tgt = (right, left) if reverse else (left, right)
    if mostly_han(src if src_lang in UNSPACED else tgt) or not mostly_han(tgt if src_lang in UNSPACED else src):
        return None
    side = "right" if reverse else "left"
    flag = "without --reverse-input" if reverse else "with --reverse-input (for `target ||| source` lines)"
    return f"the pairs' {side} side, read as the source, is Chinese, and this model reads {src_lang}: run it {flag}"


def score_words(
    model: Any, src: Sequence[str], tgt: Sequence[str], truncate: bool = False
) -> tuple[Result, list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Teacher-force the words through `model` (joined as running text of each side's language,
    `join_words`: Chinese without spaces, as the model was trained, but "cac 40" not "cac40") and
    map its pieces back to the words: the recorded `Result` (`Model.score`, which `truncate` is
    passed to) and each side's piece_words."""
    data = model.meta.get("data", {})
    src_text, tgt_text = (
        join_words(list(words), data.get(f"{side}_lang")) for side, words in (("src", src), ("tgt", tgt))
    )
    result = model.score(src_text, tgt_text, record=True, truncate=truncate)
    trace = result.trace
    return result, piece_words(trace.src_tokens, src), piece_words(trace.tgt_tokens, tgt)


def oriented(links: Links, reverse: bool) -> Links:
    """Links in the input file's order of sides (swapped back when the input was reversed)."""
    return {(t, s) for s, t in links} if reverse else set(links)


def align_lines(
    model: Any,
    lines: Sequence[str],
    readings: Sequence[dict[str, Any]] | None = None,
    reverse: bool = False,
    links: str = "argmax",
    threshold: float = 0.1,
    samples: int = 0,
) -> tuple[list[list[Links]], list[tuple[int, str]]]:
    """Links of every `source ||| target` line under each reading (default: the model's best),
    in the input's order of sides, and the (line number, reason) of lines that could not be read
    (their links are empty). Each line is scored once, whatever the number of readings (and its
    direct shares computed once, when a reading needs them). `samples`: SmoothGrad's noisy
    copies for `saliency` (0: the plain gradient)."""
    check_threshold(links, threshold)
    lines = check_lines(lines, "`source ||| target`")
    readings = list(readings) if readings is not None else [best_method(model.meta, model.config, model.path)]
    if hint := orientation_hint(model.meta, lines, reverse):
        warnings.warn(hint, stacklevel=2)
    direct, normed, salient = (any(r["method"] == m for r in readings) for m in ("direct", "norm", "saliency"))
    out: list[list[Links]] = [[] for _ in readings]
    failed = []
    for number, line in enumerate(lines, 1):
        try:
            src, tgt = split_pair(line, reverse)
            scored, src_words, tgt_words = score_words(model, src, tgt)
        except ModelInputError as error:
            failed.append((number, str(error)))
            for found in out:
                found.append(set())
            continue
        shares = logit_attribution(model, scored.trace).cross_source if direct else None
        norms = layer_norms(model, scored.trace) if normed else None
        rows = saliency(model, scored.trace, samples=samples).source_rows() if salient else None
        read = {"links": links, "threshold": threshold, "shares": shares, "norms": norms, "salient": rows}
        for found, chosen in zip(out, readings, strict=True):
            found.append(oriented(trace_links(scored.trace, src_words, tgt_words, **{**read, **chosen}), reverse))
    return out, failed


def aer_grid(
    model: Any,
    lines: Sequence[str],
    sures: Sequence[Links],
    possibles: Sequence[Links],
    reverse: bool = False,
    links: str = "argmax",
    threshold: float = 0.1,
    samples: int = 0,
) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """Corpus AER, precision and recall of every reading (`candidates`) of `model` on the pairs
    against the gold links (in the lines' order of sides), best first, and the lines that failed
    (`samples`: SmoothGrad's copies for the saliency reading)."""
    readings = [reading(**c) for c in candidates(model.config.n_layers, model.config.n_heads)]
    found, failed = align_lines(model, lines, readings, reverse, links, threshold, samples)
    smoothed = {"samples": samples} if samples else {}  # (the saliency row's: `--save-best` keeps it for `align`)
    rows = [
        {
            "reading": reading_name(r, samples),
            **r,
            **(smoothed if r["method"] == "saliency" else {}),
            **corpus_aer(f, sures, possibles),
        }
        for r, f in zip(readings, found, strict=True)
    ]
    return sorted(rows, key=lambda row: row["aer"]), failed


def diagonal_links(line: str) -> set[tuple[int, int]]:
    """The baseline an aligner must beat to have read anything: target word j of m linked to
    source word round(j·n/m) of n, in the line's order of sides: each word of the right side has one
    link (not symmetric: Zh-En's 82.2 links each English word, 83.2 each Chinese one)."""
    try:
        left, right = split_pair(line)
    except ModelInputError:
        return set()
    return {(min(round(j * len(left) / len(right)), len(left) - 1), j) for j in range(len(right))}
