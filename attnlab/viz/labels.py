"""Pieces as text on a screen: how wide they are (a CJK character takes two columns), where they
may be cut (never inside a character and its combining marks, a surrogate pair or an emoji
sequence), and how they are wrapped so that right-to-left pieces and lone combining marks do not
disturb the labels around them. Every view labels tokens through `piece_label`.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

from attnlab.data.tokenizer import BYTE_PIECE, DOTTED_CIRCLE

ELLIPSIS = "…"
OPEN_BOX = "␣"  # a space spelled as bytes, as editors show one
FSI, PDI = "\u2068", "\u2069"  # first-strong isolate ... pop directional isolate (Unicode bidi, UAX #9)
ARROW = "→"  # between a piece and what it was changed into
LABEL_WIDTH = 14  # columns a label may take on an axis before it is cut
# Pixels per column of a figure's title (bold, 13 px): DejaVu Sans Bold averages ~7.4 over a
# title's letters and spaces; a CJK character counts two columns (~13 px drawn).
TITLE_COLUMN_PX = 8.0
TITLE_LINE_PX = 17  # the height one more line of a title takes


def _joins_previous(char: str, previous: str) -> bool:
    """Whether `char` belongs to the cluster `previous` ends (a simplified UAX #29)."""
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")  # combining marks
        or char == "\u200d"  # zero-width joiner
        or previous == "\u200d"  # ... and the character it joins
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0100 <= code <= 0xE01EF
        or 0x1F3FB <= code <= 0x1F3FF  # skin-tone modifiers
        or 0xE0020 <= code <= 0xE007F  # emoji tag characters
        or 0x1160 <= code <= 0x11FF  # conjoining Hangul vowels and final consonants
        or (0xDC00 <= code <= 0xDFFF and 0xD800 <= ord(previous) <= 0xDBFF)  # a pair of lone surrogates
    )


def clusters(text: str) -> list[str]:
    """`text` split into what a reader sees as one character: a base with its combining marks,
    an emoji sequence, a surrogate pair (from text decoded with `surrogatepass`), a flag."""
    out: list[str] = []
    for char in text:
        if out and _joins_previous(char, out[-1][-1]):
            out[-1] += char
        elif out and _is_flag_half(char) and len(out[-1]) == 1 and _is_flag_half(out[-1]):
            out[-1] += char  # two regional indicators make one flag
        else:
            out.append(char)
    return out


