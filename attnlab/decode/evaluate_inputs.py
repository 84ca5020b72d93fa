"""What `attnlab evaluate` reads, checked before it scores: a blank line of `--src` or `--ref`;
and for `--task align`, where `--save-best` writes, the word counts that gold links must fall
inside (`--input`), and whether a gold file read from 0 was written from 1 (no link uses word 0).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from attnlab.data.tokenizer import is_blank
from attnlab.decode.alignment import split_pair
from attnlab.decode.pharaoh import Links
from attnlab.errors import AttnlabError, CheckpointError, ModelInputError
from attnlab.model.checkpoint import verify

LINES_WITHOUT_ZERO = 3  # lines with links, none at word 0, from which a 0-indexed reading is suspect


def save_best_target(checkpoint: str, model: Any) -> Path:
    """The checkpoint --save-best writes into, checked before every head is scored: given a run
    directory, this failed "not an attnlab checkpoint" only after minutes of scoring. A run
    directory's is its newest valid checkpoint, the one `load` opened and the heads are read in."""
    target = Path(model.path)
    if not (target / "manifest.json").exists() and model.meta.get("imported_from", {}).get("marian"):
        raise AttnlabError(
            f"--save-best: {checkpoint} is a Marian directory read in memory; "
            "save it as an attnlab checkpoint with `attnlab import marian` first"
        )
    try:
        verify(target, deep=False)
    except CheckpointError as error:
        raise AttnlabError(f"--save-best: {error}") from None
    if not os.access(target, os.W_OK | os.X_OK):  # update_meta renames new files over the old
        raise AttnlabError(f"--save-best: no permission to write in {target}")
    if target != Path(checkpoint):
        print(
            f"attnlab evaluate: --save-best: {checkpoint} is a run directory: saving in its newest valid checkpoint, "
            f"{target}",
            file=sys.stderr,
        )
    return target


def refuse_blank(lines: list[str], name: str, needs: str) -> None:
    """Refuse the first blank line of `lines` (FILE:LINE): a blank source decodes to nothing and a
    blank reference scores whatever stands beside it against nothing, both without a word."""
    blank = next((i for i, line in enumerate(lines) if is_blank(line)), None)
    if blank is not None:
        raise AttnlabError(f"{name}:{blank + 1}: the line is empty; every line needs {needs}")


def word_counts(line: str) -> tuple[int, int] | None:
    """(left, right) words of a `source ||| target` line in the file's order of sides, as the
    gold links count them; None for a line that is not a pair (it is scored as no links)."""
    try:
        left, right = split_pair(line)
    except ModelInputError:
        return None
    return len(left), len(right)


def one_indexed_hint(gold: list[tuple[Links, Links]], name: str) -> str | None:
    """What to say when no link of a gold file read from 0 uses word 0 on either side, though
    `LINES_WITHOUT_ZERO` of its lines or more have links: a sentence's first words are nearly
    always linked (all but 3 of 447 lines of the shared en-fr gold, 4 of 225 of the zh-en), so
    the file was most likely written from 1, which read from 0 gives a wrong AER without a word
    (97.95 for 93.17 on five zh-en lines). None when nothing looks wrong."""
    linked = [possible for _, possible in gold if possible]
    if len(linked) < LINES_WITHOUT_ZERO or any(0 in link for links in linked for link in links):
        return None
    return (
        f"{name}: no link of its {len(linked)} linked lines uses word 0 on either side: is the file 1-indexed? "
        "pass --gold-one-indexed"
    )


def script_hint(meta: dict[str, Any], tgt_lang: str | None, refs: list[str], name: str) -> str | None:
    """What to say when the model's training data had its target side converted to another script
    (Tatoeba's Chinese: OpenCC t2s, in `meta.data.tatoeba.script`) and references are not: the
    corpus's own traditional references scored en→zh 18 BLEU under the same outputs converted
    (37.3 for 55.7 on five lines), without a word. None when nothing differs."""
    script = meta.get("data", {}).get("tatoeba", {}).get("script", {})
    if not script or script.get("side") != tgt_lang or tgt_lang != "zh":
        return None
    from attnlab.data.tatoeba import to_simplified  # lazy: opencc, for a Chinese model's references only

    changed = sum(a != b for a, b in zip(refs, to_simplified(refs), strict=True))
    if not changed:
        return None
    return (
        f"{name}: {changed} of {len(refs)} references change under OpenCC t2s (traditional script), and this model "
        "writes simplified Chinese (its training data was converted): convert them for a fair score "
        "(attnlab.data.tatoeba.to_simplified, or opencc -c t2s)"
    )
