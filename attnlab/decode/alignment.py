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

import reprlib
from collections.abc import Iterable, Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab.data.tokenizer import join_words
from attnlab.decode.aer import corpus_aer
from attnlab.decode.pharaoh import Links
from attnlab.decode.piece_words import piece_words
from attnlab.errors import AttnlabError, DataError, ModelInputError
from attnlab.record.logit_attribution import logit_attribution
from attnlab.record.norms import layer_norms
from attnlab.record.rollout import rollout
from attnlab.record.saliency import saliency
from attnlab.record.trace import AttentionTrace, not_recorded, whole_number

if TYPE_CHECKING:  # for annotations only: decode.api loads torch, which scoring links (evaluate) does not need
    from attnlab.decode.api import Result

METHODS = ("head", "layer", "all", "shift", "rollout", "direct", "norm", "saliency")


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


def check_threshold(method: str, threshold: object) -> None:
    """A word's attention mass lies in [0, 1]: a threshold above 1, or NaN (every comparison is
    False), links nothing without a word. One check, for `word_links` and `align_lines`."""
    if method == "threshold" and not (isinstance(threshold, Real) and 0.0 <= threshold <= 1.0):
        raise AttnlabError(f"--threshold is a share of a word's attention, in [0, 1]; got {threshold!r}")


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


def candidates(n_layers: int, n_heads: int) -> list[dict[str, Any]]:
    """Every way to read alignment off a model's traces: each layer × head, each layer's average,
    the all-layer average, Shift-Att on each layer's average and on the all-layer average, each
    layer's rollout, the direct shares of each layer and of all, each layer's norms, and the
    gradient saliency."""
    layers, heads = range(n_layers), n_heads
    out = [{"method": "head", "layer": n, "head": h} for n in layers for h in range(heads)]
    out += [{"method": "layer", "layer": n, "head": None} for n in layers]
    out += [{"method": "all", "layer": None, "head": None}]
    out += [{"method": "shift", "layer": n, "head": None} for n in layers]
    out += [{"method": "shift", "layer": None, "head": None}]
    out += [{"method": "rollout", "layer": n, "head": None} for n in layers]
    out += [{"method": "direct", "layer": n, "head": None} for n in [*layers, None]]
    out += [{"method": "norm", "layer": n, "head": None} for n in layers]
    return out + [{"method": "saliency", "layer": None, "head": None}]


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


def reading(method: str, layer: int | None = None, head: int | None = None, strict: bool = True) -> dict[str, Any]:
    """One way to read alignment off a trace. A setting its method does not read is refused (`align
    --method all --layer 0` printed the all-layer links without a word), or dropped if not `strict`."""
    if method not in METHODS:
        raise AttnlabError(f"unknown alignment method {method!r}; choose from {', '.join(METHODS)}")
    reads = {
        "head": "layer head",
        "layer": "layer",
        "all": "",
        "rollout": "layer",
        "direct": "layer",
        "norm": "layer",
        "saliency": "",
    }
    reads["shift"] = "layer head" if layer is not None else "layer"
    unread = [f"--{n} {v}" for n, v in (("layer", layer), ("head", head)) if v is not None and n not in reads[method]]
    if unread and strict:  # (Shift-Att reads a head of the --layer it is given; without one, the all-layer average)
        said = " or ".join(unread) + " without --layer" * (method == "shift")
        raise AttnlabError(f"--method {method} takes no {said}")
    return {"method": method, **{n: v if n in reads[method] else None for n, v in (("layer", layer), ("head", head))}}


def card_of(path: str | None) -> str:
    """Where a model's best reading is stored, as its refusals name it: `CKPT/config.json:
    meta.alignment` (the file to mend), or the card's for a model read from no directory."""
    return f"{path}/config.json: meta.alignment" if path else "the card's meta.alignment"


