"""What `attnlab evaluate` reads, checked before it scores: options nothing would read, an input
that is a directory, a blank line of `--src` or `--ref`; and for `--task align`, where
`--save-best` writes, the word counts that gold and --hyp links must fall inside (`--input`), and
whether a gold file read from 0 was written from 1 (no link uses word 0); and, once the checkpoint
is open, references or sources in a script its languages are not written in.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from attnlab.data.tokenizer import HAN, UNSPACED, is_blank, mostly_han
from attnlab.decode.alignment import split_pair
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import Links
from attnlab.errors import AttnlabError, CheckpointError, ModelInputError
from attnlab.model.checkpoint import verify
from attnlab.record.saliency import check_samples

LINES_WITHOUT_ZERO = 3  # lines with links, none at word 0, from which a 0-indexed reading is suspect
ALIGNMENT_ONLY = ("gold", "gold-one-indexed", "reverse-gold", "all-heads", "save-best", "input", "reverse-input")
ALIGNMENT_ONLY += ("links", "threshold", "samples")  # (a BLEU was printed with them ignored)
TEXT_ONLY = ("ref", "tokenize", "metric", "tokenized", "out")  # what --task align reads none of (--out wrote nothing)


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
    for where in (target, target.parent):  # update_meta assembles the checkpoint beside it and renames it in
        if not os.access(where, os.W_OK | os.X_OK):
            raise AttnlabError(f"--save-best: no permission to write in {where}")
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


def one_indexed_hint(gold: list[tuple[Links, Links]], name: str, advice: str = "pass --gold-one-indexed") -> str | None:
    """What to say when no link of a gold file read from 0 uses word 0 on either side, though
    `LINES_WITHOUT_ZERO` of its lines or more have links: a sentence's first words are nearly
    always linked (all but 3 of 447 lines of the shared en-fr gold, 4 of 225 of the zh-en), so
    the file was most likely written from 1, which read from 0 gives a wrong AER without a word
    (97.95 for 93.17 on five zh-en lines). `advice`: what to do about it. None when nothing looks
    wrong. A --hyp file is asked too: the gold's sure links written from 1 scored AER 69.44, exit 0."""
    linked = [possible for _, possible in gold if possible]
    if len(linked) < LINES_WITHOUT_ZERO or any(0 in link for links in linked for link in links):
        return None
    return (
        f"{name}: no link of its {len(linked)} linked lines uses word 0 on either side: is the file 1-indexed? {advice}"
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


def opened(
    args: argparse.Namespace, refs: list[str], sources: list[str] | None
) -> tuple[Any, str, str | None, dict[str, Any]]:
    """The checkpoint `evaluate` decodes with or reads the task and target language from, with its
    task, target language and meta; references (or sources) in a script its target (or source) language
    is not written in are refused before any decoding. Chinese references for an en→de model scored
    BLEU 0.0 after the whole decode, exit 0: a wrong file, never said."""
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    data = model.meta.get("data", {})
    for flag, lines, lang, does in (
        ("--ref", refs, data.get("tgt_lang"), "writes"),
        ("--src", sources, data.get("src_lang"), "reads"),
    ):
        if lines is None or lang is None or model.task == "parse":
            continue
        if lang not in UNSPACED and mostly_han(lines):
            raise AttnlabError(f"{flag} {getattr(args, flag[2:])}: the lines are Chinese, and this model {does} {lang}")
        if lang == "zh" and not any(HAN.search(line) for line in lines):
            raise AttnlabError(
                f"{flag} {getattr(args, flag[2:])}: no line has a Chinese character, and this model {does} zh"
            )
    return model, args.task or model.task, data.get("tgt_lang"), model.meta


def refuse_unused(args: argparse.Namespace) -> None:
    """Options nothing would read: decoding options where nothing is decoded (`--hyp out.de --beam 8
    --dtype bf16` ignored both; alignment reads its pairs teacher-forced from --input), alignment options
    outside `--task align`, `--save-best` and `--samples` without `--all-heads`, `--hyp` with it (the
    model's readings were scored, the links dropped), and a `--samples` SmoothGrad cannot take. (--src
    with --hyp is refused once the task is known: a parse reads trees' words there.)"""
    aligning = [f"--{n}" for n in ALIGNMENT_ONLY if getattr(args, n.replace("-", "_"))]
    if aligning and args.task != "align":  # they were read by nothing: a BLEU was printed as if
        raise AttnlabError(f"{aligning[0]} is an alignment option: give it with --task align")
    scoring_text = [f"--{n}" for n in TEXT_ONLY if getattr(args, n)]
    if scoring_text and args.task == "align":
        raise AttnlabError(f"{scoring_text[0]} scores translations or parses: --task align reads --hyp and --gold")
    if args.save_best and not args.all_heads:  # there was no best reading to save, and no word said so
        raise AttnlabError("--save-best saves the best of --all-heads' readings: give it with --all-heads")
    if args.samples is not None and not args.all_heads:  # (--hyp's links are given: no gradient is read)
        raise AttnlabError("--samples is SmoothGrad's for the saliency reading: give it with --all-heads")
    if args.samples is not None:  # (refused by the saliency reading, after every other had been scored)
        check_samples(args.samples, "--samples")
    if args.all_heads and args.hyp:
        raise AttnlabError(
            "--all-heads scores the model's readings and --hyp given links, not both: drop --hyp to rank "
            "--checkpoint's readings, or --all-heads to score --hyp's links"
        )
    read_by = {"reverse-input": args.reverse_input, "links": args.links, "threshold": args.threshold}
    reading = [f"--{name}" for name, value in read_by.items() if value is not None and value is not False]
    if args.task == "align" and args.hyp and reading:  # the same AER whatever they said, exit 0
        raise AttnlabError(f"{reading[0]} is how --all-heads reads the model's links; --hyp's are scored as given")
    if args.task == "align" and args.hyp and args.checkpoint:  # the links were scored, exit 0, the model unread
        raise AttnlabError(
            "--checkpoint is read by --all-heads, and --hyp's links are scored as given: drop --checkpoint, "
            "or align with it first (attnlab align --checkpoint CKPT --input PAIRS --out LINKS)"
        )
    given = [f"--{name}" for name in ("beam", "alpha", "patience", "dtype") if getattr(args, name) is not None]
    given += ["--truncate"] * args.truncate + ["--src"] * bool(args.src and args.task == "align")  # (never read)
    if args.task == "align":
        given = [flag for flag in given if flag != "--dtype" or not args.all_heads]  # --all-heads runs the model
        if given:
            raise AttnlabError(f"{given[0]} is a decoding option, and --task align decodes nothing (teacher-forced)")
    elif args.hyp and given:
        raise AttnlabError(f"{given[0]} is a decoding option, and --hyp scores given outputs: nothing is decoded")
