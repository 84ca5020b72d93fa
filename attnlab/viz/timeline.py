"""Training dynamics from probe traces: one head's change against the final model, and a head
statistic across the saved steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Real

from bokeh.models import (
    Legend,
    LegendItem,
    Span,
)
from bokeh.palettes import Category10
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.trace import AttentionTrace, check_flag
from attnlab.viz.axes import cell_px
from attnlab.viz.cells import TITLE_MIN_PX
from attnlab.viz.colors import DIFF_PALETTE
from attnlab.viz.fonts import use_fonts
from attnlab.viz.head import matrix_figure
from attnlab.viz.labels import TITLE_LINE_PX, spelled, title_px, wrap_title
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_map
from attnlab.viz.words import kind_title, say

AXIS_PX = 180  # the value axis's length in a curve 260 px high, less its title and the step axis


def diff_figure(
    trace: AttentionTrace,
    reference: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    budget: int = 420,
    title: str | None = None,
    name: str = "timeline-diff",
    words: Mapping[str, str] | None = None,
    mask: bool = True,
) -> figure:
    """weights(trace) − weights(reference) for one head (e.g. a training step minus the final
    model, or one model minus another on the same sentence pair), the forbidden cells hatched
    with `mask` where both traces forbid them. `words` replaces any of `viz.words.WORDS` (the title's
    "timeline.diff_title", the hover's "head.*")."""
    check_options(title=title, budget=budget)
    said = say(words)
    now, final = head_map(trace, kind, layer, head), head_map(reference, kind, layer, head)
    for axis, ours, theirs in zip(("query", "key"), trace.labels(kind), reference.labels(kind), strict=True):
        if ours != theirs:  # (shapes alone were checked: two sentences of one length were subtracted)
            n = _first_difference(ours, theirs)
            a, b = (labels[n] if n < len(labels) else None for labels in (ours, theirs))
            raise AttnlabError(f"the traces read other pieces ({axis} {n}: {a!r} vs {b!r}): not the same sentence pair")
    q_labels, k_labels = map(spelled, trace.labels(kind))
    # forbidden where both forbid: a restricted model's band against a global one's map, hatched
    # with the first's alone, hid differences of up to 0.98 as "weight 0"
    allowed = trace.mask(kind) | reference.mask(kind) if check_flag(mask, "mask") else None
    # its own title wrapped to the map's cells: on one line it set the width (the Spanish one ran
    # 148 px past a 1024 px window, wider than the step's map beside it)
    own = said["timeline.diff_title"].format(kind=kind_title(kind, said), layer=layer, head=head)
    cells = int(len(k_labels) * cell_px(len(k_labels), budget)) + 90
    return matrix_figure(
        now - final, q_labels, k_labels, allowed=allowed, vmin=-1.0, vmax=1.0, palette=DIFF_PALETTE,
        title=title or wrap_title(own, max(cells, TITLE_MIN_PX)), budget=budget,
        value_name=said["timeline.diff_value"], name=name, words=said,
    )  # fmt: skip


def _first_difference(ours: list[str], theirs: list[str]) -> int:
    """The first position where two lists of pieces differ (one may be the other's start)."""
    same = 0
    while same < min(len(ours), len(theirs)) and ours[same] == theirs[same]:
        same += 1
    return same


def timeline_curve(
    steps: Sequence[int],
    values: dict[str, Sequence[float]],
    current: int | None = None,
    stat: str = "entropy",
    words: Mapping[str, str] | None = None,
    name: str = "timeline-curve",
) -> figure:
    """A head statistic across training steps, one line per head (`values`: {legend label: one
    value per step}); a vertical line at `current`. `stat` names the statistic; `words` replaces
    the title's and the step axis's templates ("timeline.*" of `viz.words.WORDS`)."""
    steps = _numbers(steps, "steps")
    if not isinstance(values, Mapping):  # None was an AttributeError
        raise AttnlabError(f"values is {{legend label: one value per step}}, got {type(values).__name__}")
    for label in values:
        if not isinstance(label, str):
            raise AttnlabError(f"values' legend labels are strings, got {label!r}")
    values = {label: _numbers(ys, f"values[{label!r}]") for label, ys in values.items()}
    for label, ys in values.items():
        if len(ys) != len(steps):  # a curve of other length was drawn against the steps without a word
            raise AttnlabError(f"values[{label!r}] has {len(ys)} values for {len(steps)} steps: one per step")
    if current is not None and not (isinstance(current, Real) and not isinstance(current, bool)):
        raise AttnlabError(f"current is a step (a number) or None, got {current!r}")
    said = say(words)
    title = wrap_title(said["timeline.title"].format(stat=stat), 460 - 60)  # less the value axis
    fig = figure(
        width=460,
        height=260 + TITLE_LINE_PX * title.count("\n"),
        tools="save,reset,wheel_zoom",
        title=title,
        name=name,
    )
    palette = Category10[10]
    items = []
    for i, (label, ys) in enumerate(values.items()):
        line = fig.line(list(steps), list(ys), color=palette[i % 10], line_width=2)
        dots = fig.scatter(list(steps), list(ys), color=palette[i % 10], size=5)
        items.append(LegendItem(label=label, renderers=[line, dots]))
    fig.add_layout(Legend(items=items, label_text_font_size="9px"), "right")
    if current is not None:
        fig.add_layout(Span(location=current, dimension="height", line_color="#d62728", line_dash="dashed"))
    # the value axis names `stat` only where it fits along the plot's side (the whole of "entropy
    # (encoder–decoder attention layer 2)" ran off both ends); the title holds it anyway
    fig.xaxis.axis_label, fig.yaxis.axis_label = said["timeline.step"], stat if title_px(stat) <= AXIS_PX else ""
    return use_fonts(fig, said)


def _numbers(values: object, name: str) -> list[float]:
    """`values` as a list when it is a sequence of numbers (NaN too: a step without a value)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise AttnlabError(f"{name} is a sequence of numbers, got {type(values).__name__}")
    listed = list(values)
    for value in listed:
        if isinstance(value, bool) or not isinstance(value, Real):
            raise AttnlabError(f"{name} is a sequence of numbers, got {value!r} in it")
    return listed
