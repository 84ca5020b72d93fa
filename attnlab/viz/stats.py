"""Head statistics (`attnlab.record.stats.head_stats` rows) as a sortable table and a scatter
that share one source: selecting a head in one selects it in the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from numbers import Real

from bokeh.models import (
    ColumnDataSource,
    DataTable,
    HoverTool,
    Legend,
    LegendItem,
    NumberFormatter,
    StringFormatter,
    TableColumn,
)
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.stats import head_pattern
from attnlab.record.trace import whole_number
from attnlab.viz.colors import (
    KIND_COLORS,
)
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import title_px
from attnlab.viz.words import kind_name, say

STAT_COLUMNS = ("entropy", "distance", "self", "prev", "next", "first", "eos", "max")


def stats_source(rows: Sequence[dict], words: Mapping[str, str] | None = None) -> ColumnDataSource:
    """`attnlab.record.stats.head_stats` rows as one source that the table and the scatter share
    (selecting a head in one selects it in the other); the kinds' names (`kind_name`, shown in
    the table and the legend) and each head's hover label (`label`) are written in `words`."""
    if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):  # None was a TypeError
        raise AttnlabError(f"stats_source takes the list head_stats(trace) returns, got {type(rows).__name__}")
    if not all(isinstance(row, Mapping) for row in rows):
        kinds = sorted({type(row).__name__ for row in rows if not isinstance(row, Mapping)})
        raise AttnlabError(f"stats_source takes head_stats(trace) rows (dicts), got {', '.join(kinds)}")
    for n, row in enumerate(rows, 1):  # a row of other keys was a KeyError
        lacks = [name for name in ("kind", "layer", "head", *STAT_COLUMNS) if name not in row]
        if lacks or row["kind"] not in KIND_COLORS:
            what = (
                f"lacks {', '.join(lacks)}"
                if lacks
                else f"has kind {row['kind']!r}, not one of {', '.join(KIND_COLORS)}"
            )
            raise AttnlabError(f"stats_source takes head_stats(trace) rows: row {n} {what}")
    said = say(words)
    data: dict[str, list] = {name: [r[name] for r in rows] for name in ("kind", "layer", "head", *STAT_COLUMNS)}
    data["kind_name"] = [kind_name(r["kind"], said) for r in rows]
    data["label"] = [
        said["stats.label"].format(kind=kind_name(r["kind"], said), layer=r["layer"], head=r["head"]) for r in rows
    ]
    data["color"] = [KIND_COLORS[r["kind"]] for r in rows]
    # what each head does, named short: sortable, so that the positional heads or the sinks stand together
    data["pattern"] = [said[f"stats.pattern.{head_pattern(r)[0]}"] if "diagonal" in r else "" for r in rows]
    return ColumnDataSource(data)


def stats_table(source: ColumnDataSource, height: int = 320, words: Mapping[str, str] | None = None) -> DataTable:
    """Sortable table (click a header), one row per head; its headers are `words`' "stats.*",
    escaped: BokehJS writes a header as HTML, and Spanish names the eos column "</s>", a tag."""
    _check_source(source, "stats_table")
    if not (whole_number(height) and height > 0):  # "320" was bokeh's validation error, 0 an empty table
        raise AttnlabError(f"stats_table: height (pixels) must be a whole number > 0, got {height!r}")
    said = say(words)
    number = NumberFormatter(format="0.000")
    # as wide as the longest kind's name: "decodificador" was cut to "decodifica…" in 70 px
    kind_px = max(70, max((title_px(name) for name in source.data["kind_name"]), default=0) + 16)
    columns = [
        TableColumn(field="kind_name", title=escape(said["stats.kind"]), formatter=StringFormatter(), width=kind_px)
    ]
    columns += [TableColumn(field=name, title=escape(said[f"stats.{name}"]), width=45) for name in ("layer", "head")]
    columns += [
        TableColumn(field="pattern", title=escape(said["stats.pattern"]), formatter=StringFormatter(), width=100)
    ]
    columns += [
        TableColumn(field=name, title=escape(said.get(f"stats.{name}", name)), formatter=number, width=65)
        for name in STAT_COLUMNS
    ]
    table = DataTable(
        source=source,
        columns=columns,
        width=820,
        # as wide as the window allows, up to its columns' 820 px; narrower, it scrolls inside its
        # own box (a fixed 720 px ran 56 px past a 1024 px window)
        sizing_mode="stretch_width",
        max_width=820,
        min_width=240,
        autosize_mode="none",
        height=height,
        sortable=True,
        reorderable=False,  # (dragging columns needs jquery-ui, which BokehJS warned of on every page)
        index_position=None,
        selectable=True,
        name="stats-table",
    )
    return use_fonts(table)


def stats_scatter(
    source: ColumnDataSource, x: str = "entropy", y: str = "distance", words: Mapping[str, str] | None = None
) -> figure:
    """One dot per head, coloured by kind; tap a dot to select that head. `x` and `y` are columns
    (`STAT_COLUMNS`), named on the axes as `words`' "stats.*" name them."""
    _check_source(source, "stats_scatter")
    plottable = [name for name, values in source.data.items() if all(isinstance(v, Real) for v in values)]
    for axis, column in (("x", x), ("y", y)):  # a column the source lacks ("diagonal") drew an empty plot
        if not (isinstance(column, str) and column in plottable):
            raise AttnlabError(
                f"stats_scatter: {axis}={column!r} is not a column of the source; choose from {', '.join(plottable)}"
            )
    said = say(words)
    x_name, y_name = said.get(f"stats.{x}", x), said.get(f"stats.{y}", y)
    fig = figure(
        width=460,
        height=360,
        tools="tap,box_select,wheel_zoom,pan,reset,save",
        title=said["stats.title"].format(x=x_name, y=y_name),
        name="stats-scatter",
    )
    renderer = fig.scatter(
        x=x,
        y=y,
        source=source,
        color="color",
        size=10,
        alpha=0.8,
        selection_color="#d62728",
        nonselection_alpha=0.3,
    )
    fig.add_tools(
        HoverTool(
            renderers=[renderer],
            tooltips=[
                (said["stats.head"], "@label"),
                (said["stats.pattern"], "@pattern"),
                (x_name, f"@{x}{{0.000}}"),
                (y_name, f"@{y}{{0.000}}"),
            ],
        )
    )
    fig.xaxis.axis_label, fig.yaxis.axis_label = x_name, y_name
    # under the plot, not in it: in its top-left corner the legend hid the heads that sat there
    kinds = LegendItem(label={"field": "kind_name"}, renderers=[renderer])
    fig.add_layout(Legend(items=[kinds], orientation="horizontal", location="center"), "below")
    return use_fonts(fig, said)


def _check_source(source: object, caller: str) -> None:
    """The table and the scatter draw a `stats_source`; head_stats rows given in its place were
    bokeh's "Failed to auto-convert" or validation error."""
    if not isinstance(source, ColumnDataSource):
        raise AttnlabError(f"{caller} takes stats_source(head_stats(...)), got {type(source).__name__}")
