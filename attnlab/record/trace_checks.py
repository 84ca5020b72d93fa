"""The checks of an `AttentionTrace`'s parts that go beyond shapes: its weights are real numbers
a softmax gives, its masks are booleans, and the heads its recording switched off are heads of
its model.

Each is run where a trace is made, saved and loaded (`AttentionTrace._damage`) and, for the
parts a user may edit after that (`meta`, `masks`), again where they are read, so that every
view meets the same one-line refusal instead of failing in its own way deep inside.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnlab.errors import AttnlabError

# How far past [0, 1] a stored weight may lie and still be a softmax's: one bf16 step above 1.0
# (2^-7). Traces are stored in float32, but a model run in bf16 (or a foreign recorder) computes
# them in bf16, where a row's rounding lands on the neighbouring value at worst; torch's own bf16,
# fp16 and fp32 softmax stayed within [0, 1] exactly on 10,000 random rows. An edit is larger.
ROUNDING = 2.0**-7


def outside_softmax(kind: str, maps: list[np.ndarray], layers: list[int], heads: list[int] | None) -> str | None:
    """The first head (model layer and head index) of `kind` holding a weight no softmax gives,
    below 0 or above 1 past `ROUNDING`: an edited or foreign file's were drawn on the 0..1
    colour scale and pooled into head statistics as if they were attention. None: all are."""
    for layer, weights in zip(layers, maps, strict=True):
        weights = np.asarray(weights)
        rows = np.flatnonzero(((weights < -ROUNDING) | (weights > 1 + ROUNDING)).any(axis=(1, 2)))  # (heads,)
        if rows.size:
            row = weights[rows[0]]
            worst = row.max() if row.max() > 1 + ROUNDING else row.min()
            head = heads[rows[0]] if heads else int(rows[0])
            return f"{kind} layer {layer} head {head} holds a weight of {worst:g}: attention weights lie in [0, 1]"
    return None


def as_weights(kind: str, weights: Any) -> np.ndarray:
    """`weights` as the float32 array the views read, a torch tensor's too (duck-typed: traces load
    without torch), or one line: a tensor was drawn with a zero step, an object array failed in `_damage`."""
    try:
        array = np.asarray(weights.detach().cpu().float().numpy() if hasattr(weights, "detach") else weights)
    except ValueError:  # a ragged list
        array = np.array(weights, dtype=object)
    if array.dtype.kind not in "biuf":
        raise AttnlabError(f"a trace's {kind} maps hold real numbers (arrays or tensors), got dtype {array.dtype}")
    return array.astype(np.float32, copy=False)


def as_mask(kind: str, mask: Any) -> np.ndarray:
    """`mask` as the bool array (True = allowed) the views invert with `~`, from booleans or the
    0/1 integers a trace file stores them as (a torch tensor's too); anything else is one line.
    Floats are refused rather than read as 0/1: PyTorch's float masks are additive (0 allowed,
    -inf forbidden, the opposite reading) and 0.5 is neither; `~` on a float mask was numpy's
    TypeError in the heatmap, and on integers other than 0 and 1 it drew a negative number."""
    array = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask)
    if array.dtype == bool:
        return array
    integers = array.dtype.kind in "iu"
    if integers and np.isin(array, (0, 1)).all():
        return array.astype(bool)
    got = f"{array.dtype} values other than 0 and 1" if integers else str(array.dtype)
    raise AttnlabError(f"the {kind} mask holds booleans (True where attending was allowed) or 0/1 integers, got {got}")


def switched_off(
    entries: object, kinds: Sequence[str], n_layers: int, n_heads: int
) -> dict[tuple[str, int], list[int]]:
    """{(kind, layer): sorted heads} from a trace's `meta["heads_off"]` ([[kind, layer, head], ...]
    by model index, as the recorder writes it; tuples too), refusing in one line what is no such
    list, an unknown kind, or a layer or head outside the model's `n_layers` and `n_heads` (head 9
    of a 4-head model switched nothing off in rollout, silently)."""
    if not (isinstance(entries, list | tuple) and all(isinstance(e, list | tuple) and len(e) == 3 for e in entries)):
        raise AttnlabError(f"the trace's heads_off is a list of [kind, layer, head], got {entries!r}")
    off: dict[tuple[str, int], set[int]] = {}
    for kind, layer, head in entries:
        if kind not in kinds:
            raise AttnlabError(f"the trace's heads_off names an unknown attention kind {kind!r}; choose from {kinds}")
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in (layer, head)) or not (
            0 <= layer < n_layers and 0 <= head < n_heads
        ):
            raise AttnlabError(
                f"the trace's heads_off names head {head!r} of {kind} layer {layer!r}: the model's layers are "
                f"[0, {n_layers}) and its heads are [0, {n_heads})"
            )
        off.setdefault((kind, int(layer)), set()).add(int(head))
    return {point: sorted(heads) for point, heads in off.items()}
