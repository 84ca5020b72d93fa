"""A grid of coloured cells, each labelled with a word or a number: the logit lens (a layer's
first choice at each position) and head importance (each head's value) are drawn this way."""

from __future__ import annotations

from bokeh.models import ColumnDataSource, GlyphRenderer, LinearColorMapper
from bokeh.plotting import figure


def labelled_cells(
    fig: figure, source: ColumnDataSource, value: str, mapper: LinearColorMapper, font_size: str, text_name: str
) -> GlyphRenderer:
    """Unit cells at the source's (x, y), filled by its `value` column through `mapper`, with its
    `label` column written on them in its `text_color`; the cells' renderer (named "cells", which
    the hover and the tests read) and the text's (`text_name`)."""
    cells = fig.rect(
        x="x", y="y", width=1, height=1, source=source, line_color="white",
        fill_color={"field": value, "transform": mapper}, name="cells",
    )  # fmt: skip
    fig.text(
        x="x", y="y", text="label", source=source, text_align="center", text_baseline="middle",
        text_font_size=font_size, text_color="text_color", name=text_name,
    )  # fmt: skip
    return cells
