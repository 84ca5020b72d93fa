"""Figures that leave the app: a head as PNG (Pillow) or SVG (vector text), and a self-contained
HTML page with bokeh's JavaScript inlined. No browser and no network needed.

Labels are real text in the SVG (`<text>` in `FONT_STACK`, a cut piece's whole text in its
`<title>`) and real glyphs in the PNG: each label is drawn in the first system font that has all
its characters (CJK from Noto Sans CJK, Hebrew and Arabic from DejaVu Sans), see `viz.fonts`.
Every word either draws (titles, the colour bar's word, tokens) goes through `_drawable` first.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
from bokeh.document import Document
from bokeh.embed import file_html
from bokeh.io.doc import patch_curdoc
from bokeh.models import (
    Div,
    LayoutDOM,
)
from bokeh.resources import INLINE
from PIL import Image, ImageDraw

from attnlab.errors import AttnlabError
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace, check_flag
from attnlab.viz.axes import label_stride
from attnlab.viz.colors import (
    PALETTE,
    choice_rows,
    color_scale,
    colorize,
    hatch,
)
from attnlab.viz.fonts import FONT_STACK, draw_text, has_glyph, png_fonts, text_length, use_fonts
from attnlab.viz.head import head_title
from attnlab.viz.labels import display_width, piece_label, spelled, title_px
from attnlab.viz.options import check_options
from attnlab.viz.selection import head_map
from attnlab.viz.words import say

_BAR_PX = 200  # the colour bar's height in both exports
_STAND_INS = {"\u2581": "_", "–": "-"}  # for a system with none of the fonts (Pillow's own lacks these)
SUMMARY_PX = 640  # the standalone page's summary block: as wide as a heatmap's budget and its labels
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where `str.splitlines` breaks a line
# Each line break as a space; every other control but the tab, and the two noncharacters XML 1.0
# forbids, as its escape ("\x01", "\ufffe"), in ASCII that every font draws.
_UNDRAWABLE = {code: ascii(chr(code))[1:-1] for code in (*range(0x20), *range(0x7F, 0xA0), 0xFFFE, 0xFFFF)}
_UNDRAWABLE |= {ord(char): " " for char in _BREAKS}
del _UNDRAWABLE[0x09]


def _drawable(text: str) -> str:
    """`text` as one line that both exports can draw, ordinary text unchanged. A line break
    (a newline in a translated title, or U+2029) made Pillow's layout fail ("raqm_layout()
    failed") in the PNG and in measuring the SVG's title; a one-line title can only show it as
    the space it stood for (one for a "\\r\\n"). Other controls (NUL, U+0001) and U+FFFE/U+FFFF
    made SVG that is not XML and are nothing a reader could see, so they are shown by name
    (a space would hide that the text holds them). Lone surrogates are left alone: `say` and
    `check_options` refuse them in words and titles, `piece_label` replaces them in tokens (and
    joins a pair)."""
    return text.replace("\r\n", "\n").translate(_UNDRAWABLE)


def _texts(
    trace: AttentionTrace, kind: str, layer: int, head: int, words: Mapping[str, str] | None
) -> tuple[list[str], list[str], str, str]:
    """What both exports write, made `_drawable`: the query and key labels (`spelled`), the title
    and the colour bar's word. Labels are made drawable before they are cut, so that an escape
    counts towards a label's width."""
    q_labels, k_labels = ([_drawable(s) for s in spelled(labels)] for labels in trace.labels(kind))
    title = _drawable(head_title(trace, kind, layer, head, words))
    return q_labels, k_labels, title, _drawable(say(words)["head.weight"])


def _png_text(text: str, fonts: tuple[Any, ...]) -> str:
    for char, stand_in in _STAND_INS.items():
        if char in text and not any(has_glyph(f, char) for f in fonts):
            text = text.replace(char, stand_in)
    return text


