"""Pharaoh link files: one line of `i-j` links (word i of a sentence pair's left side, word j of
its right side) per sentence pair, as human gold alignments and `attnlab align` write them.

Gold marks sure links `i-j` and possible ones `i?j` or `ipj`; `read_pharaoh` returns both sets per
line, 0-indexed whatever the file counts from. Given the pairs' word counts it also checks every
link against them, so a gold file written from 1 and read as 0-indexed, or one that belongs to
other sentences, is one line naming FILE:LINE instead of a silently wrong AER. `link_set` checks
links handed over in Python (what `aer` and `corpus_aer` score) as strictly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from numbers import Integral

from attnlab.data.corpora import read_text
from attnlab.errors import AttnlabError

Links = set[tuple[int, int]]
_ONE_LINK_A_LINE = re.compile(r"\s*\d+\s+\d+\s+\d+(\s+[SP])?(\s+[0-9.]+)?\s*$")  # sentence i j [S|P] [confidence]
_LINK = re.compile(r"^(\d+)([-?p])(\d+)$")
SPLIT_PAST = 3  # a link under this many words past its pair, and not otherwise explained: other word boundaries


def read_pharaoh(
    path_or_lines: str | os.PathLike | Iterable[str],
    one_indexed: bool = False,
    reverse: bool = False,
    lengths: Sequence[tuple[int, int] | None] | None = None,
    name: str | None = None,
    from_one: str = "pass --gold-one-indexed",
    swapped: str | None = None,
) -> list[tuple[Links, Links]]:
    """(sure, possible) links per line of a Pharaoh file: `i-j` sure, `i?j` or `ipj` possible
    (the possible set includes the sure links). `one_indexed` for gold written from 1 (the
    shared alignment sets); `reverse` swaps the sides (links written target-source). `lengths`:
    the (left, right) word counts of each line's sentence pair (after `reverse`; None where
    unknown), which every link must fall inside. `name` starts the messages (default: the path);
    `from_one` is what to do about a file written from 1, said where a link is one word past its pair,
    and `swapped` about one whose sides are swapped, said where the link fits its pair read the other way
    (default: pass --reverse-gold, or leave it out where `reverse` is on)."""
    if isinstance(path_or_lines, (str, os.PathLike)):
        lines, name = read_text(path_or_lines), name or str(path_or_lines)
    else:
        lines, name = list(path_or_lines), name or "links"
    if lengths is not None and len(lengths) != len(lines):
        raise AttnlabError(f"{name} has {len(lines)} lines but there are {len(lengths)} sentence pairs")
    shift = 1 if one_indexed else 0
    # a file that links word 0 anywhere was not written from 1: a link past its pair is not asked
    # so (gold on "runs ." for a pair's "runs." was told --gold-one-indexed, then refused for its 0)
    from_zero = (
        lengths is not None
        and not one_indexed
        and any(m is not None and 0 in (int(m[1]), int(m[3])) for line in lines for m in map(_LINK.match, line.split()))
    )
    out = []
    for number, line in enumerate(lines, 1):
        sure: Links = set()
        possible: Links = set()
        for token in line.split():
            match = _LINK.match(token)
            if match is None and _ONE_LINK_A_LINE.match(line):  # the original Hansards files
                raise AttnlabError(
                    f"{name}:{number}: {line.strip()!r} is a link of the NAACL 2003 format (`sentence i j [S|P]`, one "
                    "link a line); attnlab reads Pharaoh lines, one a sentence pair (i-j sure, i?j possible)"
                )
            if match is None:
                raise AttnlabError(f"{name}:{number}: {token!r} is not a link (i-j, i?j or ipj)")
            i, j = int(match[1]) - shift, int(match[3]) - shift
            if i < 0 or j < 0:
                raise AttnlabError(f"{name}:{number}: {token!r} has index 0 in a 1-indexed file")
            link = (j, i) if reverse else (i, j)
            if lengths is not None and lengths[number - 1] is not None:
                turned = swapped or ("leave out --reverse-gold" if reverse else "pass --reverse-gold")
                advice = (from_one if not (one_indexed or from_zero) else "", turned)
                _check_inside(link, lengths[number - 1], f"{name}:{number}: {token!r}", advice)
            possible.add(link)
            if match[2] == "-":
                sure.add(link)
        out.append((sure, possible))
    return out


def _check_inside(link: tuple[int, int], length: tuple[int, int], where: str, advice: tuple[str, str]) -> None:
    """A link past the end of its sentence. An index equal to the word count is the mark of a
    1-indexed file read from 0, and a link that fits the pair read the other way, of swapped sides
    (both can be: the question asks both); `advice` says what to do about each ("" for no question).
    Neither, and only a word or two past, is the mark of other word boundaries (gold on "runs ." for
    a pair's "runs."), which was said only as a link past the pair."""
    if link[0] < length[0] and link[1] < length[1]:
        return
    asked = {
        "is the file 1-indexed": advice[0] and (link[0] == length[0] or link[1] == length[1]),
        "are its sides swapped": advice[1] and link[1] < length[0] and link[0] < length[1],
    }
    questions = [question for question, fits in asked.items() if fits]
    said = dict.fromkeys(text for text, fits in zip(advice, asked.values(), strict=True) if fits)  # (once each)
    hint = f"; {', or '.join(questions)}? {'; '.join(said)}" if questions else ""
    if not questions and max(link[0] - length[0], link[1] - length[1]) < SPLIT_PAST:
        hint = "; were its sentences cut into words otherwise than the pairs' (at spaces: `runs.` is one word)?"
    raise AttnlabError(f"{where} points past the sentence pair's {length[0]} and {length[1]} words{hint}")


def format_pharaoh(links: Iterable[tuple[int, int]]) -> str:
    """One line of 0-indexed `i-j` links, sorted."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def link_set(links: object, what: str) -> Links:
    """`links` as a set of (source_word, target_word) pairs, refused in one line unless it is
    one (None, or a line of text in its place, was a TypeError from deep inside `set`)."""
    if isinstance(links, str | bytes) or not isinstance(links, Iterable):
        raise AttnlabError(f"the {what} links are (source_word, target_word) pairs, got {type(links).__name__}")
    found = set()
    for link in links:
        if not (
            isinstance(link, tuple | list)
            and len(link) == 2
            and all(isinstance(i, Integral) and not isinstance(i, bool) for i in link)
        ):
            raise AttnlabError(f"a {what} link is a (source_word, target_word) pair of word indices, got {link!r}")
        found.add((int(link[0]), int(link[1])))
    return found