def best_method(meta: dict[str, Any], config: Any = None, path: str | None = None) -> dict[str, Any]:
    """The reading a model card names as its best (`meta["alignment"]`, as `evaluate --save-best`
    writes it), else the all-layer average. One that names no reading (not a mapping, a method not
    in `METHODS`), or none of the model's (`check_reading` against `config`), is one line naming
    `card_of(path)`: `"head"` or `{"method": "bogus"}` was ignored, and `all` read without a word."""
    best, where = meta.get("alignment"), card_of(path)
    if best is None:
        return reading("all")
    if not isinstance(best, dict):
        raise AttnlabError(
            f'{where} is {reprlib.repr(best)}, not a mapping such as {{"method": "head", "layer": 2, "head": 3}}'
        )
    if best.get("method") not in METHODS:
        raise AttnlabError(f"{where} method {reprlib.repr(best.get('method'))} is not one of {', '.join(METHODS)}")
    chosen = reading(best["method"], best.get("layer"), best.get("head"), strict=False)  # a card's extras: dropped
    return {**check_reading(chosen, config, where), **card_rule(best, where)}


def card_rule(best: dict[str, Any], where: str) -> dict[str, Any]:
    """The link rule a card's best reading was scored with (`--save-best` keeps it), {} for a card
    without one (argmax): a reading that won with threshold links and was read with argmax scored
    another AER than its card's."""
    if "links" not in best:
        return {}
    if best["links"] not in ("argmax", "threshold"):
        raise AttnlabError(f"{where} links {reprlib.repr(best['links'])} is not argmax or threshold")
    try:
        check_threshold(best["links"], best.get("threshold"))
    except AttnlabError:
        raise AttnlabError(f"{where} threshold {reprlib.repr(best.get('threshold'))} is not in [0, 1]") from None
    return {"links": best["links"], **({"threshold": best["threshold"]} if best["links"] == "threshold" else {})}


def check_reading(chosen: dict[str, Any], config: Any = None, where: str | None = None) -> dict[str, Any]:
    """A reading's layer and head, checked before any line is decoded: a head reading names both,
    and given the model's `config` each lies inside it (`align --layer 9` of a three-layer model,
    or a card's, failed "layer 9 of cross attention was not recorded" once the model had run).
    `where` names a card's reading (`card_of`); None, the command line's flags. Returns it counted
    from 0 where `config` says from where (`--layer -1 --head -1` is reported as L2 H3, not L-1 H-1)."""
    if chosen["method"] == "head" and None in (chosen["layer"], chosen["head"]):
        said = f"{where} reads a head but names no layer and head: give --method"
        raise AttnlabError("--method head needs --layer and --head" if where is None else said)
    counted = dict(chosen)
    for name, field, what in (("layer", "n_layers", "decoder layers"), ("head", "n_heads", "heads a layer")):
        value, count = chosen[name], getattr(config, field, None)
        if value is None or count is None:
            continue
        if whole_number(value) and -count <= value < count:
            counted[name] = int(value) % count
            continue
        said = f"--{name} {value}" if where is None else f"{where} {name} {reprlib.repr(value)}"
        raise AttnlabError(f"{said}: the model has {count} {what} (0 to {count - 1}, or {-count} to -1 from the last)")
    return counted


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
        for found, reading in zip(out, readings, strict=True):
            found.append(oriented(trace_links(scored.trace, src_words, tgt_words, **{**read, **reading}), reverse))
    return out, failed


def reading_name(reading: dict[str, Any], samples: int = 0) -> str:
    """`head L3 H2`, `layer L3`, `all`, `shift L3`, `shift all`, `rollout L3`, `direct L3`, `direct all`,
    `norm L3`, `saliency` (`saliency smoothgrad 10` with SmoothGrad's `samples`)."""
    if reading["method"] == "saliency" and samples:
        return f"saliency smoothgrad {samples}"
    parts = [reading["method"]]
    if reading.get("layer") is not None:
        parts.append(f"L{reading['layer']}")
    elif reading["method"] in ("shift", "direct"):
        parts.append("all")
    if reading.get("head") is not None:
        parts.append(f"H{reading['head']}")
    return " ".join(parts)


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
