"""The page's frame, as CSS that Panel's own layouts lack: the inputs beside the views, and over
them, side by side, in a window too narrow for both; tab titles on two lines rather than cut at
the window's edge."""

from __future__ import annotations

import panel as pn

from attnlab.viz.cells import FIT_PX

# Tab titles go onto a second line where they do not fit (Bokeh cut them at the window's edge,
# and "Logit lens" could not be clicked in a 1024 px window).
TABS_CSS = ".bk-headers-wrapper { flex-wrap: wrap; }"
# Where the keyboard is: Bokeh's own ring, a 1 px dotted grey line, was barely visible on its grey
# buttons and not at all on the blue one. Each widget draws in its own shadow root, so each gets it.
FOCUS_CSS = ":focus-visible { outline: 2px solid #1a5fb4 !important; outline-offset: 2px; }"  # (over `.bk-btn:focus`)
INPUTS_PX = 350  # each inputs column (a checkpoint's long name, the beam and α side by side)


def focus_ring(layout: pn.viewable.Viewable) -> None:
    """Give every widget and tab title in `layout` a ring that shows where the keyboard is."""
    for part in (*layout.select(pn.widgets.Widget), *layout.select(pn.Tabs)):
        part.stylesheets = [*part.stylesheets, FOCUS_CSS]


def page_row(inputs: tuple[pn.Column, pn.Column], views: pn.Column) -> pn.Row:
    """The two `inputs` columns (the model; the text and how to decode it), one above the other,
    beside `views`, which narrow with the window down to their grids' narrowest (`FIT_PX`, and
    its margins). In a narrower window `views` go under the inputs, as wide as the window (at
    900 px the page scrolled 60 px sideways, the logit lens 110), and the inputs, alone on their
    line, grow to the window's width and stand side by side: the views start ~250 px higher (at
    1,000 × 768 not one map showed). The growth is the flex rule's: the inputs grow 1 and the
    views 1,000 shares of what is left, so beside the views the inputs keep their width."""
    views.styles = {**views.styles, "flex": "1000 1 0", "min-width": f"{FIT_PX + 10}px"}
    for column in inputs:
        column.width = INPUTS_PX
    block = pn.FlexBox(
        *inputs,
        flex_wrap="wrap",
        css_classes=["attn-inputs"],
        styles={"flex": f"1 1 {INPUTS_PX}px", "column-gap": "20px"},
    )
    return pn.Row(block, views, sizing_mode="stretch_width", styles={"flex-wrap": "wrap", "min-width": "0"})
