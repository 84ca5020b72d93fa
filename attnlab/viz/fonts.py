"""The fonts every view writes with: one stack of families that together have Latin and
accented letters, CJK, Hebrew and Arabic, and sentencepiece's ▁.

In a browser the stack is a CSS `font-family` list: `use_fonts` puts it on every text property of
a bokeh layout (axis labels, titles, legends, colour bars, text glyphs) and on the HTML parts
(tooltips, tables, divs) through bokeh's `--bokeh-base-font`, in one call at the end of each view.
The browser takes each character from the first family that has it. For the PNG export the same
families are font files that Pillow opens (`png_fonts`); a label is drawn in the first font that
has all its characters, or run by run when no one font does (`text_runs`). On Debian the CJK
families come from `fonts-noto-cjk` (`make browser` installs it).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Mapping
from typing import Any, TypeVar

from bokeh.core.property.dataspec import DataSpec
from bokeh.core.property.vectorization import value
from bokeh.model import Model
from bokeh.models import GlobalInlineStyleSheet, LayoutDOM, Plot
from PIL import ImageFont

from attnlab.viz.words import name_tools, say

FONT_FAMILIES = (
    "Noto Sans",  # Latin, Greek, Cyrillic, accents
    "DejaVu Sans",  # the same, plus Hebrew, Arabic and ▁; on every Debian
    "Noto Sans CJK SC",  # Chinese, Japanese kana, Korean hangul (fonts-noto-cjk)
    "Source Han Sans SC",  # the same font under Adobe's name
    "WenQuanYi Micro Hei",
    "PingFang SC",  # macOS
    "Microsoft YaHei",  # Windows
    "Noto Sans Hebrew",
    "Noto Sans Arabic",
    "sans-serif",
)
FONT_STACK = ", ".join(f if f == "sans-serif" else f'"{f}"' for f in FONT_FAMILIES)

# The same families as files Pillow can open (it searches the system's font folders for a bare
# name): (file, family within a collection or None), first choice first.
PNG_FONT_FILES: tuple[tuple[str, str | None], ...] = (
    ("DejaVuSans.ttf", None),
    ("NotoSans-Regular.ttf", None),
    ("NotoSansCJK-Regular.ttc", "Noto Sans CJK SC"),
    ("NotoSansCJKsc-Regular.otf", None),
    ("SourceHanSansSC-Regular.otf", None),
    ("wqy-microhei.ttc", None),
    ("PingFang.ttc", "PingFang SC"),
    ("msyh.ttc", None),
    ("NotoSansHebrew-Regular.ttf", None),
    ("NotoSansArabic-Regular.ttf", None),
)
BASE_FONT_CSS = f":host {{ --bokeh-base-font: {FONT_STACK}; }}"  # bokeh's HTML parts read this
TOOLTIP_CSS = f".bk-Tooltip {{ --bokeh-base-font: {FONT_STACK}; }}"
MISSING = "\U0010fffd"  # a private-use code point no font draws: what a missing glyph looks like

Layout = TypeVar("Layout", bound=Model)


def use_fonts(root: Layout, words: Mapping[str, str] | None = None) -> Layout:
    """Put `FONT_STACK` on every text property of `root` and of every model it holds, and on its
    HTML parts (tooltips, table cells, divs), which read bokeh's `--bokeh-base-font`; and name
    its toolbar's tools in `words` ("tool.*" of `viz.words.WORDS`, `words.name_tools`): the one
    pass every view makes over what it drew."""
    name_tools(root, say(words))
    for model in root.references():
        for name in model.properties():
            if name.endswith("text_font"):
                spec = isinstance(model.lookup(name).property, DataSpec)
                setattr(model, name, value(FONT_STACK) if spec else FONT_STACK)
        if isinstance(model, LayoutDOM) and BASE_FONT_CSS not in model.stylesheets:
            # A string, not an InlineStyleSheet: Panel's Bokeh pane copies a figure's stylesheets
            # into its own parameter, which takes strings only.
            model.stylesheets = [*model.stylesheets, BASE_FONT_CSS]
        if isinstance(model, Plot):
            _tooltip_fonts(model)
    return root


def _tooltip_fonts(fig: Plot) -> None:
    """Tooltips hang off the page's <body>, outside the figure: only a sheet in <head> reaches
    them. It rides on the toolbar (a Panel pane copies the figure's own stylesheets into a
    parameter that takes strings only); a figure shown without one gets a hidden one inside
    the frame, which takes no room, so that the sheet is installed."""
    toolbar = fig.toolbar
    if any(getattr(s, "css", None) == TOOLTIP_CSS for s in toolbar.stylesheets):
        return
    toolbar.stylesheets = [*toolbar.stylesheets, GlobalInlineStyleSheet(css=TOOLTIP_CSS)]
    if fig.toolbar_location is None:
        fig.update(toolbar_location="right", toolbar_inner=True)
        toolbar.visible = False


@functools.lru_cache(maxsize=16)
def png_fonts(size: int) -> tuple[Any, ...]:
    """The `PNG_FONT_FILES` this system has, opened at `size` pixels; Pillow's own (Latin-only)
    font when it has none of them."""
    fonts = []
    for file, family in PNG_FONT_FILES:
        font = _open(file, family, size)
        if font is not None:
            fonts.append(font)
    if not fonts:
        try:
            fonts.append(ImageFont.load_default(size=size))
        except TypeError:  # Pillow < 10.1 has only the bitmap font
            fonts.append(ImageFont.load_default())
    return tuple(fonts)


def _open(file: str, family: str | None, size: int) -> Any:
    for index in range(12 if family else 1):  # a collection's faces are numbered
        try:
            font = ImageFont.truetype(file, size, index=index)
        except OSError:
            return None
        if family is None or font.getname()[0] == family:
            return font
    return None


@functools.lru_cache(maxsize=65536)
def has_glyph(font: Any, char: str) -> bool:
    """Whether `font` draws `char` as itself: a missing glyph is drawn as the font's .notdef box
    (tofu), the same bitmap as `MISSING`'s. Invisible characters (spaces, marks of direction,
    joiners) count as present: every font can leave a space."""
    if unicodedata.category(char) in ("Zs", "Cf", "Cc") or not char.strip():
        return True
    return _bitmap(font, char) != _bitmap(font, MISSING)


@functools.lru_cache(maxsize=65536)
def _bitmap(font: Any, text: str) -> tuple:
    mask = font.getmask(text)
    return mask.size, bytes(mask)


def text_runs(text: str, fonts: tuple[Any, ...]) -> list[tuple[Any, str]]:
    """`text` as (font, run) pairs: one run in the first font that has every character, else
    each character in the first font that has it (combining marks stay with their base)."""
    for font in fonts:
        if all(has_glyph(font, c) for c in text):
            return [(font, text)]
    runs: list[tuple[Any, str]] = []
    for char in text:
        if runs and unicodedata.category(char) in ("Mn", "Mc", "Me"):
            font = runs[-1][0]
        else:
            font = next((f for f in fonts if has_glyph(f, char)), fonts[0])
        if runs and runs[-1][0] is font:
            runs[-1] = (font, runs[-1][1] + char)
        else:
            runs.append((font, char))
    return runs


def text_length(text: str, fonts: tuple[Any, ...]) -> float:
    """Width in pixels of `text` drawn by `draw_text`."""
    return sum(font.getlength(run) for font, run in text_runs(text, fonts))


def draw_text(draw: Any, xy: tuple[float, float], text: str, fonts: tuple[Any, ...], *, align: str = "left") -> None:
    """Draw `text` with its left (or right) end at x and its middle at y, font by font. A run is
    laid out by Pillow (with raqm: shaped, and a right-to-left run in its own direction); runs
    of several fonts are placed left to right in the order they come."""
    x, y = xy
    if align == "right":
        x -= text_length(text, fonts)
    ascent, descent = fonts[0].getmetrics()
    baseline = y + (ascent - descent) / 2  # the middle of the first font's letters at y
    for font, run in text_runs(text, fonts):
        draw.text((x, baseline), run, fill="black", font=font, anchor="ls")
        x += font.getlength(run)
