"""Activation patching from text (`attnlab.record.patching`, `attnlab.record.residual`,
`attnlab.record.paths`): one clean sentence and its corrupted twin, or two line-aligned lists of
them, each pair read on the clean sentence's output (the model's own, or a reference given), every
head patched alone, every layer's output at every position, or every head's share split by path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnlab.decode.api import Model, text_list
from attnlab.errors import AttnlabError, ModelInputError
from attnlab.record.circuit import Circuit, pair_circuit
from attnlab.record.importance import check_model
from attnlab.record.patching import HeadPatching, NoDifference, check_how, pair_patching
from attnlab.record.paths import Head, PathPatching, pair_path_patching
from attnlab.record.residual import ResidualPatching, pair_residual_patching


def patch_heads(
    model: Model,
    clean: str,
    corrupted: str,
    target: str | None = None,
    *,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
    truncate: bool = False,
) -> HeadPatching:
    """Patch every head between `clean` and `corrupted` (source sentences) on `target` (default:
    the model's output for `clean`), log-probabilities summed over `positions` of the target;
    `method="attribution"` estimates every patch from one gradient instead."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    result = pair_patching(model.model, src, cor, tgt, positions, direction, method)
    result.pieces = [model.target_tokenizer.id_to_piece(i) for i in tgt]
    return result


def patch_residual(
    model: Model,
    clean: str,
    corrupted: str,
    target: str | None = None,
    *,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
    truncate: bool = False,
) -> ResidualPatching:
    """Patch every layer's output at every position between `clean` and `corrupted`, on
    `target` (default: the model's output for `clean`): Meng et al.'s causal tracing (or its
    first-order estimate, `method="attribution"`)."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    result = pair_residual_patching(model.model, src, cor, tgt, positions, direction, method)
    _name_pieces(model, result, (src, cor, tgt))
    return result


def patch_paths(
    model: Model,
    clean: str,
    corrupted: str,
    target: str | None = None,
    *,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    method: str = "activation",
    sender: Head | None = None,
    truncate: bool = False,
) -> PathPatching:
    """Every head's share between `clean` and `corrupted` split into its direct path and the rest,
    and, for `sender` (kind, layer, head), through each later head and feed-forward layer, on
    `target` (default: the model's output for `clean`)."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    result = pair_path_patching(model.model, src, cor, tgt, positions, direction, method, sender)
    pieces = [model.target_tokenizer.id_to_piece(i) for i in tgt]
    for part in (result.total, result.direct, result.receivers):
        if part is not None:
            part.pieces = pieces
    return result


def patch_circuit(
    model: Model,
    clean: str,
    corrupted: str,
    target: str | None = None,
    *,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    senders: int = 4,
    threshold: float = 0.05,
    truncate: bool = False,
) -> Circuit:
    """The circuit of the change from `clean` to `corrupted` (`attnlab.record.circuit`): the
    `senders` heads that move most and their paths of at least `threshold`, on `target` (default:
    the model's output for `clean`)."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    circuit = pair_circuit(model.model, src, cor, tgt, positions, direction, senders, threshold)
    circuit.total.pieces = circuit.direct.pieces = [model.target_tokenizer.id_to_piece(i) for i in tgt]
    return circuit


def corpus_patching(
    model: Model,
    clean: Sequence[str],
    corrupted: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    direction: str = "denoise",
    method: str = "activation",
    truncate: bool = False,
) -> HeadPatching:
    """Each head's share averaged over line-aligned pairs (each pair's own share first, so a long
    sentence counts as much as a short one), on the model's outputs for `clean` or on `targets`.
    Encoder heads are averaged over the pairs whose two sources have as many pieces; a pair whose
    corruption leaves the output's log-probability as it was is skipped (`skipped` counts them)."""
    results, skipped = _each_pair(model, clean, corrupted, targets, truncate, pair_patching, direction, method)
    return _mean_patching(results, skipped)


def corpus_paths(
    model: Model,
    clean: Sequence[str],
    corrupted: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    direction: str = "denoise",
    method: str = "activation",
    truncate: bool = False,
) -> PathPatching:
    """Each head's total and direct share averaged over line-aligned pairs, as `corpus_patching`
    averages the total (pairs whose change moves nothing skipped)."""
    results, skipped = _each_pair(model, clean, corrupted, targets, truncate, pair_path_patching, direction, method)
    total, direct = (_mean_patching([getattr(r, part) for r in results], skipped) for part in ("total", "direct"))
    return PathPatching(total, direct)


def _mean_patching(results: list[HeadPatching], skipped: int) -> HeadPatching:
    """Head patching results averaged cell by cell (a pair's own share first), with their count."""
    share, nats = (_mean([getattr(r, name) for r in results]) for name in ("share", "nats"))
    patched = tuple(dict.fromkeys(k for r in results for k in r.patched))
    clean_logp, corrupt_logp = (float(np.mean([getattr(r, side) for r in results])) for side in ("clean", "corrupted"))
    first = results[0]
    return HeadPatching(
        share, nats, clean_logp, corrupt_logp, first.direction, [], patched, pairs=len(results), skipped=skipped,
        method=first.method,
    )  # fmt: skip


@dataclass
class ResidualCorpus:
    """Residual-stream patching over pairs that differ in one source piece, lined up on it."""

    offsets: list[int]  # distances from the changed piece, -reach … reach
    encoder: np.ndarray  # (layers + 1, offsets): the mean share there (row 0 the embeddings); NaN: no pair reaches
    landed: list[
        tuple[str, int]
    ]  # output pieces taking more than `LANDS` of the difference (top decoder row), by pairs
    clean: float  # the mean log-probability of the outputs after the clean sources
    corrupted: float  # … after the corrupted ones
    direction: str
    pairs: int  # pairs averaged
    skipped: int  # pairs whose change moved nothing
    left_out: int  # pairs whose sources differ in more than one piece or in length: nothing to line up on
    method: str = "activation"  # "attribution": first-order estimates, not patched runs


LANDS = 0.1  # the share of the difference from which an output piece counts as one the change lands on


def corpus_residual(
    model: Model,
    clean: Sequence[str],
    corrupted: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    direction: str = "denoise",
    method: str = "activation",
    truncate: bool = False,
    reach: int = 3,
) -> ResidualCorpus:
    """Residual-stream patching of line-aligned pairs that differ in one source piece ("man" /
    "woman"), each encoder layer's shares lined up on that piece and averaged by distance from it
    (how far, layer by layer, the change spreads in the encoder), and the output pieces the
    difference lands on (the decoder's top row), counted over the pairs."""
    if isinstance(reach, bool) or not isinstance(reach, int) or reach < 0:
        raise AttnlabError(f"reach is a whole number of pieces ≥ 0, got {reach!r}")
    results, skipped = _each_pair(model, clean, corrupted, targets, truncate, pair_residual_patching, direction, method)
    offsets = list(range(-reach, reach + 1))
    sums = np.zeros((model.config.n_layers + 1, len(offsets)))
    counts = np.zeros(len(offsets))
    landed: Counter[str] = Counter()
    lined = []
    for result in results:
        changed = [i for i, (a, b) in enumerate(zip(result.source, result.changed, strict=False)) if a != b]
        if not result.encoder_patched or len(changed) != 1:
            continue
        lined.append(result)
        for column, offset in enumerate(offsets):
            if 0 <= changed[0] + offset < result.encoder.shape[1]:
                sums[:, column] += result.encoder[:, changed[0] + offset]
                counts[column] += 1
        landed.update({result.target[i] for i in np.flatnonzero(result.decoder[-1] > LANDS)})
    if not lined:
        raise AttnlabError("no pair's sources differ in exactly one piece: there is no position to line them up on")
    encoder = np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)
    clean_logp, corrupt_logp = (float(np.mean([getattr(r, side) for r in lined])) for side in ("clean", "corrupted"))
    return ResidualCorpus(
        offsets, encoder, landed.most_common(), clean_logp, corrupt_logp, direction, len(lined), skipped,
        len(results) - len(lined), method,
    )  # fmt: skip


