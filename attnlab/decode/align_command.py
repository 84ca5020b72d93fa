"""`attnlab align`: word links (Pharaoh `i-j`) read off a translation model's teacher-forced
attention, one line per `source ||| target` line, and the options it shares with `attnlab
evaluate --task align`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from attnlab.data.corpora import invalid_lines
from attnlab.decode.alignment import align_lines
from attnlab.decode.commands import EXIT_STATUS, add_checkpoint_argument
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import Links, format_pharaoh
from attnlab.decode.readings import METHODS, best_method, card_of, check_reading, reading, reading_name
from attnlab.decode.streams import check_out, read_input, write_out, write_stdout
from attnlab.errors import ArgumentParser, AttnlabError
from attnlab.record.saliency import check_samples


def add_alignment_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `align` and `evaluate --task align --all-heads` share."""
    add_checkpoint_argument(parser, required=False)
    parser.add_argument("--input", "-i", help="`source ||| target` word pairs, one per line (- for stdin)")
    parser.add_argument(
        "--reverse-input",
        action="store_true",
        help="the lines are `target ||| source` for this model; links stay in the file's order of sides",
    )
    parser.add_argument("--links", choices=["argmax", "threshold"], help="default argmax; threshold with --threshold")
    parser.add_argument("--threshold", type=float, help="link every weight ≥ this (--links threshold; default 0.1)")
    parser.add_argument(
        "--samples",
        type=int,
        help="saliency: average the gradient over this many noisy copies (SmoothGrad, as Ding et al. 2019; "
        "this many times slower); default: the model card's (--save-best keeps it), else 0, the plain gradient",
    )


def link_rule(args: argparse.Namespace) -> tuple[str, float]:
    """`--links` and `--threshold` as one rule: a `--threshold` alone means `--links threshold`
    (it was ignored, and argmax links came out); with `--links argmax` it is refused."""
    if args.threshold is not None and args.links == "argmax":
        raise AttnlabError("--threshold is for --links threshold; --links argmax links each word to its top key")
    links = args.links or ("threshold" if args.threshold is not None else "argmax")
    return links, 0.1 if args.threshold is None else args.threshold


def smoothing(samples: int | None, chosen: dict[str, Any], meta: dict[str, Any], path: str | None = None) -> int:
    """SmoothGrad's copies for the reading `chosen`: `--samples`, else what the card (of the
    checkpoint at `path`) saved with its best reading, checked before any line is decoded; a
    number given to a reading that takes none is refused (it was ignored)."""
    if chosen["method"] != "saliency":
        if samples:
            raise AttnlabError(f"--samples is for --method saliency, not {chosen['method']}")
        return 0
    if samples is not None:
        return check_samples(samples, "--samples")
    saved = meta.get("alignment", {}).get("samples", 0) if isinstance(meta.get("alignment"), dict) else 0
    return check_samples(saved, f"{card_of(path)} samples")


def cli_align(argv: list[str]) -> int:
    """`attnlab align --checkpoint CKPT --input PAIRS`: word links from teacher-forced cross-attention."""
    parser = ArgumentParser(
        allow_abbrev=False,
        prog="attnlab align",
        description="One line of 0-indexed Pharaoh links `i-j` (i: word of the line's left side, j: of its "
        "right side) per `source ||| target` line, read off the model's teacher-forced cross-attention.",
        epilog=EXIT_STATUS,
    )
    add_alignment_arguments(parser)
    parser.add_argument(
        "--method",
        choices=METHODS,
        help="one head (--layer, --head), a layer's head average (default layer: the last), the average of "
        "all layers, or shift (Shift-Att, Chen et al. 2020: the row where the target word is the decoder's "
        "input; all layers, or --layer), or rollout (a layer's average read through the encoder's attention "
        "rollout, Abnar & Zuidema 2020; default layer: the last), or direct (each source piece's direct share in "
        "the output piece's logit, over all layers or --layer: what the heads wrote rather than where they "
        "looked), or norm (a layer's ‖Σ_h αf(x)‖, what its heads move from each source piece, Kobayashi et al. "
        "2020; default layer: the last), or saliency (each source piece's |gradient × input| for the output "
        "piece's probability, Ding et al. 2019). Default: the model card's meta.alignment, else all",
    )
    parser.add_argument(
        "--layer",
        type=int,
        help="the decoder layer --method reads, from 0 (negative: from the top, -1 the last; alone: --method layer)",
    )
    parser.add_argument(
        "--head", type=int, help="one head of --layer, from 0 (negative: from the last, -1; --method head)"
    )
    parser.add_argument("--out", help="write the links here (default: stdout)")
    args = parser.parse_args(argv)
    if not args.checkpoint:
        raise AttnlabError("give --checkpoint")
    out = check_out(args.out, inputs={"--input": args.input}) if args.out else None
    model = load(args.checkpoint)
    if model.task != "translate":
        raise AttnlabError(f"{args.checkpoint} is a {model.task} model; alignment needs a translation model")
    method = args.method
    if method is None and (args.layer is not None or args.head is not None):
        method = "head" if args.head is not None else "layer"
    if method is None:
        chosen = best_method(model.meta, model.config, model.path)
    else:  # checked against the model now: a --layer past it failed once the first line had run
        chosen = check_reading(reading(method, args.layer, args.head), model.config)
    samples = smoothing(args.samples, chosen, model.meta, model.path)
    lines = read_input(args.input, keep_invalid=True)  # a line that is not UTF-8 fails alone
    start = time.time()
    links, threshold = link_rule(args)
    if args.links is not None or args.threshold is not None:  # the command line's rule, not the card's
        chosen = {k: v for k, v in chosen.items() if k not in ("links", "threshold")}
    links, threshold = chosen.get("links", links), chosen.get("threshold", threshold)
    invalid = invalid_lines(lines)
    kept = [i for i in range(len(lines)) if i + 1 not in invalid]
    (aligned,), unaligned = align_lines(
        model, [lines[i] for i in kept], [chosen], args.reverse_input, links, threshold, samples
    )
    found: list[Links] = [set() for _ in lines]
    for i, pairs in zip(kept, aligned, strict=True):
        found[i] = pairs
    failed = sorted([*invalid.items(), *((kept[number - 1] + 1, reason) for number, reason in unaligned)])
    for number, reason in failed:
        print(f"attnlab align: line {number}: {reason}; writing an empty line", file=sys.stderr)
    text = "".join(format_pharaoh(links) + "\n" for links in found)
    if out:
        write_out(out, text)
    else:
        write_stdout(text)
    print(
        f"attnlab align: {len(lines) - len(failed)} of {len(lines)} lines ({reading_name(chosen, samples)}, {links}) "
        f"in {time.time() - start:.1f}s",
        file=sys.stderr,
    )
    return 1 if failed else 0
