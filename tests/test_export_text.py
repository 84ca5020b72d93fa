"""The text the PNG and SVG exports draw: line breaks, controls and XML's forbidden characters in a
title or a token, and lone surrogates in the words and titles given to the views."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from test_viz import synthetic_trace

from attnlab import viz
from attnlab.errors import AttnlabError
from attnlab.record.trace import AttentionTrace
from attnlab.viz.export import _drawable

SVG = "{http://www.w3.org/2000/svg}"
BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
NOT_XML = {"\x00": r"\x00", "\x01": r"\x01", "\x1f": r"\x1f", "\ufffe": r"\ufffe", "\uffff": r"\uffff"}


@pytest.fixture(scope="module")
def trace() -> AttentionTrace:
    return synthetic_trace()


def with_token(trace: AttentionTrace, token: str) -> AttentionTrace:
    """`trace` with its second source token replaced by `token`."""
    return replace(trace, src_tokens=[trace.src_tokens[0], token, *trace.src_tokens[2:]])


def svg_texts(svg: str) -> list[str]:
    """The SVG's `<text>` contents; parsing it is the check that it is XML."""
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


@pytest.mark.parametrize("brk", BREAKS)
def test_a_line_break_in_a_title_or_token_is_drawn_as_a_space(trace: AttentionTrace, brk: str) -> None:
    """A newline in a translated "head.title" (or U+2029, \\x1d in a token) was RuntimeError
    "raqm_layout() failed" from Pillow in both exports; now each export is the one for a space."""
    for export in (viz.heatmap_png, viz.heatmap_svg):
        broken = export(trace, "cross", 0, 0, words={"head.title": f"line1{brk}line2", "head.weight": f"w{brk}"})
        assert broken == export(trace, "cross", 0, 0, words={"head.title": "line1 line2", "head.weight": "w "})
        assert export(with_token(trace, f"▁a{brk}b"), "cross", 0, 0) == export(with_token(trace, "▁a b"), "cross", 0, 0)


@pytest.mark.parametrize(("char", "shown"), NOT_XML.items())
def test_characters_xml_forbids_are_shown_by_name_and_the_svg_parses(
    trace: AttentionTrace, char: str, shown: str
) -> None:
    """NUL, \\x01 or U+FFFE in a title, the bar's word or a token made SVG that did not parse."""
    words = {"head.title": f"t{char}", "head.weight": f"w{char}"}
    texts = svg_texts(viz.heatmap_svg(with_token(trace, f"▁a{char}"), "cross", 0, 0, words=words))
    assert {f"t{shown}", f"w{shown}", f"▁a{shown}"} <= set(texts)
    assert viz.heatmap_png(with_token(trace, f"▁a{char}"), "cross", 0, 0, words=words)[:4] == b"\x89PNG"


def test_ordinary_text_is_drawn_byte_for_byte() -> None:
    """Only controls and the two noncharacters change: a tab, letters of every script, marks of
    direction, joiners, the paper's notation and markup stay as they are."""
    text = "a\tb é ü 我 한 עברית عربي \u2068x\u2069 \u200b\u200d 👩\u200d💻 QKᵀ/√d_k −∞ <&> ␣ \u2581 \ufffd \U0010fffd"
    assert _drawable(text) == text
    assert _drawable("line1\r\nline2\x00") == "line1 line2\\x00"


@pytest.mark.parametrize(
    "draw",
    [
        lambda t, w: viz.heatmap_png(t, "cross", 0, 0, words=w),
        lambda t, w: viz.heatmap_svg(t, "cross", 0, 0, words=w),
        lambda t, w: viz.heatmap(t, "cross", 0, 0, words=w),
        lambda t, w: viz.grid(t, "cross", words=w),
    ],
)
def test_a_lone_surrogate_in_words_is_refused_at_the_call(trace: AttentionTrace, draw: object) -> None:
    """It was drawn, and the SVG or page raised UnicodeEncodeError only when written to a file."""
    with pytest.raises(
        AttnlabError, match=r"^words\['head.title'\] is not valid Unicode \(it holds a lone surrogate\)$"
    ):
        draw(trace, {"head.title": "x\ud800"})


def test_a_lone_surrogate_in_a_title_is_refused_at_the_call(trace: AttentionTrace) -> None:
    fig = viz.heatmap(trace, "cross", 0, 0)
    for draw in (
        lambda: viz.standalone_html(fig, title="\ud800"),
        lambda: viz.heatmap(trace, "cross", 0, 0, title="\udfff"),
    ):
        with pytest.raises(AttnlabError, match=r"^title is not valid Unicode \(it holds a lone surrogate\)$"):
            draw()
    assert viz.standalone_html(fig, title="x\U0001f600").encode("utf-8")  # a real pair is fine
