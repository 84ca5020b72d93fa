"""Which head a view means: a trace's maps are numbered by row, the model's heads and layers by
their own ids (a trace may hold a subset: `record(heads=[1, 3], layers=[-1])`), and every view
names a head and a layer as the model does. Bad selections are one-line errors that say what the
trace holds, in English: the screens put their own lead line in the page's language before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

import numpy as np
from bokeh.events import Tap
from bokeh.models import TapTool

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace


def head_ids(trace: AttentionTrace) -> list[int]:
    """The model's id of each head a trace holds, in the order of its maps' rows: with
    `record(heads=[1, 3])` row 0 is head 1, and a view must say "head 1", not "head 0"."""
    check_trace(trace, "the trace")
    return list(trace.heads) if trace.heads is not None else list(range(trace.n_heads))


def model_layer(trace: AttentionTrace, kind: str, layer: int) -> int:
    """The model's index of `layer` (a negative one counts from the model's top, as
    `AttentionTrace.attention` counts it), or a one-line error for a layer the trace lacks."""
    check_trace(trace, "the trace")
    return trace.layer_index(kind, layer)  # (True was read as layer 1 here: `int(layer)` before the check)


def model_head(trace: AttentionTrace, head: int) -> int:
    """The model's id of `head` (a negative one counts from the model's last head, as
    `AttentionTrace.head_row` counts it), or a one-line error for a head the trace lacks."""
    return head_ids(trace)[trace.head_row(head)]


def head_map(trace: AttentionTrace, kind: str, layer: int, head: int) -> np.ndarray:
    """(q, k) weights of model head `head` (one of `head_ids`) at `layer` (as `model_layer`
    reads it), with a clear error for a layer or head the trace does not hold."""
    check_trace(trace, "the trace")
    return trace.attention(kind, model_layer(trace, kind, layer))[trace.head_row(head)]


def pick(wanted: object, held: Sequence[int], what: str, from_end: bool = True, count: int | None = None) -> int:
    """`wanted` out of the ids there are (a trace's layers of a kind or its heads, a beam's
    ranks), a negative one counting from the end with `from_end` (-1: the last); anything else
    is a one-line error naming them, where a widget would raise traitlets' TraitError. With
    `count` (the model's layers or heads, of which `held` are some), a negative one counts from
    the model's end, as `AttentionTrace.attention` counts it: -1 is the model's top layer, held
    or not (it was the top layer held, which `viz.heatmap` refused on the same trace)."""
    if isinstance(wanted, Integral) and not isinstance(wanted, bool):  # True was head 1
        if wanted in held:
            return int(wanted)
        if from_end and wanted < 0:
            index = wanted + count if count is not None else held[wanted] if -len(held) <= wanted else None
            if index in held:
                return int(index)
    choices = ", ".join(map(str, held))
    if from_end and held:
        whole = count is None or list(held) == list(range(count))
        choices += (
            " (-1: the last)" if whole else f" (or {', '.join(str(h - count) for h in held)} from the model's last)"
        )
    raise AttnlabError(f"no {what} {wanted!r}: choose from {choices or 'nothing yet'}")


def selection(
    trace: AttentionTrace, kind: str, layer: int | None = None, head: int | None = None
) -> tuple[str, int | None, int | None]:
    """What a user asked for (`show(trace, kind, layer, head)`, a click on the grid) as the
    model's (kind, layer, head): a negative layer or head counts from the model's last, as
    `AttentionTrace.attention` and every `viz` figure count it (-1: the top layer, the last
    head), None stays None."""
    if kind not in trace.kinds:
        raise AttnlabError(f"this trace has no {kind!r} attention: it holds {', '.join(trace.kinds)}")
    held = trace.layers[kind]
    layer = None if layer is None else pick(layer, held, f"{kind} layer", count=_model_count(trace, "n_layers", held))
    heads = head_ids(trace)
    head = None if head is None else pick(head, heads, "head", count=_model_count(trace, "n_heads", heads))
    return kind, layer, head


def _model_count(trace: AttentionTrace, name: str, held: Sequence[int]) -> int:
    """The model's layers or heads (`name`), as the trace's own readings count them."""
    return int(trace.model.get("config", {}).get(name, max(held, default=-1) + 1))


def within(resolve: Callable[[], tuple[int, int]]) -> tuple[int, int]:
    """A grid's `selected` (layer, head) as `resolve` reads it among the layers and heads drawn,
    its one-line error led by the argument's name."""
    try:
        return resolve()
    except AttnlabError as error:
        raise AttnlabError(f"selected: {error}") from None


def on_tap(fig: Any, pick: Callable[[Any, Any], tuple[int, int] | None], on_select: Callable[..., None] | None) -> None:
    """Call `on_select(*cell)` when `fig` is tapped on a cell, `pick(x, y)` finding which (in a
    Bokeh server or Panel session); `pick` returns None off the cells and for what a crafted tap
    sends that is not a point."""
    if on_select is None:
        return
    for tool in fig.select({"type": TapTool}):  # a tap opens, it does not select: selecting a cell faded the rest
        tool.behavior = "inspect"

    def tapped(event: Tap) -> None:
        cell = pick(event.x, event.y)
        if cell is not None:
            on_select(*cell)

    fig.on_event(Tap, tapped)


def check_on_select(on_select: object, of: str = "(layer, head)") -> None:
    """A figure's tap callback is a function of `of` (a grid's: (layer, head)), or None (123
    failed at the first tap)."""
    if on_select is not None and not callable(on_select):
        raise AttnlabError(f"on_select is a function of {of} or None, got {on_select!r}")