def _each_pair(
    model: Model,
    clean: Sequence[str],
    corrupted: Sequence[str],
    targets: Sequence[str] | None,
    truncate: bool,
    patch: Any,
    direction: str,
    method: str,
) -> tuple[list[Any], int]:
    """`patch` (`pair_patching`, `pair_residual_patching` or `pair_path_patching`) run on each line-aligned pair (on the model's output for the clean line, or the
    target given), and how many pairs were skipped because the change moved nothing; a line the
    model cannot take is named by its number."""
    check_model(model, "patching")
    check_how(model.model, direction, method)
    if isinstance(clean, str) or not (clean := text_list(clean, "clean lines")):  # (an empty one: "as many as 0")
        raise AttnlabError(f"patching a corpus needs a list of clean lines, one or more; got {clean!r:.60}")
    corrupted = text_list(corrupted, "corrupted lines") if not isinstance(corrupted, str) else corrupted
    targets = text_list(targets, "targets") if targets is not None and not isinstance(targets, str) else targets
    for name, lines in (("corrupted", corrupted), ("targets", targets)):
        if lines is not None and (isinstance(lines, str) or not lines or len(lines) != len(clean)):
            raise AttnlabError(f"patching a corpus needs as many {name} lines as clean ones ({_count(clean)})")
    targets = model.translate(clean, truncate=truncate) if targets is None else targets
    results, skipped = [], 0
    for number, (c, k, t) in enumerate(zip(clean, corrupted, targets, strict=True), 1):
        try:
            ids = _ids(model, c, k, t, truncate)
            result = patch(model.model, *ids, None, direction, method)
        except NoDifference:
            skipped += 1
            continue
        except ModelInputError as error:  # which line of a thousand
            raise ModelInputError(f"line {number}: {error}") from None
        if isinstance(result, ResidualPatching):
            _name_pieces(model, result, ids)
        results.append(result)
    if not results:
        raise AttnlabError(f"no pair of the {len(clean)} changes its output's log-probability: nothing to patch")
    return results, skipped


def _name_pieces(model: Model, result: ResidualPatching, ids: tuple[list[int], ...]) -> None:
    """Fill in the pieces a residual-stream result is read by (source, changed source, target)."""
    src, cor, tgt = ids
    result.source, result.changed = ([model.tokenizer.id_to_piece(i) for i in side] for side in (src, cor))
    result.target = [model.target_tokenizer.id_to_piece(i) for i in tgt]


def _ids(model: Model, clean: str, corrupted: str, target: Any, truncate: bool) -> tuple[list[int], ...]:
    """(clean, corrupted, target) ids; the target is text, a `Result`, or None: the model's output for `clean`."""
    src, cor = (model.encode_source(text, truncate)[0] for text in (clean, corrupted))
    text = model.translate(clean, truncate=truncate) if target is None else target
    pieces, _ = model.encode_target(text, truncate)
    return src, cor, [*pieces, model.config.eos_id]


def _mean(arrays: list[np.ndarray]) -> np.ndarray:
    """The mean over `arrays` of each cell's numbers, NaN where none has one."""
    stack = np.stack(arrays)
    counts, sums = (~np.isnan(stack)).sum(0), np.nansum(stack, 0)
    return np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)


def _count(value: Any) -> str:
    return f"{len(value)}" if hasattr(value, "__len__") else repr(value)
