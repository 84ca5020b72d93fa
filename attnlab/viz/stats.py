"""Head statistics (`attnlab.record.stats.head_stats` rows) as a sortable table and a scatter
that share one source: selecting a head in one selects it in the other.
"""

from __future__ import annotations

from collections.abc import Sequence

from bokeh.models import (
    ColumnDataSource,
    DataTable,
    HoverTool,
    NumberFormatter,
    StringFormatter,
    TableColumn,
)
from bokeh.plotting import figure

from attnlab.viz.colors import (
    KIND_COLORS,
)
from attnlab.viz.fonts import use_fonts

STAT_COLUMNS = ("entropy", "distance", "self", "prev", "next", "first", "eos", "max")


def stats_source(rows: Sequence[dict]) -> ColumnDataSource:
    """`attnlab.record.stats.head_stats` rows as one source that the table and the scatter share
    (selecting a head in one selects it in the other)."""
    data: dict[str, list] = {name: [r[name] for r in rows] for name in ("kind", "layer", "head", *STAT_COLUMNS)}
    data["label"] = [f"{r['kind']} L{r['layer']} H{r['head']}" for r in rows]
    data["color"] = [KIND_COLORS[r["kind"]] for r in rows]
    return ColumnDataSource(data)


def stats_table(source: ColumnDataSource, height: int = 320) -> DataTable:
    """Sortable table (click a header), one row per head."""
    number = NumberFormatter(format="0.000")
    columns = [TableColumn(field="kind", title="kind", formatter=StringFormatter(), width=70)]
    columns += [TableColumn(field=name, title=name, width=45) for name in ("layer", "head")]
    columns += [TableColumn(field=name, title=name, formatter=number, width=65) for name in STAT_COLUMNS]
    table = DataTable(
        source=source,
        columns=columns,
        width=720,
        height=height,
        sortable=True,
        index_position=None,
        selectable=True,
        name="stats-table",
    )
    return use_fonts(table)


def stats_scatter(source: ColumnDataSource, x: str = "entropy", y: str = "distance") -> figure:
    """One dot per head, coloured by kind; tap a dot to select that head."""
    fig = figure(
        width=460,
        height=360,
        tools="tap,box_select,wheel_zoom,pan,reset,save",
        title=f"heads: {x} vs {y}",
        name="stats-scatter",
    )
    renderer = fig.scatter(
        x=x,
        y=y,
        source=source,
        color="color",
        legend_field="kind",
        size=10,
        alpha=0.8,
        selection_color="#d62728",
        nonselection_alpha=0.3,
    )
    fig.add_tools(
        HoverTool(renderers=[renderer], tooltips=[("head", "@label"), (x, f"@{x}{{0.000}}"), (y, f"@{y}{{0.000}}")])
    )
    fig.xaxis.axis_label, fig.yaxis.axis_label = x, y
    fig.legend.location = "top_left"
    return use_fonts(fig)
