"""The page's frame, as CSS that Panel's own layouts lack: the inputs beside the views, and under
them in a window too narrow for both; tab titles on two lines rather than cut at the window's edge."""

from __future__ import annotations

import panel as pn

from attnlab.viz.cells import FIT_PX

# Tab titles go onto a second line where they do not fit (Bokeh cut them at the window's edge,
# and "Logit lens" could not be clicked in a 1024 px window).
TABS_CSS = ".bk-headers-wrapper { flex-wrap: wrap; }"


def page_row(inputs: pn.Column, views: pn.Column) -> pn.Row:
    """`inputs` (a fixed-width column) beside `views`, which narrow with the window down to their
    grids' narrowest (`FIT_PX`, and its margins); in a narrower window `views` go under `inputs`,
    as wide as the window (at 900 px the page scrolled 60 px sideways, the logit lens 110).
    The row takes the window's width and may be narrower than its content, or it never wraps."""
    views.styles = {**views.styles, "min-width": f"{FIT_PX + 10}px"}
    return pn.Row(inputs, views, sizing_mode="stretch_width", styles={"flex-wrap": "wrap", "min-width": "0"})