def heatmap_png(
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    *,
    mask: bool = True,
    vmax: float | None = 1.0,
    words: Mapping[str, str] | None = None,
) -> bytes:
    """The head heatmap as a PNG drawn with Pillow: cells, hatched mask, token labels, colour bar
    (titled `words`' "head.weight"); its title is `words`' "head.title" (`viz.words.WORDS`)."""
    weights = head_map(trace, kind, layer, head)
    q_labels, k_labels, title, bar_word = _texts(trace, kind, layer, head, words)
    q, k = weights.shape
    cell = int(np.clip(720 // max(q, k, 1), 2, 28))
    fonts = png_fonts(max(8, min(13, cell - 3)))  # (13 px letters in 13 px cells touched their neighbours)
    stride_q, stride_k = label_stride(q, q * cell), label_stride(k, k * cell)
    q_text = [_png_text(piece_label(s, isolate=False), fonts) for s in q_labels]
    k_text = [_png_text(piece_label(s, isolate=False), fonts) for s in k_labels]
    text_w = max((text_length(s, fonts) for s in q_text + k_text), default=10)
    left, top, bar = int(text_w) + 12, int(text_w) + 40, 70
    title_fonts = png_fonts(14)
    title, bar_word = _png_text(title, title_fonts), _png_text(bar_word, fonts)
    bar_x = left + k * cell + 12
    # As wide as the title and the bar's word, as tall as the colour bar (200 px) with its lower label's half line.
    width = max(left + k * cell + bar, 12 + math.ceil(text_length(title, title_fonts)))
    width = max(width, bar_x + 6 + math.ceil(text_length(bar_word, fonts)))
    height = top + max(q * cell, _BAR_PX) + 16
    scale = color_scale(choice_rows(weights, trace.mask(kind)), vmax)  # as the heatmap on screen
    cells = hatch(colorize(weights, 0.0, scale), trace.mask(kind) if check_flag(mask, "mask") else None, cell)
    image = Image.new("RGB", (width, height), "white")
    image.paste(Image.fromarray(cells), (left, top))
    draw = ImageDraw.Draw(image)
    draw_text(draw, (6, 6 + 8), title, title_fonts)
    for i in range(0, q, stride_q):
        draw_text(draw, (left - 6, top + i * cell + cell / 2), q_text[i], fonts, align="right")
    column_labels = Image.new("RGB", (top - 30, k * cell), "white")  # drawn sideways, then rotated
    column_draw = ImageDraw.Draw(column_labels)
    for j in range(0, k, stride_k):
        draw_text(column_draw, (4, j * cell + cell / 2), k_text[j], fonts)
    image.paste(column_labels.rotate(90, expand=True), (left, 30))
    ramp = colorize(np.linspace(scale, 0.0, _BAR_PX)[:, None].repeat(12, 1), 0.0, scale)
    image.paste(Image.fromarray(ramp), (bar_x, top))
    draw_text(draw, (bar_x, top - 20), bar_word, fonts)  # clear of the "1.00" (权重 touched it at top - 12)
    for value, y in ((scale, top), (0.0, top + _BAR_PX - 1)):
        draw_text(draw, (left + k * cell + 28, y), f"{value:.2f}", fonts)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def heatmap_svg(
    trace: AttentionTrace,
    kind: str,
    layer: int,
    head: int,
    *,
    mask: bool = True,
    vmax: float | None = 1.0,
    words: Mapping[str, str] | None = None,
) -> str:
    """The head heatmap as SVG: vector text; cells as rects (or, past 10,000 cells, an embedded
    image); its title is `words`' "head.title", its colour bar's "head.weight" (`viz.words.WORDS`)."""
    weights = head_map(trace, kind, layer, head)
    q_labels, k_labels, title, bar_word = _texts(trace, kind, layer, head, words)
    q, k = weights.shape
    cell = float(np.clip(720 / max(q, k, 1), 2, 24))
    font = max(7.0, min(12.0, cell * 0.8))
    widest = max((display_width(piece_label(s)) for s in list(q_labels) + list(k_labels)), default=4)
    left = top = 8 + 0.62 * font * widest
    top += 24
    # As wide as the title (14 px, measured in the PNG's fonts, the stack's first families, or
    # estimated per column where wider), as tall as the colour bar and its "0.00" below it.
    title_w = max(text_length(title, png_fonts(14)), title_px(title, 8.0))
    width, height = max(left + k * cell + 80, title_w + 12), top + max(q * cell, _BAR_PX) + 12
    scale = color_scale(choice_rows(weights, trace.mask(kind)), vmax)  # as the heatmap on screen
    allowed = trace.mask(kind) if check_flag(mask, "mask") else np.ones((q, k), bool)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="{html.escape(FONT_STACK)}">',
        '<defs><pattern id="masked" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#e0e0e0"/><line x1="0" y1="0" x2="0" y2="6" stroke="#969696" stroke-width="2"/></pattern>'
        '<linearGradient id="bar" x1="0" y1="1" x2="0" y2="0">'
        + "".join(f'<stop offset="{i / 10:.1f}" stop-color="{PALETTE[min(255, int(i * 25.6))]}"/>' for i in range(11))
        + "</linearGradient></defs>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="6" y="18" font-size="14">{html.escape(title)}</text>',
    ]
    rgb = colorize(weights, 0.0, scale)
    if q * k <= 10_000:
        for i in range(q):
            for j in range(k):
                fill = "url(#masked)" if not allowed[i, j] else "#" + bytes(rgb[i, j]).hex()
                parts.append(
                    f'<rect x="{left + j * cell:.2f}" y="{top + i * cell:.2f}" width="{cell:.2f}" height="{cell:.2f}" fill="{fill}"><title>{weights[i, j]:.4f}</title></rect>'
                )
    else:
        buffer = io.BytesIO()
        Image.fromarray(hatch(rgb, allowed, 4)).save(buffer, format="PNG")
        data = base64.b64encode(buffer.getvalue()).decode()
        parts.append(
            f'<image x="{left}" y="{top}" width="{k * cell}" height="{q * cell}" preserveAspectRatio="none" style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>'
        )
    for i in range(0, q, label_stride(q, q * cell)):
        parts.append(
            f'<text x="{left - 4:.1f}" y="{top + (i + 0.5) * cell:.1f}" font-size="{font:.1f}" text-anchor="end" dominant-baseline="middle">{_svg_label(q_labels[i])}</text>'
        )
    for j in range(0, k, label_stride(k, k * cell)):
        x, y = left + (j + 0.5) * cell, top - 4
        parts.append(
            f'<text transform="translate({x:.1f},{y:.1f}) rotate(-90)" font-size="{font:.1f}" dominant-baseline="middle">{_svg_label(k_labels[j])}</text>'
        )
    bar_x = left + k * cell + 14
    parts.append(f'<rect x="{bar_x:.1f}" y="{top:.1f}" width="12" height="{_BAR_PX}" fill="url(#bar)" stroke="#999"/>')
    parts.append(f'<text x="{bar_x:.1f}" y="{top - 6:.1f}" font-size="10">{html.escape(bar_word)}</text>')
    parts.append(f'<text x="{bar_x + 16:.1f}" y="{top + 8:.1f}" font-size="10">{scale:.2f}</text>')
    parts.append(f'<text x="{bar_x + 16:.1f}" y="{top + _BAR_PX:.1f}" font-size="10">0.00</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _svg_label(piece: str) -> str:
    """A label's text, and when it was cut, the whole piece as its tooltip (`<title>`)."""
    shown = piece_label(piece)
    whole = f"<title>{html.escape(piece_label(piece, None))}</title>" if shown != piece_label(piece, None) else ""
    return html.escape(shown) + whole


# A <script src=...> or stylesheet <link href=...>: once Panel is imported (the explorer), bokeh's
# inline bundle also names Panel's extension files (`static/extensions/panel/...`) by relative URL.
_LINKED = re.compile(r"<script [^>]*src=\"[^\"]*\"[^>]*></script>\s*|<link [^>]*href=\"[^\"]*\"[^>]*>\s*")


def standalone_html(layout: Any, title: str | None = "attnlab", lang: str = "en") -> str:
    """One self-contained HTML file (bokeh's JavaScript inlined): opens offline, anywhere. Its
    text is set in `FONT_STACK` (`use_fonts`), whichever view made the layout. Files linked
    rather than inlined are dropped: a file opened from a disk reaches none of them, and the page
    draws bokeh's own models only, whose code is inline. What is not a bokeh figure or layout
    (a list of figures, a trace) is one line, not an AttributeError from `use_fonts`. `lang` is
    the page's language (`<html lang>`, BCP 47 such as "zh"): browsers pick the font of its
    script by it (bokeh's page said "en", also for the Chinese explorer's export)."""
    if not isinstance(layout, LayoutDOM):
        kind = type(layout).__name__
        raise AttnlabError(f"standalone_html takes a figure of attnlab.viz or a bokeh layout (column(...)), not {kind}")
    check_options(title=title)
    if not isinstance(lang, str) or not re.fullmatch(r"[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*", lang):
        raise AttnlabError(f"lang is a language tag such as 'en' or 'zh-Hans', got {lang!r}")
    title = "attnlab" if title is None else title  # bokeh's own was "Bokeh Application"
    # A document of its own to copy from: bokeh copies the current document's JS callbacks into
    # the file's, and in a server where a session has closed, the current one can be that
    # session's destroyed document (the explorer's "HTML page" was an AttributeError there).
    own = Document()
    with patch_curdoc(own):
        page = _LINKED.sub("", file_html(use_fonts(layout), INLINE, title))
    return page.replace('<html lang="en">', f'<html lang="{lang}">', 1)


def summary_div(trace: AttentionTrace, words: Mapping[str, str] | None = None) -> Div:
    """Source, output and model identity as a small HTML block (for the standalone page), its
    words ("export.*" of `viz.words.WORDS`) replaced by `words`. It is `SUMMARY_PX` wide, its
    lines wrapped inside (a 45-word source was one line of 1,586 px, and bokeh sized the block to
    its text in the default font, which the page's font stack then overran by a few pixels). The
    checkpoint is named by `checkpoint_label`."""
    said = {key: html.escape(value) for key, value in say(words).items()}
    meta = check_trace(trace, "the trace").meta
    text = html.escape(str(meta.get("text", " ".join(trace.src_tokens))))
    output = html.escape(str(meta.get("output", " ".join(trace.tgt_tokens))))
    model = html.escape(checkpoint_label(str(trace.model.get("checkpoint") or "")) or said["export.model"])
    weights = said["export.weights"].format(sha=html.escape(str(trace.model.get("weights_sha256", "?"))))
    return use_fonts(
        Div(
            text=f"<h2>attnlab</h2><p><b>{said['export.input']}</b>: <bdi>{text}</bdi></p>"
            f"<p><b>{said['export.output']}</b>: <bdi>{output}</bdi></p><p><small>{model} · {weights}</small></p>",
            width=SUMMARY_PX,
            styles={"overflow-wrap": "anywhere", "white-space": "normal", "padding-right": "8px"},
        )
    )


def checkpoint_label(name: str) -> str:
    """A checkpoint as a page shows it: the directory's own name where `name` is a path into the
    exporter's disk (absolute, from ~, or climbing with ..), else `name` as given (the explorer's,
    relative to its root): a page shared from a notebook showed "/home/…/checkpoints/tatoeba-en-zh"."""
    path = PurePath(name)
    return path.name if path.is_absolute() or name.startswith("~") or ".." in path.parts else name