def _is_flag_half(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def cluster_width(cluster: str) -> int:
    """Columns one cluster takes: 2 for wide and full-width (CJK, kana, hangul, most emoji),
    0 for a cluster of invisible characters only, else 1."""
    if all(unicodedata.category(c) in ("Mn", "Me", "Cf") for c in cluster):
        return 0
    base = next(c for c in cluster if unicodedata.category(c) not in ("Mn", "Me", "Cf"))
    return 2 if unicodedata.east_asian_width(base) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Columns `text` takes in a monospaced terminal (and, roughly, in ems × 2 in a proportional font)."""
    return sum(cluster_width(c) for c in clusters(text))


def short_label(label: str, width: int = LABEL_WIDTH) -> str:
    """`label` cut to `width` columns with an ellipsis, only between clusters."""
    if display_width(label) <= width:
        return label
    kept, used = [], 0
    for cluster in clusters(label):
        used += cluster_width(cluster)
        if used > width - 1:  # one column for the ellipsis
            break
        kept.append(cluster)
    return "".join(kept) + ELLIPSIS


def _valid(text: str) -> str:
    """Surrogates (text decoded with `surrogatepass`/`surrogateescape`) as what a page can hold:
    a pair as the character it encodes, a lone one as U+FFFD."""
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def is_rtl(text: str) -> bool:
    """Whether `text` holds a right-to-left letter (Hebrew, Arabic, Syriac, Thaana, N'Ko, ...)."""
    return any(unicodedata.bidirectional(c) in ("R", "AL") for c in text)


def piece_label(label: str, width: int | None = LABEL_WIDTH, *, isolate: bool = True) -> str:
    """A piece as a view shows it: cut to `width` columns (None: whole, e.g. for a tooltip),
    surrogates made valid, a lone leading combining mark shown on a dotted circle, and a right-to-left piece wrapped in
    FSI … PDI so that it is laid out in its own direction and cannot reorder what a view puts
    next to it (" (3)" in a tooltip, the ellipsis). `isolate=False` for text drawn alone by a
    layout engine that finds each string's direction itself (Pillow with raqm)."""
    text = _valid(label)
    text = text if width is None else short_label(text, width)
    if text and unicodedata.category(text[0]) in ("Mn", "Mc", "Me"):
        text = DOTTED_CIRCLE + text
    return FSI + text + PDI if isolate and is_rtl(text) else text


def spelled(pieces: Sequence[str]) -> list[str]:
    """`pieces` with the UTF-8 bytes a tokenizer spells a character it lacks in (byte fallback:
    "我" is <0xE6> <0x88> <0x91>) named by that character, each byte with its place ("我 1/3",
    "我 2/3", "我 3/3"), and an ASCII byte as itself (the EN→DE model spells digits: the axes of
    "2012" read <0x32> <0x30> <0x31> <0x32>), a space of any kind as "␣" (the no-break space the
    model writes between "2012" and a number is <0xC2> <0xA0>: "␣ 1/2", "␣ 2/2"). Bytes that make
    no character, or an invisible one (cut short, a control such as <0x01>), keep their piece."""
    shown = list(pieces)
    values = [int(m.group(1), 16) if (m := BYTE_PIECE.match(piece)) else None for piece in pieces]
    i = 0
    while i < len(values):
        n = 0 if values[i] is None else _utf8_length(values[i])
        run = values[i : i + n]
        try:
            char = bytes(run).decode("utf-8") if n and len(run) == n and None not in run else ""
        except UnicodeDecodeError:  # (a lead byte followed by bytes that continue no character)
            char = ""
        char = OPEN_BOX if char.isspace() else char  # a space of another kind (no-break, a tab): seen as one
        if not (char and char.isprintable()):
            i += 1
            continue
        shown[i : i + n] = [char] if n == 1 else [f"{char} {k}/{n}" for k in range(1, n + 1)]
        i += n
    return shown


def _utf8_length(lead: int) -> int:
    """The bytes of the UTF-8 character byte `lead` starts (0: it starts none)."""
    for length, low, high in ((1, 0x00, 0x7F), (2, 0xC2, 0xDF), (3, 0xE0, 0xEF), (4, 0xF0, 0xF4)):
        if low <= lead <= high:
            return length
    return 0


def piece_word(piece: str) -> str:
    """A piece as prose names it (a title, a line of text): whole, without sentencepiece's word mark
    "▁", which the axes keep to show where words begin (a title named “▁Hund” where the menu of
    pieces and the line under it said “Hund”)."""
    return piece_label(piece.lstrip("\u2581") or piece, None)


def change_label(before: str, after: str, width: int | None = LABEL_WIDTH) -> str:
    """A piece changed into another ("▁man→▁woman"), each side as `piece_label` shows it, cut to
    half of `width` columns (None: whole). A right-to-left side is isolated on its own, so the
    arrow points from the first to the second piece in any script."""
    side = None if width is None else max(width // 2, 2)
    return f"{piece_label(before, side)}{ARROW}{piece_label(after, side)}"


def title_px(text: str, column_px: float = TITLE_COLUMN_PX) -> int:
    """Pixels a title needs, estimated per column (a CJK character counts two), with no font."""
    return math.ceil(column_px * display_width(text))


def wrap_title(text: str, pixels: float) -> str:
    """`text` broken into lines (bokeh draws a title's "\\n" as a new line) of at most `pixels`
    by `title_px`: at spaces, and inside a run of wide characters (Chinese has no spaces), never
    inside a cluster. A small figure's title is otherwise cut at the canvas's edge."""
    lines: list[str] = []
    line, cut = "", False  # `cut`: the last line began inside a word
    for word in text.split(" "):
        joined = f"{line} {word}" if line else word
        if title_px(joined) <= pixels or not line and title_px(word) <= pixels:
            line, cut = joined, cut and bool(line)
            continue
        if line:
            lines.append(line)
        line, cut = "", False
        for cluster in clusters(word):  # a word wider than a line: cut between its clusters
            closing = unicodedata.category(cluster[0]) in ("Pe", "Pf", "Po")  # "）", "。" end a line
            if line and title_px(line + cluster) > pixels and not closing:
                opening = unicodedata.category(line[-1]) in ("Ps", "Pi")  # "（" begins one: it goes too
                lines.append(line[:-1] if opening and len(line) > 1 else line)
                line, cut = line[-1] if opening and len(line) > 1 else "", True
            line += cluster
    before = clusters(lines[-1]) if cut else []
    if len(clusters(line)) == 1 and display_width(line) == 2 and len(before) > 2 and display_width(before[-1]) == 2:
        # one Chinese character alone on the last line ("…的运" / "行"): its neighbour comes down too
        moved = 2 if unicodedata.category(before[-2][0]) in ("Ps", "Pi") else 1  # (not leaving a "（" behind)
        lines[-1], line = "".join(before[:-moved]), "".join(before[-moved:]) + line
    return "\n".join([*lines, line])
