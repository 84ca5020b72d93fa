"""Activation patching from text (`attnlab.record.patching`, `attnlab.record.residual`): one clean
sentence and its corrupted twin, or two line-aligned lists of them, each pair read on the clean
sentence's output (the model's own, or a reference given), every head patched alone, or every
layer's output at every position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnlab.decode.api import Model
from attnlab.errors import AttnlabError, ModelInputError
from attnlab.record.importance import check_model
from attnlab.record.patching import HeadPatching, NoDifference, pair_patching
from attnlab.record.residual import ResidualPatching, pair_residual_patching


def patch_heads(
    model: Model,
    clean: str,
    corrupted: str,
    target: str | None = None,
    *,
    positions: Sequence[int] | None = None,
    direction: str = "denoise",
    truncate: bool = False,
) -> HeadPatching:
    """Patch every head between `clean` and `corrupted` (source sentences) on `target` (default:
    the model's output for `clean`), log-probabilities summed over `positions` of the target."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    result = pair_patching(model.model, src, cor, tgt, positions, direction)
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
    truncate: bool = False,
) -> ResidualPatching:
    """Patch every layer's output at every position between `clean` and `corrupted`, on
    `target` (default: the model's output for `clean`): Meng et al.'s causal tracing."""
    check_model(model, "patching")
    src, cor, tgt = _ids(model, clean, corrupted, target, truncate)
    result = pair_residual_patching(model.model, src, cor, tgt, positions, direction)
    result.source, result.changed = ([model.tokenizer.id_to_piece(i) for i in ids] for ids in (src, cor))
    result.target = [model.target_tokenizer.id_to_piece(i) for i in tgt]
    return result


def corpus_patching(
    model: Model,
    clean: Sequence[str],
    corrupted: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    direction: str = "denoise",
    truncate: bool = False,
) -> HeadPatching:
    """Each head's share averaged over line-aligned pairs (each pair's own share first, so a long
    sentence counts as much as a short one), on the model's outputs for `clean` or on `targets`.
    Encoder heads are averaged over the pairs whose two sources have as many pieces; a pair whose
    corruption leaves the output's log-probability as it was is skipped (`skipped` counts them)."""
    check_model(model, "patching")
    for name, lines in (("clean", clean), ("corrupted", corrupted), ("targets", targets)):
        if lines is not None and (isinstance(lines, str) or not lines or len(lines) != len(clean)):
            raise AttnlabError(f"patching a corpus needs as many {name} lines as clean ones ({_count(clean)})")
    targets = model.translate(list(clean), truncate=truncate) if targets is None else targets
    results, skipped = [], 0
    for number, (c, k, t) in enumerate(zip(clean, corrupted, targets, strict=True), 1):
        try:
            results.append(pair_patching(model.model, *_ids(model, c, k, t, truncate), None, direction))
        except NoDifference:
            skipped += 1
        except ModelInputError as error:  # which line of a thousand
            raise ModelInputError(f"line {number}: {error}") from None
    if not results:
        raise AttnlabError(f"no pair of the {len(clean)} changes its output's log-probability: nothing to patch")
    share, nats = (_mean([getattr(r, name) for r in results]) for name in ("share", "nats"))
    patched = tuple(dict.fromkeys(k for r in results for k in r.patched))
    clean_logp, corrupt_logp = (float(np.mean([getattr(r, side) for r in results])) for side in ("clean", "corrupted"))
    return HeadPatching(
        share, nats, clean_logp, corrupt_logp, direction, [], patched, pairs=len(results), skipped=skipped
    )


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
